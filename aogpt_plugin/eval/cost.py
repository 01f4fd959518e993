"""Forward cost of the context-order ensemble, ours against the authors' script, without a model.

    python -m aogpt_plugin.eval.cost --seq-len 1024 --members 2 4 8 16 32 64 --batch-size 8

Per scored (chunk, order) pair with n tokens and M members:
  slots      forward slots: ours n + (M-1) * sum_{i=2}^{n-1} (i+1) needed, plus the right padding
             of batched rows ("computed"); the authors' (n+1) + (M-1) * n * (n+1)
  attention  causal query-key pairs, the part that grows with the square of the length: a forward
             of L slots has L(L+1)/2
The computed figures replay the exact row grouping `aogpt eval ppl --batch-size B` uses (slot budget
B * n per forward), so they are what a run reports under `forward_slots.computed`.
"""

from __future__ import annotations

import argparse

import torch

from .ensemble import FIRST_PERMUTED_INDEX, SlotCost, _groups


def pair_cost(seq_len: int, members: int, batch_size: int) -> dict:
    n = seq_len
    cost = SlotCost()
    cost.add_pair(n, members)
    computed, attention = n, n * (n + 1) // 2
    if members > 1:
        for group in _groups(torch.arange(n), members, batch_size * n, (0, 0, 0)):
            computed += group.rows * group.length
            attention += group.rows * group.length * (group.length + 1) // 2
    extra = members - 1
    authors_attention = (1 + extra * n) * (n + 1) * (n + 2) // 2
    needed_attention = n * (n + 1) // 2 + extra * sum((i + 1) * (i + 2) // 2 for i in range(FIRST_PERMUTED_INDEX, n))
    return {
        "M": members,
        "slots_needed": cost.needed,
        "slots_computed": computed,
        "slots_authors": cost.authors,
        "slot_saving": cost.authors / computed,
        "attention_needed": needed_attention,
        "attention_computed": attention,
        "attention_authors": authors_attention,
        "attention_saving": authors_attention / attention,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--members", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args(argv)
    print(f"per (chunk, order) pair, n = {args.seq_len}, --batch-size {args.batch_size}")
    print(
        "| M | slots needed | slots computed (ours) | slots (authors) | saving | attention pairs (ours) "
        "| attention pairs (authors) | saving |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m in args.members:
        c = pair_cost(args.seq_len, m, args.batch_size)
        print(
            f"| {m} | {c['slots_needed']:,} | {c['slots_computed']:,} | {c['slots_authors']:,} | "
            f"{c['slot_saving']:.2f}x | {c['attention_computed']:,} | {c['attention_authors']:,} | "
            f"{c['attention_saving']:.2f}x |"
        )


if __name__ == "__main__":
    main()
