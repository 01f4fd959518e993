"""`aogpt-data.json`: the record `aogpt data prepare` writes beside its jsonl shards.

It is read back whenever a training, validation or evaluation path names the folder, so that a copy
missing a shard (an incomplete rsync to the cluster) is one `error:` line at startup instead of a
silently smaller corpus. Only the listed shards are data; any other file in the folder is ignored.
Shard sizes are checked (cheap); the sha256 values are there for `sha256sum`-style checks after a copy.
"""

from __future__ import annotations

import json
import os

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
