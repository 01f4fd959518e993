"""torchtitan hidden from the import system, as in a Python where the training extra was never installed:
put this folder on PYTHONPATH (tests/training/test_launcher.py, scripts/fault_table.py)."""

import sys


class _NoTorchtitan:
    def find_spec(self, name, path=None, target=None):
        if name == "torchtitan" or name.startswith("torchtitan."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorchtitan())
