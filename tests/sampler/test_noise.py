"""sampler/noise.py: counter-based uniforms, a pure function of (seed, step, position, token). Each
statistical test is paired with a generator it must reject at the same sample size."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from aogpt_plugin.sampler.noise import MASK32, NoiseWorkspace, counter_uniforms, pcg_hash, row_keys, sample_uniforms


def reference_pcg(x: int) -> int:
    """The PCG hash on Python integers (unbounded), as the paper writes it for uint32."""
    state = (x * 747796405 + 2891336453) % 2**32
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) % 2**32
    return (word >> 22) ^ word


def test_the_hash_is_the_papers_on_every_32_bit_edge():
    values = [0, 1, 2, 12345, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    got = pcg_hash(torch.tensor(values, dtype=torch.long)).tolist()
    assert got == [reference_pcg(v) for v in values]
    assert all(0 <= g <= MASK32 for g in got)


def test_a_rows_uniforms_depend_on_its_own_key_only():
    """Row (seed 7, step 3, position 11) is the same alone, in a batch of three, and as the second row of
    its sample; the step may be a scalar or one per sample."""
    alone = sample_uniforms(torch.tensor([7]), 3, torch.tensor([[11]]), 97)
    batch = sample_uniforms(torch.tensor([5, 7, 9]), 3, torch.tensor([[1, 2], [4, 11], [11, 0]]), 97)
    per_sample_step = sample_uniforms(torch.tensor([7, 1]), torch.tensor([3, 8]), torch.tensor([[11], [2]]), 97)
    assert torch.equal(batch[1, 1], alone[0, 0]) and torch.equal(per_sample_step[0, 0], alone[0, 0])
    assert not torch.equal(batch[2, 0], alone[0, 0])  # another seed, same step and position
    assert not torch.equal(sample_uniforms(torch.tensor([7]), 4, torch.tensor([[11]]), 97), alone)


def test_uniforms_lie_strictly_inside_0_1_with_52_bits():
    keys = row_keys(torch.tensor([0, 1]), 0, torch.zeros(2, 1, dtype=torch.long))
    u = counter_uniforms(keys, 50304)
    assert u.dtype == torch.float64 and 0 < u.min() and u.max() < 1
    assert len(torch.unique(u)) == u.numel()  # no repeats among 100k draws
    assert (u * 2.0**52 - 0.5).frac().abs().max() == 0  # on the 2^-52 grid, half a step in
    low_bits = ((u * 2.0**52 - 0.5).to(torch.long) & 0xFFFFF).double()  # the 20 bits from the second half
    assert 0.49 < low_bits.mean() / 2**20 < 0.51
    # the grid's ends, k = 0 and k = 2^52 - 1, map strictly inside (0, 1) in float64
    ends = (torch.tensor([0, 2**52 - 1], dtype=torch.float64) + 0.5) * 2.0**-52
    assert 0 < ends[0] and ends[1] < 1


def _draws(n_rows: int = 256, vocab: int = 4096) -> torch.Tensor:
    seeds = torch.arange(n_rows) * 1_000_003
    return sample_uniforms(seeds, 17, torch.arange(n_rows).view(-1, 1), vocab).flatten()


def test_uniforms_are_uniform_and_a_biased_generator_is_rejected():
    u = _draws()  # 2^20 draws
    assert stats.kstest(u.numpy(), "uniform").pvalue > 1e-3
    assert stats.kstest((u**1.01).numpy(), "uniform").pvalue < 1e-6


@pytest.mark.parametrize("neighbour", ["token", "position", "step", "seed"])
def test_neighbouring_keys_are_uncorrelated_and_a_correlated_pair_is_caught(neighbour):
    """u at a key and at the key one apart in each part: correlation within 5 standard errors of 0 over 2^18
    pairs; a pair that shares half its bits (u and (u + v) / 2) lies far outside."""
    n, vocab = 64, 4096
    seeds, positions = torch.arange(n) * 7919, torch.arange(n).view(-1, 1) * 3
    base = sample_uniforms(seeds, 5, positions, vocab)
    if neighbour == "token":
        a, b = base[..., :-1], base[..., 1:]
    else:
        moved = {
            "position": (seeds, 5, positions + 1),
            "step": (seeds, 6, positions),
            "seed": (seeds + 1, 5, positions),
        }[neighbour]
        a, b = base, sample_uniforms(*moved, vocab)
    a, b = a.flatten(), b.flatten()
    bound = 5 / a.numel() ** 0.5
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1]) < bound
    assert abs(torch.corrcoef(torch.stack([a, (a + b) / 2]))[0, 1]) > 50 * bound


def test_gumbel_max_on_counter_noise_draws_the_categorical_exactly():
    """argmax(log p + Gumbel(u)) over 2^17 rows of a 5-token distribution: the counts pass a chi-square test
    against p, and against p at temperature 1.1 they fail it."""
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03], dtype=torch.float64)
    n = 2**17
    u = sample_uniforms(torch.arange(n) * 104729, 0, torch.zeros(n, 1, dtype=torch.long), 5)[:, 0]
    tokens = (probs.log() - torch.log(-torch.log(u))).argmax(-1)
    counts = torch.bincount(tokens, minlength=5).numpy()
    assert stats.chisquare(counts, (probs * n).numpy()).pvalue > 1e-3
    warm = torch.softmax(probs.log() / 1.1, -1)
    assert stats.chisquare(counts, (warm * n).numpy()).pvalue < 1e-6


def test_row_keys_take_any_int64_seed():
    keys = row_keys(torch.tensor([-1, 2**62, 0]), 0, torch.zeros(3, 1, dtype=torch.long))
    assert keys.shape == (3, 1, 2) and int(keys.min()) >= 0 and int(keys.max()) <= MASK32
    assert len({tuple(k) for k in keys.view(3, 2).tolist()}) == 3


def test_the_uniforms_hash_the_whole_key_with_the_token_whichever_buffers_hold_them():
    """The draw's definition, spelled out with `pcg_hash`: lane a = pcg(pcg(k_a + token) + k_(1-a)), all mod
    2^32, u = ((lane0 << 20 | lane1 >> 12) + 0.5) / 2^52; the fast path (one mod after the row's and the
    token's parts, in place) and a workspace give exactly these values, keys at the 32-bit edge included."""
    keys = torch.tensor([[[0, MASK32]], [[MASK32, 7]], [[12345, 2**31]]])
    vocab = 70_000  # key + token passes 2^32: the mod matters
    token = torch.arange(vocab)
    k0, k1 = keys[..., :1], keys[..., 1:]
    high = pcg_hash((pcg_hash((k0 + token) & MASK32) + k1) & MASK32)
    low = pcg_hash((pcg_hash((k1 + token) & MASK32) + k0) & MASK32)
    expected = (((high << 20) | (low >> 12)).double() + 0.5) * 2.0**-52
    assert torch.equal(counter_uniforms(keys, vocab), expected)
    assert torch.equal(counter_uniforms(keys, vocab, NoiseWorkspace()), expected)
    assert not torch.equal(counter_uniforms(keys.flip(0), vocab), expected)


def _one_half_per_lane(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """The uniforms of the earlier hash, each lane of one key half alone: high = pcg(k0 + token), low =
    pcg(k1 + token) (the negative control: rows whose first halves differ by d are shifted copies)."""
    token = torch.arange(vocab)
    high = pcg_hash((keys[..., :1] + token) & MASK32)
    low = pcg_hash((keys[..., 1:] + token) & MASK32)
    return (((high << 20) | (low >> 12)).double() + 0.5) * 2.0**-52


def test_rows_whose_first_key_halves_differ_by_a_little_are_not_shifted_copies():
    """Rows i, j with k0_j = k0_i + d (d < vocabulary) and other second halves: u_j(t) is not u_i(t + d) to
    within 2^-32 at any token (it was, at every token, with one key half per lane: the control), so two
    such rows draw independently instead of x_j = x_i - d."""
    vocab, rng = 4096, torch.Generator().manual_seed(0)
    base = torch.randint(0, 2**32 - vocab, (64, 1), generator=rng)
    d = torch.randint(1, 100, (64, 1), generator=rng)
    rows_i = torch.stack([base, torch.randint(0, 2**32, (64, 1), generator=rng)], -1)  # (64, 1, 2)
    rows_j = torch.stack([base + d, torch.randint(0, 2**32, (64, 1), generator=rng)], -1)

    def closest_shifted(draw) -> float:
        u_i, u_j = draw(rows_i, vocab)[:, 0], draw(rows_j, vocab)[:, 0]
        gaps = [(u_j[r, : vocab - k] - u_i[r, k:]).abs().max().item() for r, k in enumerate(d.view(-1).tolist())]
        return min(gaps)

    assert closest_shifted(counter_uniforms) > 0.5  # independent rows: the largest gap is near 1
    assert closest_shifted(_one_half_per_lane) < 2.0**-31  # the control is caught


def test_row_keys_are_distinct_over_a_grid_and_the_step_and_position_do_not_commute():
    """No two distinct (seed, step, position) of a grid share a key, and in particular (step a, position p)
    and (step p, position a) do not: with the step and position folded alike and added, they did, and
    speculative rounds drew two tokens of a sample with one noise vector."""
    s = torch.tensor([7])
    assert not torch.equal(row_keys(s, 3, torch.tensor([[7]])), row_keys(s, 7, torch.tensor([[3]])))
    seeds = torch.arange(32) * 977
    steps, positions = torch.arange(40), torch.arange(40)
    keys = torch.stack([row_keys(seeds, int(t), positions.expand(32, -1)) for t in steps])  # (step, seed, pos, 2)
    flat = keys.view(-1, 2)
    assert len({tuple(k) for k in flat.tolist()}) == flat.shape[0] == 32 * 40 * 40
    each_half = [len(set(flat[:, h].tolist())) for h in (0, 1)]
    assert all(n > 0.99 * flat.shape[0] for n in each_half)  # 51k 32-bit values: ~0.03% collide by chance


def test_the_grid_check_catches_keys_whose_parts_commute():
    """The control: the earlier fold (step and position folded alike, then added) gives the swapped pairs
    one key, which the check above counts."""
    from aogpt_plugin.sampler.noise import _STREAM_2, fold32

    def commuting(seeds, step, positions):
        offsets = torch.arange(2) * _STREAM_2
        key = fold32(positions.unsqueeze(-1), offsets)
        key = pcg_hash((fold32(torch.tensor(step), offsets) + key) & MASK32)
        return pcg_hash((fold32(seeds.view(-1, 1, 1), offsets) + key) & MASK32)

    keys = torch.stack([commuting(torch.tensor([7]), t, torch.arange(40).view(1, -1)) for t in range(40)]).view(-1, 2)
    assert len({tuple(k) for k in keys.tolist()}) == 40 * 41 // 2  # each (a, p) with its (p, a)
