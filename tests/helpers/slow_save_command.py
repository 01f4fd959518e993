"""`aogpt ARGS` whose model-folder write pauses a minute once the weights are in its temporary folder, and
says "weights written" on stderr then: where a test or the fault table sends its signal.

Usage: slow_save_command.py convert|export ARGS...  (tests/test_convert.py, scripts/fault_table.py)"""

import sys
import time

import safetensors.torch

from aogpt_plugin import cli

save_file = safetensors.torch.save_file


def slow_save_file(state, path, *args, **kwargs):
    save_file(state, path, *args, **kwargs)  # the temporary folder now holds the weights
    print("weights written", file=sys.stderr, flush=True)
    time.sleep(60)


safetensors.torch.save_file = slow_save_file
sys.exit(cli.main(sys.argv[1:]))
