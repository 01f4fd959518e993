"""`aogpt data prepare openwebtext OUT` from a hub stream that takes minutes, saying "20 documents read" on
stderr early on: where a test or the fault table sends its signal.

Usage: slow_hub_prepare.py OUT  (tests/data/test_prepare.py, scripts/fault_table.py)"""

import sys
import time

from aogpt_plugin import cli
from aogpt_plugin.data import prepare


def slow_hub(source, revision):
    def texts():
        for i in range(10**6):
            if i == 20:
                print("20 documents read", file=sys.stderr, flush=True)
            time.sleep(0.01)
            yield f"document {i} " * 50

    return texts(), "fake"


prepare.prepare.__kwdefaults__["read_hub"] = slow_hub
sys.exit(cli.main(["data", "prepare", "openwebtext", sys.argv[1], "--shard-docs", "5"]))
