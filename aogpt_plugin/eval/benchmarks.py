"""The five zero-shot benchmarks as documents, read the way the SEDD/RADD/AO-GPT protocol reads them.

A "document" is the unit that gets one EOS appended before packing; it follows the Hugging Face
rows the authors load, so token streams match theirs:

  wikitext2/103  one line of the raw file (HF `Salesforce/wikitext` row); blank lines are "" and
                 so contribute a lone EOS, as they do for the authors
  ptb            one stripped line (HF `ptb_text_only` `sentence`)
  lm1b           one stripped line = one sentence (HF `dvruette/lm1b` `text`)
  lambada        one record's `text` (OpenAI `lambada_test.jsonl`)

Local copies are read from the data folder given by `--data-dir` or the AOGPT_DATA_DIR environment
variable (this repository's `make` sets it to ../shared/data); when neither is set or the file is
missing, the hub source the authors used is tried, if it can be reached.

Documents become fixed-length chunks the SEDD/RADD/AO-GPT way (`pack_documents`): BPE, EOS after
every document, concatenate, cut into n-token chunks; every token of a chunk is scored. One
difference, on purpose: the authors pack inside each `datasets.map` batch (1000 documents per batch
within each of 8 worker shards) and drop each batch's remainder, so their token stream has gaps
whose places depend on the worker count. Here the whole split is one stream and only the final
partial chunk (fewer than n tokens) is dropped; `dropped_tokens` says how many.

`aogpt eval data` (below) prints what `aogpt eval ppl` would score -- documents, tokens and chunks --
without a model.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..data.manifest import verify_shards
from ..data.shared_folder import DATA_DIR_ENV, default_data_dir, missing_folder_note
from ..data.text_files import iter_documents, list_text_files, prepared_folder
from ..devices import Reporter, print_json
from ..errors import UserError, require_at_least
from .detokenizers import DETOKENIZERS

if TYPE_CHECKING:
    import torch

PROTOCOL_SEQ_LEN = 1024  # the papers' chunk length

LAMBADA_URL = "https://openaipublic.blob.core.windows.net/gpt-2/data/lambada_test.jsonl"


@dataclass(frozen=True)
class HubSource:
    dataset: str  # HF dataset id, or a URL for LAMBADA
    config: str | None
    field: str


@dataclass(frozen=True)
class Benchmark:
    name: str
    detokenizer: str
    read_line: Callable[[str], str]  # file line (or hub row) -> document text
    local: dict[str, tuple[str, ...]]  # split -> local file, relative to the data dir
    hub: HubSource


def _wikitext_line(line: str) -> str:
    return line if line.strip() else ""  # the HF loader's rule: blank lines (" \n") become ""


def _jsonl_text(line: str) -> str:
    return json.loads(line)["text"]


BENCHMARKS: dict[str, Benchmark] = {
    "wikitext2": Benchmark(
        "wikitext2",
        "wikitext",
        _wikitext_line,
        {
            "test": ("wikitext2/wiki.test.raw",),
            "validation": ("wikitext2/wiki.valid.raw",),
            "train": ("wikitext2/wiki.train.raw",),  # the authors' (RADD's) choice; not in shared/data
        },
        HubSource("Salesforce/wikitext", "wikitext-2-raw-v1", "text"),
    ),
    "wikitext103": Benchmark(
        "wikitext103",
        "wikitext",
        _wikitext_line,
        {"test": ("wikitext103/wiki.test.raw",), "validation": ("wikitext103/wiki.valid.raw",)},
        HubSource("Salesforce/wikitext", "wikitext-103-raw-v1", "text"),
    ),
    "ptb": Benchmark(
        "ptb",
        "ptb",
        str.strip,
        {"test": ("ptb/ptb.test.txt",), "validation": ("ptb/ptb.valid.txt",)},
        HubSource("ptb-text-only/ptb_text_only", None, "sentence"),
    ),
    "lambada": Benchmark(
        "lambada",
        "lambada",
        _jsonl_text,
        {"test": ("lambada/lambada_test.jsonl",)},
        HubSource(LAMBADA_URL, None, "text"),
    ),
    "lm1b": Benchmark(
        "lm1b",
        "lm1b",
        str.strip,
        {"test": ("lm1b/news.en.heldout-00000-of-00050",)},
        HubSource("dvruette/lm1b", None, "text"),
    ),
}


@dataclass
class Documents:
    texts: list[str]  # detokenized, in dataset order
    dataset: str  # benchmark name or the path given
    split: str | None
    source: str  # the file read, or the hub id / URL
    detokenizer: str | None


def data_dir(given: str | None = None) -> Path | None:
    """The folder holding local copies of the benchmarks: `given` (--data-dir), else $AOGPT_DATA_DIR, else the
    shared data folder beside the checkout (data/shared_folder.py)."""
    folder = given or default_data_dir()
    if folder and not os.path.isdir(folder):
        source = "--data-dir" if given else DATA_DIR_ENV
        raise UserError(f"{source} {folder!r} is not a folder; give the folder holding wikitext2/, ptb/, ...")
    return Path(folder) if folder else None


def add_verify_data_arg(p) -> None:
    """`--no-verify-data`, as training's `--aogpt.no-verify-data`: score a prepared folder without its sha256 check."""
    p.add_argument(
        "--no-verify-data",
        dest="verify_data",
        action="store_false",
        help="skip the sha256 check of a prepared --dataset folder's shards against its manifest",
    )


def check_dataset_arg(dataset: str, split: str, verify: bool = False) -> None:
    """Reject an unknown name, a split the benchmark lacks, or a missing path, before any loading; with
    `verify`, a prepared folder's shards must have the sha256 its manifest records, as training checks them
    (a changed byte keeps a shard's size, which is all the listing checks)."""
    if dataset in BENCHMARKS:
        splits = BENCHMARKS[dataset].local
        if split not in splits:
            raise UserError(f"--split {split!r} does not exist for {dataset}; allowed: {', '.join(splits)}")
        return
    if not os.path.exists(dataset):
        raise UserError(
            f"--dataset {dataset!r} is neither a benchmark ({', '.join(BENCHMARKS)}) "
            "nor an existing .jsonl/.json/.txt file or folder"
        )
    list_text_files(dataset, key="--dataset")
    folder = prepared_folder(dataset)
    if verify and folder is not None:
        say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        verify_shards(folder, "--dataset", "--no-verify-data", say, "reads it anyway")


def load_documents(dataset: str, split: str = "test", folder: str | None = None) -> Documents:
    """A benchmark split (local copy under `folder` / $AOGPT_DATA_DIR, else the hub) or a local file."""
    check_dataset_arg(dataset, split)
    if dataset not in BENCHMARKS:
        files = list_text_files(dataset, key="--dataset")
        texts = [doc for f in files for doc in iter_documents(f)]
        return Documents(texts, dataset, None, dataset, None)
    bench = BENCHMARKS[dataset]
    detok = DETOKENIZERS[bench.detokenizer]
    root = data_dir(folder)
    local = _find_local(bench, split, root)
    raw, source = (_read_local(bench, local), str(local)) if local is not None else _from_hub(bench, split, root)
    return Documents([detok(t) for t in raw], dataset, split, source, bench.detokenizer)


def _find_local(bench: Benchmark, split: str, root: Path | None) -> Path | None:
    if root is None:
        return None
    for rel in bench.local[split]:
        path = root / rel
        if path.is_file():
            return path
    return None


def _read_local(bench: Benchmark, path: Path) -> list[str]:
    """Every line is a document (an empty line an empty one, as the HF loaders yield), except that
    blank lines of a JSON-lines file hold no record."""
    with open(path, encoding="utf-8") as f:
        return [bench.read_line(line) for line in f if line.strip() or bench.read_line is not _jsonl_text]


def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_hub(bench: Benchmark, split: str, root: Path | None) -> tuple[list[str], str]:
    hub = bench.hub
    wanted = f"{root / bench.local[split][0]}" if root is not None else f"$AOGPT_DATA_DIR/{bench.local[split][0]}"
    is_url = hub.dataset.startswith("https://")
    host = hub.dataset.split("/")[2] if is_url else "huggingface.co"
    offline_cache = not is_url and os.environ.get("HF_HUB_OFFLINE") == "1"  # the HF cache may still hold it
    missing = missing_folder_note() if root is None else None
    if missing and (offline_cache or not _reachable(host)):
        raise UserError(f"{bench.name} {split}: no local file, and {missing} (or pass --data-dir), or go online")
    if not offline_cache and not _reachable(host):
        raise UserError(
            f"{bench.name} {split}: no local file {wanted} and {host} cannot be reached; "
            f"put the file there (pass --data-dir or set AOGPT_DATA_DIR) or go online"
        )
    if is_url:
        import urllib.request

        with urllib.request.urlopen(hub.dataset, timeout=60) as response:
            lines = response.read().decode("utf-8").splitlines()
        return [bench.read_line(line) for line in lines if line.strip()], hub.dataset
    import datasets

    try:
        rows = datasets.load_dataset(hub.dataset, hub.config, split=split)
    except Exception as e:
        if offline_cache:  # the same fault as an unreachable hub, said the same way, with the cause
            raise UserError(
                f"{bench.name} {split}: no local file {wanted} and {host} cannot be used (HF_HUB_OFFLINE=1) "
                f"and the Hugging Face cache has no {hub.dataset} ({type(e).__name__}); put the file there "
                f"(pass --data-dir or set AOGPT_DATA_DIR) or go online"
            ) from None
        raise UserError(
            f"{bench.name} {split}: no local file {wanted} and loading {hub.dataset} failed "
            f"({type(e).__name__}: {str(e).splitlines()[0][:160]})"
        ) from None
    source = f"hf:{hub.dataset}" + (f"/{hub.config}" if hub.config else "") + f"[{split}]"
    return [bench.read_line(row) for row in rows[hub.field]], source


# ---- packing -------------------------------------------------------------------------------
@dataclass
class PackedTokens:
    chunks: torch.Tensor  # (num_chunks, seq_len) int64
    documents: int
    tokens: int  # all tokens of the split, EOS included
    dropped_tokens: int  # the final partial chunk, not scored

    @property
    def num_chunks(self) -> int:
        return self.chunks.shape[0]


def pack_documents(texts: list[str], tokenizer, seq_len: int) -> PackedTokens:
    import torch

    ids = tokenizer.encode_batch(texts, add_eos=True)
    stream = torch.tensor([t for doc in ids for t in doc], dtype=torch.long)
    usable = stream.numel() // seq_len * seq_len
    return PackedTokens(
        chunks=stream[:usable].view(-1, seq_len),
        documents=len(texts),
        tokens=stream.numel(),
        dropped_tokens=stream.numel() - usable,
    )


def add_to(subparsers) -> None:
    p = subparsers.add_parser("data", help="document / token / chunk counts of a benchmark or file (no model)")
    p.add_argument("--dataset", required=True, help=f"{', '.join(BENCHMARKS)}, or a .jsonl/.json/.txt file or folder")
    p.add_argument("--split", default="test", help="benchmark split (default test)")
    p.add_argument("--seq-len", type=int, default=PROTOCOL_SEQ_LEN, help="chunk length n (default 1024)")
    p.add_argument("--tokenizer", default="gpt2", help="gpt2 (default), a tokenizer.json, symbols:V")
    p.add_argument("--data-dir", default=None, help="folder of local benchmark copies (default $AOGPT_DATA_DIR)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_verify_data_arg(p)
    p.set_defaults(run=run_data)


def run_data(args) -> int:
    from ..data.tokenizer import load_tokenizer

    require_at_least("--seq-len", args.seq_len, 1, "the chunk length")
    check_dataset_arg(args.dataset, args.split, verify=args.verify_data)
    say = Reporter(args.json)
    tokenizer = load_tokenizer(args.tokenizer, key="--tokenizer")
    docs = load_documents(args.dataset, args.split, args.data_dir)
    packed = pack_documents(docs.texts, tokenizer, args.seq_len)
    say(
        f"data {docs.dataset} [{docs.split or 'file'}] from {docs.source} (detokenizer {docs.detokenizer}): "
        f"{packed.documents:,} documents, {packed.tokens:,} tokens with EOS -> {packed.num_chunks:,} chunks of "
        f"{args.seq_len} ({packed.dropped_tokens:,} tokens of the final partial chunk dropped)"
    )
    if args.json:
        record = {
            "command": "data",
            "dataset": docs.dataset,
            "split": docs.split,
            "source": docs.source,
            "detokenizer": docs.detokenizer,
            "tokenizer": tokenizer.name,
            "documents": packed.documents,
            "tokens": packed.tokens,
            "seq_len": args.seq_len,
            "chunks": packed.num_chunks,
            "scored_tokens": packed.num_chunks * args.seq_len,
            "dropped_tokens": packed.dropped_tokens,
        }
        print_json(record)
    return 0
