"""Context-order ensemble (paper Eq. 4), computed with only the slots each conditional needs.

For base order sigma and target index i, ensemble member m reads the context set sigma(<i) in a
permuted order pi_m and scores x[sigma(i)] at slot i:

    p_ens(x_sigma(i) | x_sigma(<i)) = (1/M) sum_m p(x_sigma(i) | x_pi_m(sigma(<i)), in that order)

Member 0 is sigma itself, so its conditionals for every i come from one full forward. Members
m >= 1 need a forward of [None] + the i context tokens: i+1 slots, the slot of each context token
conditioned on the next position of the permuted order and the last on sigma(i). The authors run a
full n+1-slot forward for every (i, m) instead. Rows of nearby i are batched, right-padded with the
continuation sigma(i), sigma(i+1), ... (causal attention: slot i never sees them), and the head runs
on slot i alone. Averaging happens in probability space (log-mean-exp of log-probabilities); since
the permutations do not depend on the tokens, each averaged conditional is a distribution over
x_sigma(i) and their product over i a normalised joint for sigma.

The cost, ours against the authors' script, without a model:

    python -m aogpt_plugin.eval.ensemble --seq-len 1024 --members 2 4 8 16 32 64 --batch-size 8

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
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..likelihood import slot_nlls
from ..seeding import stream_generator

FIRST_PERMUTED_INDEX = 2  # targets 0 and 1 have at most one context token: every member equals sigma


def context_permutations(seed: int, chunk: int, draw: int, index: int, count: int) -> torch.Tensor:
    """(count, index) permutations of the `index` context slots of target sigma(index), for m = 1..count.

    Drawn per target index with m ascending, so the first M' of an M-ensemble are the M'-ensemble's:
    M = 1, 2, 4, ... come out of one run and agree with separate runs."""
    g = stream_generator("eval_context_order", seed, chunk, draw, index)
    if count == 0:
        return torch.empty(0, index, dtype=torch.long)
    return torch.stack([torch.randperm(index, generator=g) for _ in range(count)])


@dataclass
class SlotCost:
    """Forward-slot counts per scored (chunk, order) pair, summed over pairs."""

    computed: int = 0  # slots run here, padding included
    needed: int = 0  # sum of (i + 1) over the forwards that are needed
    authors: int = 0  # the authors' script: (n + 1) + (M - 1) * n * (n + 1) per pair

    def add_pair(self, seq_len: int, members: int) -> None:
        n, extra = seq_len, members - 1
        self.needed += n + extra * sum(i + 1 for i in range(FIRST_PERMUTED_INDEX, n))
        self.authors += (n + 1) + extra * n * (n + 1)

    def as_dict(self) -> dict:
        ratio = self.authors / self.computed if self.computed else None
        return {"computed": self.computed, "needed": self.needed, "authors": self.authors, "saving": ratio}


@dataclass
class _Group:
    """One padded forward: rows (target index, member range) cut to `length` slots."""

    length: int
    capacity: int  # rows that fit in the slot budget at this length
    orders: list[torch.Tensor]
    targets: list[tuple[int, int, int]]  # (i, first member, rows)

    @property
    def rows(self) -> int:
        return sum(t[2] for t in self.targets)


def member_orders(sigma: torch.Tensor, index: int, perms: torch.Tensor) -> torch.Tensor:
    """(members, n) orders: sigma with its first `index` entries permuted by each row of `perms`."""
    out = sigma.expand(perms.shape[0], -1).clone()
    out[:, :index] = sigma[:index][perms]
    return out


def _groups(sigma: torch.Tensor, members: int, slot_budget: int, seed_parts: tuple[int, int, int]) -> Iterator[_Group]:
    """Rows in descending i, packed greedily into forwards of at most `slot_budget` slots."""
    n = sigma.numel()
    group: _Group | None = None
    for i in range(n - 1, FIRST_PERMUTED_INDEX - 1, -1):
        block = member_orders(sigma, i, context_permutations(*seed_parts, i, members - 1))
        start = 0
        while start < block.shape[0]:
            if group is None:
                group = _Group(length=i + 1, capacity=max(1, slot_budget // (i + 1)), orders=[], targets=[])
            take = min(block.shape[0] - start, group.capacity - group.rows)
            group.orders.append(block[start : start + take, : group.length])
            group.targets.append((i, start + 1, take))
            start += take
            if group.rows == group.capacity:
                yield group
                group = None
    if group is not None:
        yield group


@torch.no_grad()
def member_nlls(
    model,
    tokens: torch.Tensor,
    sigma: torch.Tensor,
    base_nlls: torch.Tensor,
    members: int,
    seed_parts: tuple[int, int, int],
    slot_budget: int,
    cost: SlotCost | None = None,
) -> torch.Tensor:
    """(n, members) NLL of x[sigma(i)] under each member's context order; column 0 is `base_nlls`.

    tokens, sigma: (n,) on the model's device; base_nlls: (n,) from a full forward in order sigma.
    seed_parts = (seed, chunk, draw) selects the permutations (see orders.context_permutations).
    """
    n = sigma.numel()
    out = base_nlls.double().unsqueeze(1).repeat(1, members)
    if cost is not None:
        cost.add_pair(n, members)
        cost.computed += n
    if members == 1:
        return out
    device = tokens.device
    for group in _groups(sigma.cpu(), members, slot_budget, seed_parts):
        orders = torch.cat(group.orders).to(device)
        slots = torch.cat([torch.full((rows,), i) for i, _, rows in group.targets]).to(device)
        nll = slot_nlls(model, tokens.expand(orders.shape[0], -1), orders, slots).double()
        row = 0
        for i, first, rows in group.targets:
            out[i, first : first + rows] = nll[row : row + rows]
            row += rows
        if cost is not None:
            cost.computed += orders.numel()
    return out


def ensemble_nll(member_nll: torch.Tensor, size: int) -> torch.Tensor:
    """-log of the mean probability over the first `size` members, per target: (n, M) -> (n,)."""
    return -(torch.logsumexp(-member_nll[:, :size], dim=1) - math.log(size))


def ensemble_sizes(members: int) -> list[int]:
    """1, 2, 4, ... up to `members`, plus `members` itself."""
    sizes = [1 << k for k in range(members.bit_length()) if 1 << k <= members]
    return sizes if sizes[-1] == members else [*sizes, members]


# ---- the cost table (`python -m aogpt_plugin.eval.ensemble`) --------------------------------------
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
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per scored chunk (default 1024)")
    p.add_argument(
        "--members", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64], help="ensemble sizes to report (orders)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="chunks per forward pass (default 8)")
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
