"""`aogpt eval ppl`: zero-shot perplexity of a converted model on a benchmark or a local text file."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from ..devices import Reporter, add_runtime_args, print_json, resolve_device, resolve_dtype
from ..errors import UserError, flag_name, require_at_least
from ..orders import L2R, READ_ORDERS
from .benchmarks import (
    BENCHMARKS,
    PROTOCOL_SEQ_LEN,
    add_verify_data_arg,
    check_dataset_arg,
    load_documents,
    pack_documents,
)


def add_to(subparsers) -> None:
    p = subparsers.add_parser("ppl", help="zero-shot perplexity: left to right, any order, context-order ensemble")
    p.add_argument(
        "--model", required=True, help="converted model folder (aogpt convert), or hf:NAME_OR_DIR (a GPT-2-style LM)"
    )
    p.add_argument("--dataset", required=True, help=f"{', '.join(BENCHMARKS)}, or a .jsonl/.json/.txt file or folder")
    p.add_argument("--split", default="test", help="benchmark split (default test; wikitext2 train = the authors')")
    p.add_argument("--order", required=True, choices=READ_ORDERS, help="left to right, or random orders")
    p.add_argument("--orders", type=int, default=1, metavar="K", help="random orders per chunk (default 1)")
    p.add_argument("--ensemble", type=int, default=1, metavar="M", help="context orders per conditional (Eq. 4)")
    p.add_argument("--max-chunks", type=int, default=None, metavar="N", help="score only the first N chunks")
    p.add_argument("--seq-len", type=int, default=None, help="chunk length n (default 1024, capped at the model's)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward (ensemble: x seq-len slots)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random orders and context permutations")
    p.add_argument("--data-dir", default=None, help="folder of local benchmark copies (default $AOGPT_DATA_DIR)")
    add_runtime_args(p)
    add_verify_data_arg(p)
    p.set_defaults(run=run)


def check_options(
    order: str,
    orders: int,
    ensemble: int,
    max_chunks: int | None = None,
    seq_len: int | None = None,
    batch_size: int = 8,
    spell: Callable[[str], str] = flag_name,
) -> None:
    """The scoring options' rules, shared by `aogpt eval ppl` and the Python API (`spell` names an
    option as its caller wrote it: a flag, or a keyword)."""
    if order not in READ_ORDERS:
        raise UserError(f"{spell('order')} {order!r} is not supported; allowed: {', '.join(READ_ORDERS)}")
    require_at_least(spell("orders"), orders, 1, "the number of orders per chunk K")
    require_at_least(spell("ensemble"), ensemble, 1, "the ensemble size M")
    require_at_least(spell("max_chunks"), max_chunks, 1, "the number of chunks")
    require_at_least(spell("seq_len"), seq_len, 1, "the chunk length")
    require_at_least(spell("batch_size"), batch_size, 1, "the batch size")
    if order == L2R and orders > 1:
        raise UserError(f"{spell('orders')} {orders} needs {spell('order')} random (left to right has one order)")


def chunk_length(requested: int | None, positions: int, model: str, spell: Callable[[str], str] = flag_name) -> int:
    """The chunk length n: `requested`, else the papers' 1024 capped at the model's positions."""
    if requested is None:
        return min(PROTOCOL_SEQ_LEN, positions)
    if requested > positions:
        raise UserError(
            f"{spell('seq_len')} {requested} is above the {positions} positions of {model!r}; allowed: 1..{positions}"
        )
    return requested


def check_args(args) -> None:
    check_options(args.order, args.orders, args.ensemble, args.max_chunks, args.seq_len, args.batch_size)
    check_dataset_arg(args.dataset, args.split, verify=args.verify_data)


def run(args) -> int:
    from ..model_dir import load_model_dir, read_config
    from .perplexity import perplexity_report, score_chunks

    started = time.perf_counter()
    say = Reporter(args.json)
    check_args(args)
    if args.model.startswith("hf:"):
        return run_hf(args, say, started)
    config = read_config(args.model)
    positions = config.model_args.max_seq_len
    seq_len = chunk_length(args.seq_len, positions, args.model)
    device = resolve_device(args.device)
    tokenizer = config.build_tokenizer(args.model)

    docs = load_documents(args.dataset, args.split, args.data_dir)
    packed = pack_documents(docs.texts, tokenizer, seq_len)
    if packed.num_chunks == 0:
        raise UserError(f"--dataset {args.dataset!r} has {packed.tokens} tokens, fewer than one chunk of {seq_len}")
    chunks = packed.chunks[: args.max_chunks]
    model = load_model_dir(args.model, device, resolve_dtype(args.dtype), verify=args.verify).model
    weights = config.weights

    say(f"model {args.model}: {weights} weights, step {config.step}, {positions} positions")
    say(
        f"data {docs.dataset} [{docs.split or 'file'}] from {docs.source} (detokenizer {docs.detokenizer}): "
        f"{packed.documents:,} documents, {packed.tokens:,} tokens with EOS -> {packed.num_chunks:,} chunks of "
        f"{seq_len} ({packed.dropped_tokens:,} tokens of the final partial chunk dropped)"
    )
    limit = f"--max-chunks {args.max_chunks}" if args.max_chunks is not None else "all: no --max-chunks"
    say(
        f"scoring {len(chunks):,} of {packed.num_chunks:,} chunks ({limit}), {len(chunks) * seq_len:,} tokens; "
        f"order {args.order}, K={args.orders} orders/chunk, M={args.ensemble}, seed {args.seed}, "
        f"{args.dtype} on {device}"
    )
    progress = not args.no_progress and sys.stderr.isatty()
    scores = score_chunks(model, chunks, args.order, args.orders, args.ensemble, args.seed, args.batch_size, progress)
    report = perplexity_report(scores, chunks, tokenizer.byte_lengths())
    seconds = time.perf_counter() - started
    estimates, bits_per_byte, text_bytes = report.estimates, report.bits_per_byte, report.text_bytes
    for size, e in estimates.items():
        say(
            f"M={size:<4d} ppl {e.ppl:.4f}  nll {e.nll:.5f} nats/token  {bits_per_byte[size]:.4f} bits/byte  {_se_text(e)}"
        )
    cost = report.scores.cost.as_dict()
    if args.ensemble > 1:
        say(
            f"cost {cost['computed']:,} forward slots ({cost['needed']:,} needed); the authors' way "
            f"{cost['authors']:,} ({cost['saving']:.2f}x more)"
        )
    say(f"time {seconds:.1f} s")

    final = report.final
    if args.json:
        record = {
            "command": "ppl",
            "model": args.model,
            "weights": weights,
            "step": config.step,
            "dataset": docs.dataset,
            "split": docs.split,
            "source": docs.source,
            "detokenizer": docs.detokenizer,
            "documents": packed.documents,
            "dataset_tokens": packed.tokens,
            "dataset_chunks": packed.num_chunks,
            "dropped_tokens": packed.dropped_tokens,
            "seq_len": seq_len,
            "chunks": len(chunks),
            "max_chunks": args.max_chunks,
            "tokens": len(chunks) * seq_len,
            "order": args.order,
            "orders": args.orders,
            "M": args.ensemble,
            "seed": args.seed,
            "dtype": args.dtype,
            "device": str(device),
            **final.as_dict(),
            "bits_per_byte": bits_per_byte[args.ensemble],
            "text_bytes": text_bytes,
            "ensemble": [
                {"M": size, **e.as_dict(), "bits_per_byte": bits_per_byte[size]} for size, e in estimates.items()
            ],
            "forward_slots": cost,
            "seconds": round(seconds, 3),
        }
        print_json(record)
    return 0


def run_hf(args, say, started: float) -> int:
    """`--model hf:NAME`: a Hugging Face causal LM on the same documents, detokenizer, packing (EOS
    after every document) and chunks. Like the authors' GPT-2 script it scores the n-1 tokens after
    each chunk's first (no BOS), where an aogpt model scores all n from its [None] slot."""
    import torch

    from ..data.tokenizer import TiktokenTokenizer
    from .perplexity import bits_per_byte, estimate
    from .scorers import HFScorer, check_scorer_arg, hf_config_positions

    if args.order != "l2r" or args.ensemble > 1:
        raise UserError(f"--model {args.model!r} reads left to right only; allowed: --order l2r, no --ensemble")
    check_scorer_arg(args.model, "--model")
    device = resolve_device(args.device)
    tokenizer = TiktokenTokenizer("gpt2")
    seq_len = chunk_length(args.seq_len, hf_config_positions(args.model, "--model"), args.model)
    docs = load_documents(args.dataset, args.split, args.data_dir)
    scorer = HFScorer(args.model, device, resolve_dtype(args.dtype), flag="--model")
    if not scorer.speaks("gpt2"):
        raise UserError(f"--model {args.model!r} does not use GPT-2's tokenizer; allowed: GPT-2-style causal LMs")
    packed = pack_documents(docs.texts, tokenizer, seq_len)
    if packed.num_chunks < 1 or seq_len < 2:
        raise UserError(f"--dataset {args.dataset!r}: no chunk of {seq_len} >= 2 tokens to score")
    chunks = packed.chunks[: args.max_chunks]
    say(f"model {args.model}: Hugging Face causal LM, {scorer.max_len} positions")
    say(
        f"data {docs.dataset} [{docs.split or 'file'}] from {docs.source} (detokenizer {docs.detokenizer}): "
        f"{packed.documents:,} documents -> {packed.num_chunks:,} chunks of {seq_len}; scoring {len(chunks):,}, "
        f"the {seq_len - 1} tokens after each chunk's first (as the authors' GPT-2 script)"
    )
    per_chunk = torch.zeros(len(chunks), 1, dtype=torch.float64)
    for start in range(0, len(chunks), args.batch_size):
        batch = chunks[start : start + args.batch_size].tolist()
        sums, counts = scorer.nll_sums(batch)
        per_chunk[start : start + len(batch), 0] = sums / counts
    e = estimate(per_chunk, deterministic=True)
    scored = chunks[:, 1:]
    byte_lengths = tokenizer.byte_lengths()
    bits, text_bytes = bits_per_byte(e.nll, scored, byte_lengths), int(byte_lengths[scored].sum())
    seconds = time.perf_counter() - started
    say(f"M=1    ppl {e.ppl:.4f}  nll {e.nll:.5f} nats/token  {bits:.4f} bits/byte  {_se_text(e)}")
    say(f"time {seconds:.1f} s")
    if args.json:
        print_json(
            {
                "command": "ppl",
                "model": args.model,
                "model_kind": "hf",
                "dataset": docs.dataset,
                "split": docs.split,
                "source": docs.source,
                "detokenizer": docs.detokenizer,
                "documents": packed.documents,
                "dataset_chunks": packed.num_chunks,
                "seq_len": seq_len,
                "chunks": len(chunks),
                "tokens": scored.numel(),
                "scored_per_chunk": seq_len - 1,
                "order": "l2r",
                "dtype": args.dtype,
                "device": str(device),
                **e.as_dict(),
                "bits_per_byte": bits,
                "text_bytes": text_bytes,
                "seconds": round(seconds, 3),
            }
        )
    return 0


def _se_text(e) -> str:
    parts = []
    if e.se_orders is not None:
        parts.append(f"± {e.se_orders:.5f} (SE over orders)")
    else:
        parts.append("(SE over orders needs --orders >= 2)")
    if e.se_chunks is not None:
        parts.append(f"± {e.se_chunks:.5f} (SE over chunks)")
    return "  ".join(parts)
