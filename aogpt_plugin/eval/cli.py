"""`aogpt eval ppl ...`, `aogpt eval genppl ...` and `aogpt eval data ...` (see docs/evaluation.md).

`data` lives here: what `aogpt eval ppl` would score -- documents, tokens and chunks -- without a model.
"""

from __future__ import annotations

from ..devices import Reporter, print_json
from ..errors import require_at_least
from . import genppl_command, ppl_command
from .benchmarks import BENCHMARKS, PROTOCOL_SEQ_LEN, check_dataset_arg, load_documents, pack_documents


def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="zero-shot perplexity (ppl), generation perplexity (genppl), benchmark counts (data)"
    )
    sub = p.add_subparsers(dest="eval_command", required=True, metavar="{ppl,genppl,data}")
    ppl_command.add_to(sub)
    genppl_command.add_to(sub)
    add_data_command(sub)


def add_data_command(subparsers) -> None:
    p = subparsers.add_parser("data", help="document / token / chunk counts of a benchmark or file (no model)")
    p.add_argument("--dataset", required=True, help=f"{', '.join(BENCHMARKS)}, or a .jsonl/.json/.txt file or folder")
    p.add_argument("--split", default="test", help="benchmark split (default test)")
    p.add_argument("--seq-len", type=int, default=PROTOCOL_SEQ_LEN, help="chunk length n (default 1024)")
    p.add_argument("--tokenizer", default="gpt2", help="gpt2 (default), a tokenizer.json, symbols:V")
    p.add_argument("--data-dir", default=None, help="folder of local benchmark copies (default $AOGPT_DATA_DIR)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run_data)


def run_data(args) -> int:
    from ..data.tokenizer import load_tokenizer

    require_at_least("--seq-len", args.seq_len, 1, "the chunk length")
    check_dataset_arg(args.dataset, args.split)
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
