"""Test driver: train on the installed torchtitan (CPU, under torchrun) and record every host read of a tensor a
GPU run would hold on the device, per training step.

Usage: count_host_reads.py OUT.json [--read-every-step] -- <training args>
Writes {"reads": {step: [what, ...]}, "log_steps": [...], "steps": N} (rank 0).

On a CPU every tensor is on the host, so the driver follows where each tensor would live on a GPU: the
model's parameters and buffers, and everything an operation makes from one of them or from nothing (a
factory: zeros, full, arange) is "on the device"; tensors made from Python data (`torch.tensor(...)`) and
the batches (the data loader runs outside the record) are not. A read is an operation that makes the host
wait for such a tensor's value: `.item()`, `int()`/`float()`/`bool()`, `.tolist()`, `.cpu()`, `.numpy()`,
and the operations whose output shape depends on values (nonzero, masked_select, unique, boolean indexing).
Only reads inside `train_step` count (checkpoint saves and validation run between steps).
`--read-every-step` adds a read of the loss in every step (the case the test must catch).
"""

import json
import os
import sys
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

DATA_DEPENDENT = {"nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim"}
READS = {"_local_scalar_dense", "is_nonzero", "equal", *DATA_DEPENDENT}
HOST_DATA = {"lift_fresh", "lift_fresh_copy"}  # torch.tensor(python data)
PYTHON_READS = ("tolist", "cpu", "numpy", "__array__")  # no aten op on a CPU tensor
MARK = "_aogpt_on_device"


def on_device(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, MARK, False)


class HostReads(TorchDispatchMode):
    """Marks what a GPU run would hold on the device and records reads of it (`self.step` names the step)."""

    def __init__(self, reads):
        super().__init__()
        self.reads, self.step = reads, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        device_input = any(on_device(t) for t in inputs)
        if device_input and (
            name in READS
            or (name == "index" and any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in args[1]))
        ):
            self.reads[self.step].append(name)
        out = func(*args, **kwargs)
        if device_input or (not inputs and name not in HOST_DATA):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    setattr(t, MARK, True)
        return out


def main() -> None:
    out_path, rest = sys.argv[1], sys.argv[2:]
    read_every_step = rest[:1] == ["--read-every-step"]
    rest = rest[1:] if read_every_step else rest
    assert rest[0] == "--"
    argv = rest[1:]

    import aogpt_plugin
    from aogpt_plugin.training import installed_glue, is_titan03

    glue = installed_glue()
    glue.enable_cpu()
    aogpt_plugin.register()
    if is_titan03():
        from torchtitan.trainer import Trainer
    else:
        from torchtitan.train import Trainer

    reads: dict[int, list[str]] = defaultdict(list)
    mode = HostReads(reads)
    for name in PYTHON_READS:
        original = getattr(torch.Tensor, name)

        def python_read(self, *a, _original=original, _name=name, **k):
            if mode.step is not None and on_device(self):
                reads[mode.step].append(_name)
            return _original(self, *a, **k)

        setattr(torch.Tensor, name, python_read)

    log_steps, started = [], []
    train_step = Trainer.train_step

    def counted_train_step(self, data_iterator):
        if not started:  # the first step: what a GPU run holds on the device from the start
            started.append(True)
            for model in self.model_parts:
                for t in (*model.parameters(), *model.buffers()):
                    setattr(t, MARK, True)
                if read_every_step:
                    model.register_forward_hook(lambda m, i, o: (o.sum().item(), o)[1])
        if self.metrics_processor.should_log(self.step):
            log_steps.append(self.step)

        def batches():  # the data loader runs on the host, outside the record
            while True:
                with _disable_current_modes():
                    batch = next(data_iterator)
                yield batch

        mode.step = self.step
        try:
            with mode:
                return train_step(self, batches())
        finally:
            mode.step = None

    Trainer.train_step = counted_train_step
    config, settings = glue.parse_command_line(argv)
    glue.trainer_for(0, config)()
    if int(os.environ.get("RANK", "0")) == 0:
        with open(out_path, "w") as f:
            json.dump({"reads": reads, "log_steps": log_steps, "steps": settings.training.steps}, f)


if __name__ == "__main__":
    main()
