"""Train a tiny GPT-2 with transformers' own GPT2LMHeadModel: the stand-in for a real GPT-2 checkpoint.

    python scripts/make_gpt2_standin.py outputs/gpt2_standin              # about 4 minutes on 2 CPU cores
    python scripts/make_gpt2_standin.py /tmp/g --steps 10 --force         # a pipeline check

OUT is a Hugging Face folder (config.json + model.safetensors) of aogpt's `gpt2-tiny` shapes (4 layers,
128 wide, 4 heads, 256 positions), so everything that reads a real GPT-2 reads it: `aogpt convert
--from-hf OUT`, `--model.flavor gpt2-tiny --checkpoint.initial_load_path OUT
--checkpoint.initial_load_in_hf`. With GPT-2's tokenizer (the default) its head is 50257 x 128 and
dominates the CPU time; `--tokenizer T.json` (a small byte-level BPE, `aogpt tokenizer train`, copied
into OUT) makes it a few times faster, and then aogpt reads the folder with `--tokenizer
OUT/tokenizer.json` (convert) or `--aogpt.tokenizer` (training). It learns as GPT-2 did: the
training shards of the Wikipedia corpus (`train_corpus/enwiki2015_train_*.jsonl`, never the held-out
file or an evaluation set), each document followed by <|endoftext|>, packed into consecutive windows
of seq_len + 1 tokens, every next token predicted; AdamW with warm-up and a cosine decay. Seeded (init
and window order): the same command writes the same weights on the same machine and torch.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAIN_GLOB = "../shared/data/train_corpus/enwiki2015_train_*.jsonl"
SHAPE = {"n_layer": 4, "n_embd": 128, "n_head": 4, "n_positions": 256}  # model/args.py FLAVORS["gpt2-tiny"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="the Hugging Face folder to write (must not exist unless --force)")
    p.add_argument("--steps", type=int, default=1500, help="optimizer steps (default 1500)")
    p.add_argument("--batch", type=int, default=16, help="windows per step (default 16)")
    p.add_argument("--seq-len", type=int, default=64, help="tokens predicted per window (default 64)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--warmup", type=int, default=100, help="warm-up steps (default 100)")
    p.add_argument("--seed", type=int, default=0, help="init and window-order seed (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: on a shared CPU, more spin-wait)")
    p.add_argument(
        "--tokenizer",
        default="gpt2",
        help="gpt2 (GPT-2's, the default) or a tokenizer.json (`aogpt tokenizer train`), copied into OUT: a small "
        "vocabulary makes the head, and so the CPU time, far smaller",
    )
    p.add_argument("--force", action="store_true", help="replace OUT")
    p.add_argument("--data", default=str(ROOT / TRAIN_GLOB), help="training jsonl files (a glob)")
    return p.parse_args(argv)


def training_files(pattern: str) -> list[str]:
    """The training shards `pattern` names; the held-out file (validation of the study) is refused."""
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"error: --data {pattern!r} matches no file")
    held_out = [f for f in files if "heldout" in os.path.basename(f)]
    if held_out:
        raise SystemExit(
            f"error: --data includes {held_out[0]}, the held-out file; the stand-in trains on training shards only"
        )
    return files


def training_windows(files: list[str], tokenizer, tokens_needed: int, window: int) -> list[list[int]]:
    """Consecutive windows of `window` tokens from the documents of `files` (in order), each document
    followed by the tokenizer's end of text, until `tokens_needed` tokens are packed."""
    from aogpt_plugin.data.text_files import iter_documents

    stream = []
    for path in files:
        for doc in iter_documents(path):
            stream += tokenizer.encode(doc, add_eos=True)
            if len(stream) >= tokens_needed:
                return [stream[i : i + window] for i in range(0, len(stream) - window + 1, window)]
    raise SystemExit(f"error: the training files hold {len(stream)} tokens; {tokens_needed} are needed")


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"error: {out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    try:
        files = training_files(args.data)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "data" / "tiktoken_cache"))
    import torch

    from aogpt_plugin.library_noise import quiet_library_noise

    quiet_library_noise(torch.cuda.is_available())  # before transformers imports torchao
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    from aogpt_plugin.data.tokenizer import load_tokenizer

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.tokenizer, key="--tokenizer")
    window = args.seq_len + 1
    windows = training_windows(files, tokenizer, args.steps * args.batch * window, window)
    random.Random(args.seed).shuffle(windows)  # a fixed, seeded order of the windows
    torch.manual_seed(args.seed)
    eos = tokenizer.eos_id  # <|endoftext|>: what GPT-2 begins a text with (config.json bos_token_id)
    config = transformers.GPT2Config(**SHAPE, vocab_size=tokenizer.get_vocab_size(), bos_token_id=eos, eos_token_id=eos)
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))

    def lr_at(step: int) -> float:  # linear warm-up, cosine to 10%
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        done = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))

    start, losses = time.time(), []
    for step in range(args.steps):
        batch = torch.tensor(windows[step * args.batch : (step + 1) * args.batch])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = model(batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % 100 == 0 or step + 1 == args.steps:
            recent = sum(losses[-100:]) / len(losses[-100:])
            print(f"step {step + 1}/{args.steps}  loss {recent:.4f}  {time.time() - start:.0f} s", flush=True)
    if out.exists():
        shutil.rmtree(out)
    model.eval()
    model.save_pretrained(out)
    if args.tokenizer.endswith(".json"):  # the folder carries its tokenizer, as Hugging Face folders do
        shutil.copyfile(args.tokenizer, out / "tokenizer.json")
    record = {k: v for k, v in vars(args).items() if k not in ("out", "force")}
    record |= {"final_loss": sum(losses[-100:]) / len(losses[-100:]), "seconds": round(time.time() - start, 1)}
    (out / "standin.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({"out": str(out), **record}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
