"""The parallel-generation mask: its meaning, and the FlexAttention BlockMask against the dense mask."""

from __future__ import annotations

import pytest
import torch

from aogpt_plugin.sampler.masks import FlexStepMask, dense_mask, step_block_mask


def materialize(block_mask, q_len: int, kv_len: int) -> torch.Tensor:
    """Element-level mask a BlockMask stands for: full blocks all True, partial blocks by mask_mod, rest False."""
    bs_q, bs_kv = block_mask.BLOCK_SIZE
    batch = block_mask.kv_num_blocks.shape[0]
    n_q, n_kv = -(-q_len // bs_q), -(-kv_len // bs_kv)
    out = torch.zeros(batch, n_q * bs_q, n_kv * bs_kv, dtype=torch.bool)
    q_all, kv_all = torch.arange(n_q * bs_q), torch.arange(n_kv * bs_kv)
    for b in range(batch):
        for qb in range(n_q):
            rows = slice(qb * bs_q, (qb + 1) * bs_q)
            full = 0 if block_mask.full_kv_num_blocks is None else int(block_mask.full_kv_num_blocks[b, 0, qb])
            for i in range(full):
                kb = int(block_mask.full_kv_indices[b, 0, qb, i])
                out[b, rows, kb * bs_kv : (kb + 1) * bs_kv] = True
            for i in range(int(block_mask.kv_num_blocks[b, 0, qb])):
                kb = int(block_mask.kv_indices[b, 0, qb, i])
                cols = slice(kb * bs_kv, (kb + 1) * bs_kv)
                qi, ki = q_all[rows].view(-1, 1), kv_all[cols].view(1, -1)
                out[b, rows, cols] = block_mask.mask_mod(torch.tensor(b), torch.tensor(0), qi, ki)
    return out[:, :q_len, :kv_len]


def test_duplicates_see_cache_earlier_new_tokens_and_themselves_only():
    # cache 3 slots, 2 pending real slots (3, 4), 2 duplicates of slot 4 (written to 5, 6)
    m = dense_mask(torch.tensor([3]), torch.tensor([2]), torch.tensor([4]), q_len=5, kv_len=8)[0, 0].int()
    expected = torch.tensor(
        [
            [1, 1, 1, 1, 0, 0, 0, 0],  # pending slot 3: causal
            [1, 1, 1, 1, 1, 0, 0, 0],  # last real slot 4: causal
            [1, 1, 1, 1, 0, 1, 0, 0],  # duplicate (target 2): slots 0..3 and itself, not slot 4 or its sibling
            [1, 1, 1, 1, 0, 0, 1, 0],  # duplicate (target 3)
            [1, 0, 0, 0, 0, 0, 0, 0],  # padding row: slot 0 only (never empty)
        ]
    )
    assert torch.equal(m, expected)


@pytest.mark.parametrize(
    "q_len,kv_len,block",
    [(5, 24, 128), (131, 389, 128), (300, 517, 128), (37, 101, 16), (70, 200, 32)],
)
def test_block_mask_equals_dense_mask(q_len, kv_len, block):
    g = torch.Generator().manual_seed(q_len * 1000 + kv_len)
    batch = 6
    width = torch.randint(1, q_len + 1, (batch,), generator=g)
    width[0] = q_len
    width[1] = 0  # a sample with nothing to do this step: padding rows only
    pending = torch.minimum(torch.randint(1, q_len + 1, (batch,), generator=g), width.clamp(min=1))
    cache_len = torch.stack([torch.randint(0, kv_len - int(w) + 1, (1,), generator=g)[0] for w in width])
    dense = dense_mask(cache_len, pending, width, q_len, kv_len)[:, 0]
    block_mask = FlexStepMask(batch, "cpu", block_size=block)(cache_len, pending, width, q_len, kv_len)
    assert torch.equal(materialize(block_mask, q_len, kv_len), dense)
    assert dense.any(dim=-1).all()  # no empty rows (SDPA would give NaN)


@pytest.mark.parametrize("q_len,kv_len,block", [(1, 1025, 128), (5, 24, 128), (131, 389, 128), (37, 101, 16)])
def test_a_block_mask_without_full_blocks_is_the_same_mask(q_len, kv_len, block):
    """`full_blocks=False` (every touched block partial) stands for the dense mask too, over the same
    touched blocks; with full blocks the same steps list some as full (the case that differs)."""
    g = torch.Generator().manual_seed(q_len + kv_len)
    batch = 5
    width = torch.randint(1, q_len + 1, (batch,), generator=g)
    pending = torch.minimum(torch.randint(1, q_len + 1, (batch,), generator=g), width)
    cache_len = torch.stack([torch.randint(0, kv_len - int(w) + 1, (1,), generator=g)[0] for w in width])
    cache_len[0] = kv_len - int(width[0])  # a nearly full cache: full blocks exist
    step = FlexStepMask(batch, "cpu", block_size=block)
    step(cache_len, pending, width, q_len, kv_len)  # fills its per-sample tensors
    args = (step.cache_len, step.pending, step.width, q_len, kv_len, step.mask_mod, block)
    lean, evened = step_block_mask(*args), step_block_mask(*args, full_blocks=False)
    dense = dense_mask(cache_len, pending, width, q_len, kv_len)[:, 0]
    assert torch.equal(materialize(evened, q_len, kv_len), dense)
    assert evened.full_kv_num_blocks is None
    assert torch.equal(evened.kv_num_blocks, lean.kv_num_blocks + lean.full_kv_num_blocks)
    if kv_len >= 4 * block:  # room for whole blocks of shared cache
        assert int(lean.full_kv_num_blocks.sum()) > 0


def test_block_mask_skips_blocks_and_marks_full_ones():
    batch, q_len, kv_len, bs = 1, 4, 1000, 128
    c, p, w = torch.tensor([600]), torch.tensor([2]), torch.tensor([4])
    bm = FlexStepMask(batch, "cpu", block_size=bs)(c, p, w, q_len, kv_len)
    assert int(bm.full_kv_num_blocks[0, 0, 0]) == 600 // bs  # blocks fully inside the shared cache
    assert int(bm.kv_num_blocks[0, 0, 0]) == 1  # one partial block, nothing past the step's slots


def test_the_kv_block_lists_alone_give_flex_bitwise_the_same_attention():
    """A step's BlockMask skips the q-block lists (compute_q_blocks=False: ~1 ms of CPU a step less); the
    forward never reads them, so compiled flex attends bitwise alike with and without them."""
    from torch.nn.attention.flex_attention import BlockMask

    from aogpt_plugin.sampler.decoder import compiled_flex_attention

    batch, heads, q_len, kv_len, head_dim = 3, 2, 5, 256, 32
    cache_len, pending, width = torch.tensor([0, 130, 200]), torch.tensor([1, 2, 3]), torch.tensor([5, 2, 0])
    lean = FlexStepMask(batch, "cpu")(cache_len, pending, width, q_len, kv_len)
    full = BlockMask.from_kv_blocks(
        lean.kv_num_blocks,
        lean.kv_indices,
        lean.full_kv_num_blocks,
        lean.full_kv_indices,
        BLOCK_SIZE=lean.BLOCK_SIZE,
        mask_mod=lean.mask_mod,
        seq_lengths=(q_len, kv_len),
    )
    assert lean.q_num_blocks is None and full.q_num_blocks is not None
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, head_dim, generator=g) for n in (q_len, kv_len, kv_len))
    flex = compiled_flex_attention()
    assert torch.equal(flex(q, k, v, block_mask=lean), flex(q, k, v, block_mask=full))
