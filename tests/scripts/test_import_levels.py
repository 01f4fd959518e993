"""The file count and longest import chain of docs/architecture.md: counted right on a hand-made
package, and the package itself stays within the six levels issue 14 set."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from import_levels import longest_chain  # noqa: E402


def make_package(root, files: dict[str, str]):
    pkg = root / "pkg"
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_chain_follows_relative_absolute_and_function_level_imports(tmp_path):
    pkg = make_package(
        tmp_path,
        {
            "__init__.py": "from .a import x\n",
            "a.py": "from .sub import b\nx = 1\n",
            "sub/__init__.py": "",
            "sub/b.py": "def f():\n    from ..c import y\n",
            "c.py": "import pkg.d\ny = 2\n",
            "d.py": "import os\n",
        },
    )
    files, chain = longest_chain(pkg)
    assert files == 6
    assert chain == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.d"]
    _, top_only = longest_chain(pkg, module_level=True)
    assert len(top_only) == 2  # a -> sub.b (b's import of c sits inside a function); c -> d is also 2


def test_imports_under_type_checking_are_not_levels(tmp_path):
    """An `if TYPE_CHECKING:` import names a type for annotations and never runs: not a level. Its `else`
    branch runs, and the same import outside the block counts (the case that must fail the rule)."""
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import Y\nelse:\n    from .d import Z\n"
    files = {"__init__.py": "", "a.py": "from .b import x\n", "c.py": "from .d import z\n", "d.py": "z = 1\n"}
    pkg = make_package(tmp_path / "typed", {**files, "b.py": guarded + "x = 1\n"})
    assert longest_chain(pkg)[1] == ["pkg.a", "pkg.b", "pkg.d"]
    assert longest_chain(pkg, module_level=True)[1] == ["pkg.a", "pkg.b"]
    typing_attr = guarded.replace("if TYPE_CHECKING", "if typing.TYPE_CHECKING")
    pkg = make_package(tmp_path / "attr", {**files, "b.py": "import typing\n" + typing_attr + "x = 1\n"})
    assert longest_chain(pkg)[1] == ["pkg.a", "pkg.b", "pkg.d"]
    pkg = make_package(tmp_path / "plain", {**files, "b.py": "from .c import Y\nx = 1\n"})
    assert longest_chain(pkg)[1] == ["pkg.a", "pkg.b", "pkg.c", "pkg.d"]


def test_aogpt_plugin_has_at_most_six_import_levels():
    files, chain = longest_chain(ROOT / "aogpt_plugin")
    assert len(chain) <= 6, " -> ".join(chain)


def test_a_folder_that_is_no_package_is_a_one_line_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_levels.py"), "--package", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: --package") and "Traceback" not in proc.stderr
