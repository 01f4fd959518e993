"""Any-order speculative sampling: the sequential (T = n) distribution, exactly, in fewer forward passes.

Why it is exact (Any-Subset Speculative Decoding, Guo & Ermon 2025, arXiv 2504.20456): the same
network gives (a) the parallel conditionals p_j of the next k positions sigma(u..u+k-1) given the u
known tokens -- one step of the parallel sampler, the last slot and k-1 duplicates -- and (b) the
sequential conditionals q_j = p(x_sigma(u+j) | known, d_<j) of drafts d_j read as real slots. A draft
d_j ~ p_j is a proposal for q_j: accept it with probability min(1, q_j(d_j) / p_j(d_j)); at the first
rejection draw from normalize(max(q_j - p_j, 0)) and stop. That is speculative sampling, so every
token follows q_j exactly; q_0 = p_0, so d_0 is always accepted. Temperature, top-k and top-p process
both p and q, so samples follow the processed sequential distribution exactly.

One forward does both jobs. Per sample it reads the drafts in flight as real slots u+1..L (L = u + k)
-- their outputs are q_1..q_{k-1} -- and slot L plus k'-1 duplicates give the next round's parallel
drafts (with all drafts accepted as context). If every draft is accepted, those next drafts are
already right and no separate draft pass is run; after a rejection they are dropped and the next
forward is a draft pass from the corrected prefix. Accepted slots' K/V are already right in the
cache; a rejected slot is overwritten by the next forward. Every forward yields at least one
token (the exact first draft of the set it makes, or a verified token), and a last forward that
would verify nothing is skipped, so forward passes never exceed generated tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import UserError, flag_name
from .noise import ACCEPT, CORRECTION, DRAFT, counter_uniforms, speculative_step
from .sampling import filtered_scores, gumbel_argmax

MAX_DRAFT = 16


def parse_draft(value: str | int, spell: Callable[[str], str] = flag_name) -> int | str:
    """`--speculative K` (K >= 1) or `auto` (`spell`: how the caller names the option)."""
    if value == "auto":
        return "auto"
    allowed = f"allowed: a draft size 1..{MAX_DRAFT} or auto"
    try:
        k = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{spell('speculative')} {value!r} is not allowed; {allowed}", "speculative") from None
    if not 1 <= k <= MAX_DRAFT:
        raise UserError(f"{spell('speculative')} {k} is not allowed; {allowed}", "speculative")
    return k


def check_sampling_flags(
    draft: str | int | None,
    steps: int | None = None,
    schedule: str | None = None,
    counts: str | None = None,
    distribution: str = "the T=N distribution",
    spell: Callable[[str], str] = flag_name,
) -> int | str | None:
    """The one rule of which sampler options combine (every command and the API call it; None = an option
    not given; `spell`: how the caller names them, a flag or a keyword): speculative sampling samples the
    sequential distribution in rounds it sizes itself, so the options that spread a parallel run over T
    steps (steps, schedule, counts) do not apply with it. Returns the parsed draft size (None without it)."""
    if draft is None:
        return None
    draft = parse_draft(draft, spell)
    for name, value in (("steps", steps), ("schedule", schedule), ("counts", counts)):
        if value is not None:
            raise UserError(
                f"{spell(name)} does not apply with {spell('speculative')} (it samples {distribution}); drop it", name
            )
    return draft


@dataclass
class SpeculativeStats:
    """What the rounds did: tokens finalised per forward, and the drafts verified and accepted."""

    tokens_per_forward: list[list[int]] = field(default_factory=list)  # per forward, per sample
    drafts_checked: int = 0  # drafts j >= 1 put to the accept test
    drafts_accepted: int = 0
    draft_sizes: list[int] = field(default_factory=list)  # the k of each forward, per sample (auto adapts it)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / tested drafts, with one of each assumed up front (so `auto` starts at k = 2)."""
        return (self.drafts_accepted + 1) / (self.drafts_checked + 2)

    def as_dict(self, generated: int, forwards: int) -> dict:
        """`generated`: tokens per sample (the batch shares every forward)."""
        return {
            "tokens_per_forward": round(generated / max(forwards, 1), 4),
            "draft_acceptance_rate": round(self.acceptance_rate, 4),
            "drafts_checked": self.drafts_checked,
            "drafts_accepted": self.drafts_accepted,
            "draft_sizes": sorted(set(self.draft_sizes)),
        }


def auto_draft_size(rate):
    """The draft size whose expected accepted run, (1 - r^k) / (1 - r), is worth its rows: about the
    expected run length 1 / (1 - r), capped. `rate`: a float, or a tensor of per-sample rates."""
    if isinstance(rate, torch.Tensor):
        return (1.0 / (1.0 - rate).clamp(min=1e-3)).round().long().clamp(2, MAX_DRAFT)
    return max(2, min(MAX_DRAFT, round(1.0 / max(1.0 - rate, 1e-3))))


def sample_rounds(run, vocab_size: int, sampling, draft: int | str, bar, inspect=None) -> tuple[int, SpeculativeStats]:
    """The rounds of a started run (generation.speculative_generate sets it up: its orders, noise keys,
    cache and token table, `run.forward` the cached forward of a geometry decided here) until every
    sample is complete; (forward passes, statistics). `draft`: the parsed draft size (`parse_draft`).

    Every draw of a sample is keyed by its own round (noise.speculative_step) and position, and `auto`
    sizes each sample's drafts from its own acceptance so far: a sample's rounds, and so its tokens, do
    not depend on the other samples of the batch."""
    n, batch, device = run.n, run.batch, run.device
    decoder, in_order, order_dev = run.decoder, run.in_order, run.order_dev  # in_order: known, then drafts
    lengths = run.lengths
    known = run.given.clone()
    cache_len = torch.zeros(batch, dtype=torch.long)
    in_flight = torch.zeros(batch, dtype=torch.long)  # drafts at order indices known .. known + in_flight - 1
    rounds = torch.zeros(batch, dtype=torch.long)  # forwards each sample took part in
    checked, accepted = torch.zeros(batch, dtype=torch.long), torch.zeros(batch, dtype=torch.long)
    draft_probs = torch.zeros(batch, MAX_DRAFT, vocab_size, dtype=torch.float64, device=device)  # p_j
    stats, forwards = SpeculativeStats(), 0

    while bool((known < lengths).any()):
        if isinstance(draft, int):
            k = torch.full((batch,), draft, dtype=torch.long)
        else:  # per sample, from its own accept tests (one of each assumed up front)
            k = auto_draft_size((accepted + 1).double() / (checked + 2).double())
        left = lengths - known
        # a last forward that would verify nothing (one exact draft left) is skipped: accept it
        done_by_draft = (in_flight == 1) & (left == 1)
        known = known + done_by_draft.long()
        in_flight = torch.where(done_by_draft, 0, in_flight)
        if stats.tokens_per_forward and bool(done_by_draft.any()):  # counted with the forward that drew it
            stats.tokens_per_forward[-1] = [
                t + int(d) for t, d in zip(stats.tokens_per_forward[-1], done_by_draft, strict=True)
            ]
        active = known < lengths
        if not bool(active.any()):
            break
        last = known + in_flight  # slot L reads the newest known or drafted token and targets sigma(L)
        new = torch.where(active, torch.minimum((lengths - last).clamp(min=0), k), 0)  # next drafts: sigma(L) ..
        top = torch.where(new > 0, last, last - 1)  # the last real slot (none targets sigma(n))
        pending = top + 1 - cache_len
        width = torch.where(active, pending + torch.clamp(new - 1, min=0), 0)
        # rows: the verify slots known+1 .. L-1 (q_1 .. q_{k-1}), then slot L and its duplicates (next p)
        verify = torch.clamp(in_flight - 1, min=0)
        rows_len = int((verify + new).max())
        r = torch.arange(rows_len)
        first_verify = known + 1 - cache_len  # query index of slot known + 1
        rows = torch.where(r < verify[:, None], first_verify[:, None] + r, pending[:, None] - 1 + (r - verify[:, None]))
        rows = torch.clamp(torch.where(active[:, None], rows, 0), min=0, max=int(width.max()) - 1)
        logits = run.forward(cache_len, pending, width, rows)
        forwards += 1
        probs = filtered_scores(logits, vocab_size, sampling).softmax(dim=-1)  # processed, float64

        # ---- verify the drafts in flight (d_0 needs no test: its proposal is its exact conditional)
        produced = torch.where(in_flight > 0, 1, 0)  # d_0
        rejected = torch.zeros(batch, dtype=torch.bool)
        for j in range(1, int(in_flight.max())):
            checking = (in_flight > j) & ~rejected
            if not bool(checking.any()):
                break
            at = (known + j)[:, None]  # draft j's order index
            d = in_order.gather(1, torch.clamp(at, max=n).to(device))  # draft j, (B, 1)
            q, p = probs[:, j - 1], draft_probs[:, j]  # its sequential conditional and its proposal
            ratio = (q.gather(1, d) / p.gather(1, d).clamp(min=1e-300)).squeeze(1)
            u = counter_uniforms(run.keys(speculative_step(rounds, ACCEPT), at), 1)[:, 0, 0]
            accept = (u < ratio).cpu() & checking
            checked += checking.long()
            accepted += accept.long()
            stats.drafts_checked += int(checking.sum())
            stats.drafts_accepted += int(accept.sum())
            reject = checking & ~accept
            if bool(reject.any()):  # the correction: normalize(max(q - p, 0))
                residual = (q - p).clamp(min=0)
                residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, q)  # q == p exactly: q itself
                fixed = gumbel_argmax(residual.log()[:, None], run.keys(speculative_step(rounds, CORRECTION), at))
                slot = torch.where(reject, known + j, n).to(device)  # column n is scratch
                in_order.scatter_(1, slot.unsqueeze(1), fixed)
            produced = produced + (accept | reject).long()
            rejected |= reject

        # ---- new state: accepted drafts (and a correction) are known; next drafts if all were accepted
        all_in = active & ~rejected
        known = known + produced
        cache_len = torch.where(active, torch.where(rejected, known, top + 1), cache_len)
        next_drafts = torch.where(all_in, new, 0)
        if bool((next_drafts > 0).any()):
            width_n = int(next_drafts.max())
            p_next = _take_draft_rows(probs, verify, next_drafts)
            at = known[:, None] + torch.arange(width_n)
            tokens = gumbel_argmax(p_next.log(), run.keys(speculative_step(rounds, DRAFT), at))  # d'_j ~ p'_j
            cols = torch.where(torch.arange(width_n) < next_drafts[:, None], at, n).to(device)
            in_order.scatter_(1, cols, tokens)
            draft_probs[:, :width_n] = p_next
        in_flight = next_drafts
        rounds += active.long()
        stats.tokens_per_forward.append(produced.tolist())
        stats.draft_sizes.extend(sorted(set(k[active].tolist())))
        bar.update(int(produced.sum()))
        if inspect is not None:
            inspect(decoder, known.clone(), cache_len.clone(), in_order, order_dev)
    return forwards, stats


def _take_draft_rows(probs: torch.Tensor, verify: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """(B, max new, V): each sample's rows after its verify rows (slot L and its duplicates)."""
    width = int(new.max())
    idx = torch.clamp(verify[:, None] + torch.arange(width), max=probs.shape[1] - 1).to(probs.device)
    return probs.gather(1, idx.unsqueeze(-1).expand(-1, -1, probs.shape[-1]))
