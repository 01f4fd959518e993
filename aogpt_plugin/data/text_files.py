"""Finding and reading local text corpora: jsonl/json with a `text` field, or plain .txt files.

Kept free of torchtitan so the evaluator can reuse it. In .txt files, documents are separated by
blank lines (the OpenWebText-sample layout). A folder written by `aogpt data prepare` (it holds an
aogpt-data.json) stands for the shards its manifest lists, checked to be all there (data/manifest.py).
A path under the recipes' `../shared/data` whose folder is missing is named as the missing shared data
folder, with where it was looked for.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator

from ..errors import ConfigError
from .manifest import MANIFEST, prepared_files
from .shared_folder import BESIDE_THE_CHECKOUT

TEXT_SUFFIXES = (".jsonl", ".json", ".txt")


def prepared_folder(path: str) -> str | None:
    """The prepared folder `path` names (the folder itself or its manifest), else None."""
    if path and _is_manifest(path) and os.path.isfile(path):
        path = os.path.dirname(path) or "."
    return path if path and os.path.isfile(os.path.join(path, MANIFEST)) else None


def list_text_files(path: str, key: str = "training.dataset_path") -> list[str]:
    """The corpus files at `path` (a file, a folder searched recursively, or a glob pattern), sorted; a
    prepared folder (or its manifest) gives its manifest's shards. A manifest is never read as text."""
    folder = prepared_folder(path)
    if folder is not None:
        return _checked(prepared_files(folder, key), folder, key)
    if path and glob.has_magic(path):
        files = sorted(f for f in glob.glob(path, recursive=True) if os.path.isfile(f) and not _is_manifest(f))
        if not files:
            _refuse_missing_shared_folder(path, key)
            raise ConfigError(f"{key}={path!r} matches no files; give a .jsonl/.json/.txt file, folder or pattern")
        return _checked(files, path, key)
    if not path or not os.path.exists(path):
        _refuse_missing_shared_folder(path, key)
        raise ConfigError(f"{key}={path!r} does not exist; give a .jsonl/.json/.txt file or a folder of them")
    if os.path.isfile(path):
        files = [path]
    else:
        files = sorted(
            os.path.join(root, f)
            for root, _, names in os.walk(path)
            for f in names
            if f.endswith(TEXT_SUFFIXES) and f != MANIFEST
        )
    return _checked(files, path, key)


def _refuse_missing_shared_folder(path: str, key: str) -> None:
    """When `path` names nothing because the recipes' shared data folder (`../shared/data`) is not there,
    say so, with where it was looked for, rather than that a pattern matched no files."""
    if not path or os.path.normpath(path).split(os.sep)[:3] != ["..", "shared", "data"]:
        return
    looked = os.path.realpath(os.path.join("..", "shared", "data"))
    if os.path.isdir(looked):
        return  # the folder is there: the file or pattern under it is what is wrong
    yours = f"or point {key} at your own .jsonl/.json/.txt files"
    if looked == os.path.realpath(BESIDE_THE_CHECKOUT):
        raise ConfigError(
            f"the shared data folder beside the checkout is missing: looked for {looked} ({key}={path!r} reads "
            f"it); put the data there (README), {yours}"
        )
    beside = (
        f"it is there, {BESIDE_THE_CHECKOUT}"
        if os.path.isdir(BESIDE_THE_CHECKOUT)
        else f"it is missing there too: looked for {BESIDE_THE_CHECKOUT}"
    )
    raise ConfigError(
        f"{key}={path!r} reads the shared data folder beside the checkout, from the working folder "
        f"{os.getcwd()}, where it is not ({looked}); run from the checkout ({beside}), {yours}"
    )


def _is_manifest(path: str) -> bool:
    return os.path.basename(path) == MANIFEST


def _checked(files: list[str], path: str, key: str) -> list[str]:
    bad = [f for f in files if not f.endswith(TEXT_SUFFIXES)]
    if not files or bad:
        raise ConfigError(f"{key}={path!r} holds no usable text files (allowed suffixes: {', '.join(TEXT_SUFFIXES)})")
    if len({os.path.splitext(f)[1] == ".txt" for f in files}) > 1:
        raise ConfigError(f"{key}={path!r} mixes .txt and .jsonl files; use one kind per dataset")
    return files


def iter_documents(path: str) -> Iterator[str]:
    """Documents of one file, in file order; a file that is not UTF-8 text of the expected layout is
    a ConfigError naming the file and the line."""
    try:
        yield from _documents(path)
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path!r} is not UTF-8 text (byte {e.start} of a line cannot be decoded); give text files"
        ) from None


def _documents(path: str) -> Iterator[str]:
    if path.endswith(".txt"):
        with open(path, encoding="utf-8") as f:
            doc: list[str] = []
            for line in f:
                if line.strip():
                    doc.append(line)
                elif doc:
                    yield "".join(doc).rstrip("\n")
                    doc = []
            if doc:
                yield "".join(doc).rstrip("\n")
        return
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConfigError(f"{path}:{lineno} is not a JSON object with a 'text' field") from None
            if not isinstance(text, str):
                raise ConfigError(f"{path}:{lineno} has a 'text' that is not a string ({type(text).__name__})")
            yield text


def check_text_files(files: list[str], key: str, documents: int = 64) -> None:
    """Read the first documents of every file, so an empty, binary or malformed file is one line
    now rather than a traceback on every rank once training has started."""
    for path in files:
        if os.path.getsize(path) == 0:
            raise ConfigError(f"{key}: {path!r} is empty; every training/validation file needs documents")
        try:
            first = [doc for _, doc in zip(range(documents), iter_documents(path), strict=False)]
        except ConfigError as e:
            raise ConfigError(f"{key}: {e}") from None
        if not any(doc.strip() for doc in first):
            raise ConfigError(f"{key}: {path!r} holds no text in its first {documents} documents")
