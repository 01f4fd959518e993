"""Save a tiny randomly initialised GPT-2 (Hugging Face format, GPT-2's own tokenizer) to a folder.

    python scripts/make_tiny_gpt2.py OUT_DIR [--layers 2 --dim 64 --positions 128 --seed 0]
    aogpt eval ppl --model hf:OUT_DIR --dataset wikitext2 --order l2r --seq-len 128 --max-chunks 8

Offline: the tokenizer is built from ../shared/data/gpt2_tokenizer (OpenAI's encoder.json and
vocab.bpe), so the `--model hf:` path of `aogpt eval ppl` can be tried and tested without the hub.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_tiny_gpt2(out: str, layers: int = 2, dim: int = 64, positions: int = 128, seed: int = 0) -> str:
    import tokenizers
    import torch
    import transformers

    data = Path(os.environ.get("AOGPT_DATA_DIR", ROOT.parent / "shared" / "data")) / "gpt2_tokenizer"
    bpe = tokenizers.ByteLevelBPETokenizer(str(data / "encoder.json"), str(data / "vocab.bpe"), add_prefix_space=False)
    eos = "<|endoftext|>"
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, eos_token=eos, bos_token=eos, unk_token=eos
    )
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=layers, n_embd=dim, n_head=max(1, dim // 32), n_positions=positions)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--positions", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(make_tiny_gpt2(a.out, a.layers, a.dim, a.positions, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
