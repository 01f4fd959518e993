"""`aogpt data prepare SOURCE DIR`: fetch a corpus once, where there is network, into jsonl shards that
training then reads offline (`--training.dataset local --training.dataset_path DIR`; the same for
`--validation.*`). docs/data.md has the commands for the recipes' data.

SOURCE:
  openwebtext   Skylion007/openwebtext, train split, streamed from the Hugging Face hub (what
                `--training.dataset openwebtext` streams at run time)
  wikitext103   WikiText-103 raw validation (what `--validation.dataset wikitext103_validation` reads):
                the local copy $AOGPT_DATA_DIR/wikitext103/wiki.valid.raw (or --data-dir) if there,
                else Salesforce/wikitext wikitext-103-raw-v1 from the hub
  a path        .jsonl/.json/.txt files: a file, folder or glob, read as training reads them

Every non-blank document becomes one `{"text": ...}` line, in source order (blank ones are dropped:
they would only add lone EOS tokens; it is the rule the wikitext103 loader applies). The shards hold
text, not tokens, on purpose: `local` is a map-style HF dataset whose state (document index + token
buffer) resumes exactly, tokenising while reading is what streaming from the hub does already, and a
tokenizer change needs no new preparation -- one data path, not two.

DIR is written as a temporary sibling and renamed at the end, so a failure or Ctrl-C leaves no half
folder. There is no resume: a stream cannot skip what was written without reading it again, so a
re-run starts over. `--force` replaces only a folder that holds an aogpt-data.json (and nothing else).
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..errors import DiskFullError, UserError, disk_full_reason, kind_of, require_at_least, size_text, space_note
from ..temporaries import make_temporary, move_into_place
from .manifest import FORMAT, FORMAT_VERSION, MANIFEST, read_manifest
from .shared_folder import DATA_DIR_ENV, default_data_dir
from .text_files import iter_documents, list_text_files

WIKITEXT103_LOCAL = os.path.join("wikitext103", "wiki.valid.raw")
DEFAULT_SHARD_MB = 256.0
PROGRESS_SECONDS = 10.0
_TEMP_PREFIX = ".aogpt-prepare-"


@dataclass(frozen=True)
class HubSource:
    repo: str
    config: str | None
    split: str


HUB_SOURCES = {
    "openwebtext": HubSource("Skylion007/openwebtext", None, "train"),
    "wikitext103": HubSource("Salesforce/wikitext", "wikitext-103-raw-v1", "validation"),
}

# (source, revision) -> (texts in dataset order, the commit read or None); tests pass their own
HubReader = Callable[[HubSource, str | None], tuple[Iterable[str], str | None]]


def read_hub(source: HubSource, revision: str | None) -> tuple[Iterable[str], str | None]:
    """The split's texts streamed from the hub (no second, Arrow copy in the HF cache), and its commit."""
    import datasets

    rows = datasets.load_dataset(source.repo, source.config, split=source.split, streaming=True, revision=revision)
    return (row["text"] for row in rows), _hub_commit(source.repo, revision)


def _hub_commit(repo: str, revision: str | None) -> str | None:
    """The commit sha that `revision` (default: main) is, for the manifest; the name given if the hub
    cannot say."""
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(repo, revision=revision).sha
    except Exception:
        return revision


# ---- the source ---------------------------------------------------------------------------
def open_source(
    source: str, revision: str | None, data_dir: str | None, reader: HubReader
) -> tuple[Iterator[str], dict]:
    """SOURCE's documents (lazily) and what the manifest records about where they came from."""
    if source == "wikitext103" and revision is None:
        local = _wikitext103_copy(data_dir)
        if local is not None:
            return _guarded(_lines(local), source), {"origin": local, "split": "validation", "revision": None}
    if source in HUB_SOURCES:
        hub = HUB_SOURCES[source]
        try:
            texts, commit = reader(hub, revision)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"{source}: cannot read {_hub_name(hub)} from the Hugging Face hub ({_why(e)})") from None
        return _guarded(texts, source, hub), {"origin": f"hf:{_hub_name(hub)}", "split": hub.split, "revision": commit}
    if revision is not None:
        raise UserError(f"--revision {revision!r} applies to the hub sources only ({', '.join(HUB_SOURCES)})")
    if data_dir is not None:
        raise UserError(f"--data-dir {data_dir!r} applies to wikitext103 only (the folder of its local copy)")
    files = _local_files(source)
    docs = (doc for f in files for doc in iter_documents(f))
    return _guarded(docs, source), {"origin": source, "split": None, "revision": None, "inputs": files}


def _hub_name(hub: HubSource) -> str:
    return f"{hub.repo}" + (f"/{hub.config}" if hub.config else "") + f" [{hub.split}]"


def _why(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0][:200]
    offline = "; offline mode is set (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE): run this where the hub can be reached"
    offline = offline if _offline() else ""
    return f"{type(e).__name__}: {first}{offline}"


def _offline() -> bool:
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _wikitext103_copy(data_dir: str | None) -> str | None:
    folder = data_dir or default_data_dir()
    if data_dir and not os.path.isdir(data_dir):
        raise UserError(f"--data-dir {data_dir!r} is not a folder; give the folder holding {WIKITEXT103_LOCAL}")
    path = os.path.join(folder, WIKITEXT103_LOCAL) if folder else None
    return path if path and os.path.isfile(path) else None


def _lines(path: str) -> Iterator[str]:
    """The raw file's lines with their newline: the rows of the HF wikitext dataset."""
    with open(path, encoding="utf-8") as f:
        yield from f


def _local_files(source: str) -> list[str]:
    exists = any(os.path.isfile(f) for f in glob.glob(source, recursive=True)) if glob.has_magic(source) else None
    if exists is False or (exists is None and not os.path.exists(source)):
        raise UserError(
            f"SOURCE {source!r} is neither {' nor '.join(HUB_SOURCES)} nor an existing "
            ".jsonl/.json/.txt file, folder or glob"
        )
    return list_text_files(source, key="SOURCE")


def _guarded(texts: Iterable[str], source: str, hub: HubSource | None = None) -> Iterator[str]:
    """The texts, but a failure while reading them (the network, a bad file) is one line naming SOURCE."""
    it = iter(texts)
    read = 0
    while True:
        try:
            text = next(it)
        except StopIteration:
            return
        except UserError:
            raise
        except Exception as e:
            where = _hub_name(hub) if hub else repr(source)
            raise UserError(
                f"{source}: reading {where} failed after {read} documents ({_why(e)}); nothing was written"
            ) from None
        if not isinstance(text, str):
            raise UserError(f"{source}: document {read} is a {type(text).__name__}, not text")
        read += 1
        yield text


# ---- the output folder --------------------------------------------------------------------
def check_out_dir(out_dir: str, force: bool) -> None:
    """DIR can be (re)placed: absent or empty, or with --force a prepared folder holding nothing else
    (replacing deletes it, so no file a user put there may be in it). Checked before any download."""
    if os.path.isfile(out_dir) or kind_of(out_dir):
        raise UserError(f"DIR {out_dir!r} is {kind_of(out_dir) or 'a file'}; give a folder path")
    parent = os.path.dirname(os.path.abspath(out_dir))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise UserError(f"DIR {out_dir!r} cannot be created: {parent!r} is not a writable folder")
    if not os.path.isdir(out_dir) or not os.listdir(out_dir):
        return
    manifest = read_manifest(out_dir)
    if manifest is None:
        raise UserError(
            f"DIR {out_dir!r} exists and is not a prepared data folder (no {MANIFEST}); choose a new or empty "
            "folder (--force replaces only a folder `aogpt data prepare` wrote)"
        )
    if not force:
        raise UserError(
            f"DIR {out_dir!r} already holds prepared data ({manifest.get('documents')} documents from "
            f"{manifest.get('source')}); pass --force to replace it"
        )
    ours = {MANIFEST, *(s.get("name") for s in manifest.get("shards", []) if isinstance(s, dict))}
    others = sorted(set(os.listdir(out_dir)) - ours)
    if others:
        raise UserError(
            f"DIR {out_dir!r} holds {others[0]!r}, which is not part of the prepared data; --force would delete "
            "it: move it out or choose a new folder"
        )


class _ShardWriter:
    """jsonl shards of at most `shard_docs` documents / about `shard_bytes` bytes, hashed as written."""

    def __init__(self, folder: str, shard_docs: int | None, shard_bytes: int, report: Callable[[float], None]):
        self.folder, self.shard_docs, self.shard_bytes, self.report = folder, shard_docs, shard_bytes, report
        self.shards: list[dict] = []
        self.documents = self.bytes = self.text_bytes = 0
        self._f = None

    def write(self, text: str) -> None:
        if self._f is None:
            self._name = f"shard-{len(self.shards):05d}.jsonl"
            self._f = open(os.path.join(self.folder, self._name), "wb")  # closed in _close
            self._hash, self._docs, self._bytes = hashlib.sha256(), 0, 0
        line = (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode("utf-8")
        self._f.write(line)
        self._hash.update(line)
        self._docs += 1
        self._bytes += len(line)
        self.documents += 1
        self.bytes += len(line)
        self.text_bytes += len(text.encode("utf-8"))
        if (self.shard_docs and self._docs >= self.shard_docs) or self._bytes >= self.shard_bytes:
            self._close()

    def _close(self) -> None:
        self._f.close()
        self._f = None
        entry = {"name": self._name, "documents": self._docs, "bytes": self._bytes, "sha256": self._hash.hexdigest()}
        self.shards.append(entry)
        self.report(1.0)  # a shard is done: say so, at most once a second

    def finish(self) -> None:
        if self._f is not None:
            self._close()

    def abandon(self) -> None:
        """Close the open shard without recording it (a failed or stopped run)."""
        if self._f is not None:
            try:
                self._f.close()
            except OSError:  # its last buffered bytes do not fit either: the file is removed anyway
                pass
            self._f = None


# ---- preparing ----------------------------------------------------------------------------
def prepare(
    source: str,
    out_dir: str,
    *,
    shard_docs: int | None = None,
    shard_mb: float | None = None,
    max_docs: int | None = None,
    revision: str | None = None,
    data_dir: str | None = None,
    force: bool = False,
    command: str | None = None,
    read_hub: HubReader = read_hub,
    progress=None,
) -> dict:
    """Write SOURCE's documents to DIR as jsonl shards plus aogpt-data.json; returns the manifest.

    `read_hub` reads the hub sources (a test passes a fake: no test needs the network); `progress`
    is the stream for progress lines (default stderr)."""
    progress = sys.stderr if progress is None else progress
    require_at_least("--shard-docs", shard_docs, 1, "documents per shard")
    require_at_least("--max-docs", max_docs, 1, "documents to write")
    shard_mb = DEFAULT_SHARD_MB if shard_mb is None else shard_mb
    if not shard_mb > 0:
        raise UserError(f"--shard-mb {shard_mb}: megabytes per shard must be > 0")
    check_out_dir(out_dir, force)
    texts, origin = open_source(source, revision, data_dir, read_hub)

    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = make_temporary(parent, _TEMP_PREFIX)
    started = time.monotonic()
    last = [started]

    def report(min_gap: float) -> None:
        now = time.monotonic()
        if now - last[0] >= min_gap:
            last[0] = now
            print(
                f"prepare: {writer.documents:,} documents, {writer.bytes / 1e6:,.1f} MB, "
                f"{_shards(len(writer.shards))} ({writer.bytes / 1e6 / max(now - started, 1e-9):,.1f} MB/s)",
                file=progress,
                flush=True,
            )

    writer = _ShardWriter(tmp, shard_docs, int(shard_mb * 1e6), report)
    try:
        os.chmod(tmp, 0o755)
        skipped = 0
        for text in texts:
            if not text.strip():
                skipped += 1
                continue
            writer.write(text)
            if writer.documents == max_docs:
                break
            report(PROGRESS_SECONDS)
        writer.finish()
        if writer.documents == 0:
            blanks = f" ({skipped} blank ones skipped)" if skipped else ""
            raise UserError(f"SOURCE {source!r} holds no documents{blanks}; give a corpus with text")
        report(0.0)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "source": source,
            **origin,
            "documents": writer.documents,
            "skipped_blank": skipped,
            "text_bytes": writer.text_bytes,
            "bytes": writer.bytes,
            "shard_docs": shard_docs,
            "shard_mb": shard_mb,
            "max_docs": max_docs,
            "shards": writer.shards,
            "command": command,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - started, 2),
            "aogpt_version": _version(),
        }
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, ensure_ascii=False)
            f.write("\n")
        check_out_dir(out_dir, force)  # again: it may have changed during a long download
        move_into_place(tmp, out_dir)
    except BaseException as e:
        written = f"{writer.documents:,} documents ({size_text(writer.bytes)})"
        writer.abandon()
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, KeyboardInterrupt):  # Ctrl-C / SIGTERM: the command's one line says what is left
            e.detail = getattr(e, "detail", None) or (
                f"DIR {out_dir!r} was not written (its temporary folder, {written}, was removed)"
            )
            raise
        if not isinstance(e, OSError):
            raise
        needed = sum(os.path.getsize(f) for f in origin.get("inputs") or [origin["origin"]] if os.path.isfile(f))
        reason = disk_full_reason(e, parent, needed or None)
        if reason is not None:
            source_size = f"the source's files take {size_text(needed)}; " if needed else ""
            raise DiskFullError(
                f"the disk is full: writing DIR {out_dir!r} failed after {written} ({reason}) and its temporary "
                f"folder was removed; {source_size}{space_note(parent, None)}"
            ) from None
        raise UserError(f"cannot write DIR {out_dir!r}: {e.strerror or e}") from None
    return manifest


def _shards(n: int) -> str:
    return f"{n} shard" + ("" if n == 1 else "s")


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aogpt")
    except PackageNotFoundError:
        return None


# ---- the command --------------------------------------------------------------------------
def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "data", help="fetch a corpus once (hub or local files) into jsonl shards for offline training"
    )
    sub = p.add_subparsers(dest="data_command", required=True, metavar="{prepare}")
    q = sub.add_parser("prepare", help="SOURCE -> DIR of jsonl shards + aogpt-data.json (train offline from DIR)")
    q.add_argument(
        "source", metavar="SOURCE", help=f"{', '.join(HUB_SOURCES)}, or a .jsonl/.json/.txt file, folder or glob"
    )
    q.add_argument("out_dir", metavar="DIR", help="the folder to write (must not exist, or be empty, unless --force)")
    q.add_argument("--shard-mb", type=float, default=None, help=f"megabytes per shard (default {DEFAULT_SHARD_MB:g})")
    q.add_argument("--shard-docs", type=int, default=None, help="also close a shard after this many documents")
    q.add_argument("--max-docs", type=int, default=None, help="stop after this many documents (a trial slice)")
    q.add_argument(
        "--revision",
        default=None,
        help="hub commit, branch or tag to read (default main); wikitext103 then reads the hub, not the local copy",
    )
    q.add_argument(
        "--data-dir",
        default=None,
        help=f"wikitext103: the folder holding {WIKITEXT103_LOCAL} (default ${DATA_DIR_ENV})",
    )
    q.add_argument(
        "--force", action="store_true", help="replace DIR if it is a prepared folder (once the new one is complete)"
    )
    q.set_defaults(run=run)


def command_line(args) -> str:
    """The command as a user would type it again, for the manifest."""
    parts = ["aogpt", "data", "prepare", args.source, args.out_dir]
    for flag in ("shard_mb", "shard_docs", "max_docs", "revision", "data_dir"):
        value = getattr(args, flag)
        if value is not None:
            parts += [f"--{flag.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(parts + (["--force"] if args.force else []))


def run(args) -> int:
    m = prepare(
        args.source,
        args.out_dir,
        shard_docs=args.shard_docs,
        shard_mb=args.shard_mb,
        max_docs=args.max_docs,
        revision=args.revision,
        data_dir=args.data_dir,
        force=args.force,
        command=command_line(args),
    )
    section = "validation" if args.source == "wikitext103" else "training"
    print(
        f"prepared {m['documents']:,} documents ({m['bytes'] / 1e6:,.1f} MB) in {_shards(len(m['shards']))} "
        f"in {m['seconds']:.1f} s -> {args.out_dir}; use it with --{section}.dataset local "
        f"--{section}.dataset_path {shlex.quote(args.out_dir)}"
    )
    return 0
