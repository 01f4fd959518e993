"""Test driver: the training launcher (`python -m aogpt_plugin.train ARGS`) whose checkpoint saves,
from the N-th on, write their data slowly, so that a signal can be sent while one is being written.

Usage: slow_save_train.py N SECONDS ARGS...  (each data item of save N and later waits SECONDS;
`writing checkpoint data` is printed to stderr when such a save starts writing)
With AOGPT_SLOW_SAVE=stream the wait is inside torch.save's writes instead (each write to the item's stream
waits SECONDS), so a signal lands inside the zip writer, whose C++ side turns it into `unexpected pos`.
"""

import os
import runpy
import sys
import time

import torch
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

    class SlowStream:
        def __init__(self, stream):
            self.stream = stream

        def write(self, data):
            time.sleep(seconds)
            return self.stream.write(data)

        def __getattr__(self, name):
            return getattr(self.stream, name)

    save = torch.save

    def slow_stream_save(obj, f, *args, **kwargs):
        if saves[0] >= first_slow and hasattr(f, "write"):
            f = SlowStream(f)
        return save(obj, f, *args, **kwargs)

    filesystem._FileSystemWriter.write_data = counted_write_data
    if os.environ.get("AOGPT_SLOW_SAVE") == "stream":
        torch.save = slow_stream_save
    else:
        filesystem._write_item = slow_write_item
    sys.argv = ["aogpt_plugin.train", *sys.argv[3:]]
    runpy.run_module("aogpt_plugin.train", run_name="__main__")


if __name__ == "__main__":
    main()
