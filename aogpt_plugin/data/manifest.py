"""`aogpt-data.json`: the record `aogpt data prepare` writes beside its jsonl shards.

It is read back whenever a training, validation or evaluation path names the folder, so that a copy
missing a shard (an incomplete rsync to the cluster) is one `error:` line at startup instead of a
silently smaller corpus. Only the listed shards are data; any other file in the folder is ignored.
Shard sizes are checked whenever the folder is read (cheap). Before training, each shard's bytes
are also checked against the sha256 the manifest records (`verify_shards`; a flipped byte keeps the
size), once per file: a shard whose path, size and modification time are unchanged since it last
matched is not hashed again (the record is kept in $AOGPT_CACHE_DIR, default ~/.cache/aogpt, not in
the folder, so a fresh copy of it is hashed).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable

from ..errors import ConfigError

MANIFEST = "aogpt-data.json"
FORMAT = "aogpt-data"
FORMAT_VERSION = 1


def read_manifest(folder: str) -> dict | None:
    """The folder's manifest, or None when it has none or the file is not ours (not a prepared folder)."""
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and raw.get("format") == FORMAT else None


def prepared_files(folder: str, key: str) -> list[str]:
    """The shards a prepared folder's manifest lists, each checked to be present at its recorded size."""
    manifest = read_manifest(folder)
    if manifest is None or not isinstance(manifest.get("shards"), list):
        raise ConfigError(
            f"{key}={folder!r}: {MANIFEST} there is not a readable `aogpt data prepare` manifest; "
            "prepare the folder again or point at its .jsonl files"
        )
    shards = manifest["shards"]
    paths = [os.path.join(folder, s["name"]) for s in shards]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise ConfigError(
            f"{key}={folder!r}: {len(missing)} of the {len(shards)} shards its {MANIFEST} lists are missing "
            f"(first: {os.path.basename(missing[0])}); copy the whole folder again or re-run `aogpt data prepare`"
        )
    for shard, path in zip(shards, paths, strict=True):
        size = os.path.getsize(path)
        if size != shard["bytes"]:
            raise ConfigError(
                f"{key}={folder!r}: shard {shard['name']} has {size} bytes but {MANIFEST} records {shard['bytes']} "
                "(a truncated or changed copy); copy the whole folder again or re-run `aogpt data prepare`"
            )
    return paths


def file_sha256(path: str) -> str:
    """The sha256 of a file, read in 1 MiB blocks (shards, model weights, tokenizer files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


CACHE_ENV = "AOGPT_CACHE_DIR"
VERIFIED_FILE = "verified-shards.json"  # {real path: [size, mtime_ns, sha256]} of shards that matched


def cache_dir() -> str:
    """Where aogpt keeps what it may skip next time: $AOGPT_CACHE_DIR, else $XDG_CACHE_HOME/aogpt, else ~/.cache/aogpt."""
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "aogpt")


@contextlib.contextmanager
def _locked(path: str):
    """An exclusive lock on `path` for the block (none where it cannot be taken: that only costs hashing again)."""
    lock = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = open(path, "a")  # noqa: SIM115 - held for the block
        fcntl.flock(lock, fcntl.LOCK_EX)
    except OSError:
        pass
    try:
        yield
    finally:
        if lock is not None:
            lock.close()


def _read_record(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


@contextlib.contextmanager
def _verified_record(dataset: str):
    """(the record of shards that matched their sha256, the ones that match now) for checking `dataset`'s
    shards under a lock of that folder (so the ranks of one node hash a shard once: the first hashes, the others find it
    recorded; other datasets do not wait), merged back into the one record under its own short lock."""
    path = os.path.join(cache_dir(), VERIFIED_FILE)
    folder_lock = f"{path}.{hashlib.sha256(os.path.realpath(dataset).encode()).hexdigest()[:16]}.lock"
    with _locked(folder_lock):
        record = _read_record(path)
        found = {}
        try:
            yield record, found
        finally:  # also after a bad shard or a Ctrl-C: the shards that matched need no second reading
            if found:
                with _locked(path + ".lock"):
                    merged = _read_record(path) | found
                    _write_record(path, {k: v for k, v in merged.items() if os.path.exists(k)})  # gone: forgotten


def _write_record(path: str, record: dict) -> None:
    """Replace the record whole; one that cannot be written (a full disk) is simply not kept."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{VERIFIED_FILE}.", dir=os.path.dirname(path))
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def verify_shards(
    folder: str,
    key: str,
    skip_flag: str,
    report: Callable[[str], None] | None = None,
    skipped: str = "trains on it anyway",
) -> int:
    """Every shard of a prepared folder has the sha256 its manifest records (a changed byte is one
    ConfigError naming the shard); shards unchanged since they last matched are not read again.
    `skip_flag` is the option that skips this check, named in the error with what it does then
    (`skipped`); `report(line)` is told before hashing starts. Returns the number of shards hashed now."""
    paths = prepared_files(folder, key)  # present, at their recorded sizes
    shards = read_manifest(folder)["shards"]
    hashed = 0
    with _verified_record(folder) as (verified, matched):
        todo = []
        for shard, path in zip(shards, paths, strict=True):
            st = os.stat(path)
            entry = [st.st_size, st.st_mtime_ns, shard.get("sha256")]
            if verified.get(os.path.realpath(path)) != entry:
                todo.append((shard, path, entry))
        if todo and report is not None:
            total = sum(entry[0] for _, _, entry in todo)
            report(
                f"verifying {len(todo)} of the {len(shards)} shards of {folder!r} ({total / 1e9:.2f} GB) against the "
                f"sha256 in {MANIFEST} (once: unchanged shards are not hashed again; {skip_flag} skips it)"
            )
        for shard, path, entry in todo:
            if file_sha256(path) != shard.get("sha256"):
                raise ConfigError(
                    f"{key}={folder!r}: shard {shard['name']} does not match the sha256 its {MANIFEST} records "
                    f"(a corrupt or changed copy); copy the whole folder again or re-run `aogpt data prepare` "
                    f"({skip_flag} {skipped})"
                )
            matched[os.path.realpath(path)] = entry
            hashed += 1
    return hashed
