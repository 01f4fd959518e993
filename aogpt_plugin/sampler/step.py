"""A decode step's formulas, written once: its geometry (`step_geometry`), its draws (`draw_slots`) and
its cached forward (`forward_slots`). The dynamic loop (generation.py) runs them on host-sized tensors and the
static step (static.decode_step) runs them on the device inside one captured graph. The host plan
(static.plan_steps) is the geometry of every step at once in closed form, held equal to iterating
`step_geometry` by a test (tests/sampler/test_static.py), not by sharing this code.

Per sample (generation.py's names): `known` tokens are known (u: given + generated), `cache_len`
slots are encoded (c), `pending` real slots are not (p = u + 1 - c). A step that unmasks b >= 1
tokens feeds width = p + b - 1 query slots: the p pending ones and b - 1 duplicates of slot u; a
sample with b = 0 sits the step out (width 0) and keeps its pending slots.
"""

from __future__ import annotations

import torch


def step_geometry(known, cache_len, pending, new):
    """(width, known, cache_len, pending after the step) of a step unmasking `new` tokens per sample, all
    (B,) tensors. Tensors in, tensors out, no host read: the same code on the host and in a graph."""
    active = new > 0
    width = torch.where(active, pending + new - 1, 0)
    cache_len = torch.where(active, known + 1, cache_len)
    known = known + new
    return width, known, cache_len, known + 1 - cache_len


def draw_slots(known, pending, new, r, last_row, scratch):
    """(rows, dest) of a step's R draws, r = arange(R): the query row each draw reads (slot L's output,
    then its duplicates', capped at `last_row`, the step's last query) and the order index its token is
    written to (`scratch` past the sample's `new` tokens)."""
    rows = torch.clamp(pending[:, None] - 1 + r, max=last_row)
    dest = torch.where(r < new[:, None], known[:, None] + r, scratch)
    return rows, dest


def forward_slots(decoder, in_order, order, cache_len, pending, width, q, rows, mask, kv_len, write=None):
    """One cached forward of every sample's step; logits (B, R, padded vocab) of query rows `rows` (B, R).

    Per sample ((B,) tensors on the decoder's device; `q` = arange(W) over the step's query slots): cache
    slots 0..cache_len-1 are encoded; `pending` real slots cache_len..L follow (slot j reads the token at
    order index j - 1 of `in_order`, [None] for j = 0, and is conditioned on target order[j]), then
    width - pending duplicates of slot L conditioned on order[L + 1], order[L + 2], ...; queries past a
    sample's width are padding and write the scratch slot (the last column of `in_order`). `write`: an
    int first slot shared by every sample instead (a lock-step batch). `mask`, `kv_len`: what the step
    attends over (CachedDecoder.forward)."""
    cache_len, pending, qs = cache_len[:, None], pending[:, None], q.view(1, -1)
    valid = qs < width[:, None]
    slot = cache_len + qs  # cache slot (= decoder slot) of query q; also its target index
    reads = torch.where(valid, cache_len + torch.minimum(qs, pending - 1), 0)
    if write is None:
        write = torch.where(valid, slot, in_order.shape[1] - 1)
    targets_at = torch.where(valid, slot, 0)
    prev = (reads - 1).clamp(min=0)
    h, cond = decoder.embed(in_order.gather(1, prev), order.gather(1, prev), reads == 0, order.gather(1, targets_at))
    h = decoder.forward(h, cond, write, mask, kv_len)
    return decoder.logits(h, cond, rows)
