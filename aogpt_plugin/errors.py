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
