"""Errors meant for the user: one line that names the bad value and what is allowed.

CLIs print `error: <message>` and exit with status 2 for these, without a traceback.
"""


class UserError(Exception):
    """Bad input (argument, file, checkpoint, data) detected before expensive work."""


class ConfigError(UserError):
    """A bad configuration value (TOML key, CLI override, model argument)."""


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
