"""Test driver: the training launcher (`python -m aogpt_plugin.train ARGS`) whose checkpoint saves,
from the N-th on, write their data slowly, so that a signal can be sent while one is being written.

Usage: slow_save_train.py N SECONDS ARGS...  (each data item of save N and later waits SECONDS;
`writing checkpoint data` is printed to stderr when such a save starts writing)
"""

import runpy
import sys
import time

from torch.distributed.checkpoint import filesystem


def main() -> None:
    first_slow, seconds = int(sys.argv[1]), float(sys.argv[2])
    saves = [0]
    write_data, write_item = filesystem._FileSystemWriter.write_data, filesystem._write_item

    def counted_write_data(self, *args, **kwargs):
        saves[0] += 1
        if saves[0] >= first_slow:
            print("writing checkpoint data", file=sys.stderr, flush=True)
        return write_data(self, *args, **kwargs)

    def slow_write_item(*args, **kwargs):
        if saves[0] >= first_slow:
            time.sleep(seconds)
        return write_item(*args, **kwargs)

    filesystem._FileSystemWriter.write_data = counted_write_data
    filesystem._write_item = slow_write_item
    sys.argv = ["aogpt_plugin.train", *sys.argv[3:]]
    runpy.run_module("aogpt_plugin.train", run_name="__main__")


if __name__ == "__main__":
    main()
