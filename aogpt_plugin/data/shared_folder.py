"""Where the offline data is found with nothing exported: $AOGPT_DATA_DIR, else the shared data folder beside
the checkout (`../shared/data`: the evaluation sets, the Wikipedia corpus, GPT-2's tiktoken cache), so a new
shell finds what `make` finds. Without either (online use, an installed package), nothing changes."""

from __future__ import annotations

import os

DATA_DIR_ENV = "AOGPT_DATA_DIR"
TIKTOKEN_ENV = "TIKTOKEN_CACHE_DIR"
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BESIDE_THE_CHECKOUT = os.path.normpath(os.path.join(_CHECKOUT, "..", "shared", "data"))


def default_data_dir() -> str | None:
    """$AOGPT_DATA_DIR when set, else ../shared/data beside the checkout when it is there, else None."""
    given = os.environ.get(DATA_DIR_ENV)
    if given:
        return given
    return BESIDE_THE_CHECKOUT if os.path.isdir(BESIDE_THE_CHECKOUT) else None


def missing_folder_note() -> str | None:
    """With no data folder to be found ($AOGPT_DATA_DIR unset, none beside the checkout): what is missing, where
    it was looked for and how to point elsewhere, for the message of whatever needed it; else None."""
    if os.environ.get(DATA_DIR_ENV) or os.path.isdir(BESIDE_THE_CHECKOUT):
        return None
    return (
        f"the shared data folder beside the checkout is missing (looked for {BESIDE_THE_CHECKOUT}): put it there, "
        f"or set {DATA_DIR_ENV} to a data folder"
    )


def use_shared_tiktoken_cache() -> None:
    """With $TIKTOKEN_CACHE_DIR unset, point tiktoken at the data folder's `tiktoken_cache` if it has one
    (GPT-2's BPE offline); a cache the user set is never replaced."""
    if os.environ.get(TIKTOKEN_ENV):
        return
    folder = default_data_dir()
    cache = os.path.join(folder, "tiktoken_cache") if folder else None
    if cache and os.path.isdir(cache):
        os.environ[TIKTOKEN_ENV] = cache
