"""Lines other libraries print at import that say nothing about a run, dropped at aogpt's entry points (the
training launcher, `scripts/make_gpt2_standin.py`, loading an exported folder with transformers, a GPT-2
scorer): torchao's absent CUDA kernels and triton on a CPU (`Failed to load .../_C_mxfp8...so`), and torch's
deprecation of the Enum registration torchao makes (`... is an Enum subclass and is now natively supported`).

Matched by logger and message, so anything else these libraries say (an error, another warning) still
shows. Standard library only: hf_export.py copies this file into the exported modeling code.
"""

import logging


class DropKnownLines(logging.Filter):
    """Drops the records of one logger whose message contains one of `parts`."""

    def __init__(self, parts: tuple[str, ...]) -> None:
        super().__init__()
        self.parts = parts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not any(part in message for part in self.parts)


def library_noise(accelerator: bool) -> dict[str, tuple[str, ...]]:
    """{logger: message parts} of the known harmless lines; torchao's missing kernels only without an accelerator."""
    cpu_only = () if accelerator else ("Failed to load", "Detected no triton")
    return {
        "torchao": cpu_only,
        "torchao.kernel.intmm": cpu_only,
        "torch.utils._pytree": ("is an Enum subclass and is now natively supported by torch.compile",),
    }


def quiet_library_noise(accelerator: bool) -> None:
    """Drop the lines of `library_noise` (idempotent; call before the import that prints them)."""
    for name, parts in library_noise(accelerator).items():
        log = logging.getLogger(name)
        if parts and not any(isinstance(f, DropKnownLines) for f in log.filters):
            log.addFilter(DropKnownLines(parts))
