"""Which torchtitan is installed: the one fact that picks the glue (titan022/ or titan03/) and that a
checkpoint record keeps, so that a checkpoint 0.2.2 cannot resume is refused before it loads."""

from importlib.metadata import PackageNotFoundError, version


def torchtitan_version() -> str:
    """The installed torchtitan's version ("" when none is)."""
    try:
        return version("torchtitan")
    except PackageNotFoundError:
        return ""


def is_titan03() -> bool:
    return torchtitan_version().startswith("0.3")
