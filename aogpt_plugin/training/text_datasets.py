"""The text datasets aogpt adds to torchtitan's dataset table (`--training.dataset NAME`): how each is
loaded (Hugging Face `datasets`), and their registration, which both torchtitan versions' tables take
alike (`register_datasets`, called by each version's entry points before a config is checked)."""

from __future__ import annotations

from typing import Any

from ..data.text_files import list_text_files

OPENWEBTEXT = "Skylion007/openwebtext"


def load_local_text(path: str):
    """A map-style HF dataset over local .jsonl/.json (field `text`) or .txt files."""
    from datasets import load_dataset

    files = list_text_files(path)
    if files[0].endswith(".txt"):
        return load_dataset("text", data_files=files, sample_by="paragraph", split="train")
    return load_dataset("json", data_files=files, split="train")


def load_openwebtext(path: str):
    """OpenWebText streamed from the Hugging Face hub (or any hub id / local copy given as path)."""
    from datasets import load_dataset

    return load_dataset(path or OPENWEBTEXT, split="train", streaming=True)


def load_wikitext103_validation(path: str):
    """WikiText-103 raw validation split from the hub (the authors' in-training validation stream)."""
    from datasets import load_dataset

    ds = load_dataset(path or "Salesforce/wikitext", "wikitext-103-raw-v1", split="validation")
    return ds.filter(lambda row: row["text"].strip() != "")  # blank lines would become lone EOS tokens


def _text(sample: dict[str, Any]) -> str:
    return sample["text"]


# name -> (default path, loader, sample -> text)
DATASETS = {
    "openwebtext": (OPENWEBTEXT, load_openwebtext, _text),
    "local": ("", load_local_text, _text),
    "wikitext103_validation": ("Salesforce/wikitext", load_wikitext103_validation, _text),
}


def register_datasets() -> None:
    """Add aogpt's datasets to the installed torchtitan's DATASETS table (idempotent)."""
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS as TORCHTITAN_DATASETS

    for name, (path, loader, text) in DATASETS.items():
        TORCHTITAN_DATASETS.setdefault(name, DatasetConfig(path=path, loader=loader, sample_processor=text))
