"""Errors meant for the user: one line that names the bad value and what is allowed.

CLIs print `error: <message>` and exit with status 2 for these, without a traceback.
"""

import os
import sys


class UserError(Exception):
    """Bad input (argument, file, checkpoint, data) detected before expensive work."""


class ConfigError(UserError):
    """A bad configuration value (TOML key, CLI override, model argument)."""


class InputError(UserError, ValueError):
    """A bad value passed to the Python API (`aogpt_plugin.load` and the model it returns): a UserError
    with the same one-line message, and a ValueError, so Python code catches it as it expects."""


def require_at_least(flag: str, value: int | None, low: int, meaning: str) -> None:
    """A numeric CLI argument below its floor is a UserError naming the flag, e.g. `--orders 0`."""
    if value is not None and value < low:
        raise UserError(f"{flag} {value}: {meaning} must be >= {low}")


def check_writable(path: str, flag: str) -> None:
    """A file the command will write at the end can be written, checked before any work is done."""
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"{flag} {path!r} is a folder; give a file path")
    if not os.path.isdir(folder):
        raise UserError(f"{flag} {path!r} cannot be written: its folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UserError(f"{flag} {path!r} cannot be written (permission denied)")


def exit_in_one_line_on_user_error() -> None:
    """For entry points we do not own (stock `-m torchtitan.train`, which runs our config function,
    tyro's parse of our sections and our Trainer inside its own main): a UserError nobody caught ends
    as `error: <message>` on rank 0's stderr and exit status 2, as our own commands end, not as one
    traceback per rank. Other exceptions keep the hook that was there."""
    previous = sys.excepthook
    if getattr(previous, "aogpt_user_errors", False):
        return

    def hook(kind, value, tb):
        if not issubclass(kind, UserError):
            return previous(kind, value, tb)
        if os.environ.get("RANK", "0") == "0":  # the real stderr: torch.distributed's hook wraps ours in a buffer
            print(f"error: {value}", file=sys.__stderr__, flush=True)
        sys.stdout.flush()
        os._exit(2)  # the status our commands give a user error (after an uncaught exception Python gives 1)

    hook.aogpt_user_errors = True
    sys.excepthook = hook
