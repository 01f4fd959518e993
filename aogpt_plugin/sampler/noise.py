"""Counter-based noise: the uniforms of a draw as a pure function of (seed, step, position, token).

Why: a torch.Generator is one stream for the whole batch, so a sample's noise (and so its tokens)
depends on how many samples were drawn before it and in which shape. Batched generation where
"sample 17" must come out the same in a batch of 1 or 64, next to any neighbours and in any graphs
mode, needs noise that is a function of the sample's own key instead: here, each uniform is a hash of
(the sample's seed, the step, the target position the row unmasks, the token id). The hash is
Jarzynski & Olano's PCG hash ("Hash Functions for GPU Rendering", JCGT 2020), chained over the key
parts in turn (seed, then step, then position: order matters, so (step a, position p) and (step p,
position a) are different keys) along two chains started apart, which give a row's 64-bit key. A
uniform hashes the whole key with the token: each chain's half plus the token, hashed, then mixed with
the other half and hashed again, so two rows share a run of uniforms only if both halves of their keys
line up (~2^-64 a pair), not the first half alone. It uses only elementwise integer ops on the device
(no generator state, no host read), so a CUDA graph can capture it and replay it with the step index and
seeds as device data.

All arithmetic stays in int64 without overflow: every operand is a 32-bit value and every multiplier
is below 2^30, so no product reaches 2^63 (torch defines no wrap-around for int64).
"""

from __future__ import annotations

import math

import torch

MASK32 = 0xFFFFFFFF
_STREAM_2 = 0x9E3779B9  # the second 32-bit draw's key offset (the golden ratio's bits)

# The `step` part of a row's key: which draw of a sample it is. Every key is used once, so no two draws of a
# sample share noise. The parallel sampler draws each position once (step PARALLEL_DRAW, whatever T is);
# speculative sampling draws per round of the sample: its drafts, the accept test of each draft and the
# correction after a rejection (`speculative_step`).
PARALLEL_DRAW = 0
DRAFT, ACCEPT, CORRECTION = range(3)


def speculative_step(rounds: torch.Tensor, purpose: int) -> torch.Tensor:
    """The key step of speculative draw `purpose` (DRAFT, ACCEPT or CORRECTION) in each sample's round
    `rounds` (B,): distinct from each other and from PARALLEL_DRAW."""
    return 1 + 3 * rounds + purpose


def pcg_hash(x: torch.Tensor) -> torch.Tensor:
    """The PCG hash of 32-bit values held in an int64 tensor (values in [0, 2^32)); same shape and dtype."""
    return _pcg_hash_(x.clone(), torch.empty_like(x))


def fold32(x: torch.Tensor, offset: torch.Tensor | int = 0) -> torch.Tensor:
    """A 64-bit key part (an int64, negative allowed) as a 32-bit value: the high half added to the hash of the
    low one (plus `offset`, so the two chains of `row_keys` fold a part two independent ways; broadcast)."""
    return pcg_hash((((x >> 32) & MASK32) + pcg_hash((x + offset) & MASK32)) & MASK32)


def row_keys(seeds: torch.Tensor, step: torch.Tensor | int, positions: torch.Tensor) -> torch.Tensor:
    """The 64-bit key of each row drawn, as two 32-bit halves: seeds (B,), the step (a scalar or (B,)),
    positions (B, R) -> (B, R, 2). Each chain hashes the seed, then adds the step and hashes, then adds the
    position and hashes: a chain is a sequence, so swapping the step and the position gives another key.
    The second chain starts from another offset, so two rows share a key with probability ~2^-64, not the
    2^-32 of one chain. The chains run side by side, along the last dimension."""
    offsets = torch.arange(2, dtype=torch.long, device=positions.device) * _STREAM_2
    step = torch.as_tensor(step, dtype=torch.long, device=positions.device)
    step = step.view(-1, 1, 1) if step.dim() else step
    key = fold32(seeds.view(-1, 1, 1), offsets)
    key = pcg_hash((key + fold32(step, offsets)) & MASK32)
    return pcg_hash((key + fold32(positions.unsqueeze(-1), offsets)) & MASK32)


def parallel_draw_keys(seeds: torch.Tensor, positions: int) -> torch.Tensor:
    """The keys of the parallel draw (step PARALLEL_DRAW) of every position 0..positions-1 of each sample:
    (B, positions, 2), the rows of `row_keys(seeds, PARALLEL_DRAW, ...)`. Made once per run, so a step looks
    its rows' keys up (`keys_at`, one gather) instead of hashing them: about 250 elementwise kernels fewer
    per step, which a decode step on a GPU, bound by its kernel launches, pays for one by one."""
    every = torch.arange(positions, dtype=torch.long, device=seeds.device).expand(seeds.shape[0], -1)
    return row_keys(seeds, PARALLEL_DRAW, every)


def keys_at(table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The keys (B, R, 2) of the rows unmasking `positions` (B, R), from a `parallel_draw_keys` table."""
    return table.gather(1, positions.unsqueeze(-1).expand(-1, -1, 2))


def counter_uniforms(keys: torch.Tensor, vocab_size: int, workspace: NoiseWorkspace | None = None) -> torch.Tensor:
    """float64 uniforms in (0, 1), (*keys.shape[:-1], vocab_size): 52 random bits each, the 32 of lane 0 and
    20 of lane 1, lane a = pcg(pcg(k_a + token) + k_(1-a)) (mod 2^32 throughout): every bit depends on both
    halves of the key and the token, so rows whose first halves differ by d are not shifted copies of each
    other (they would be with one half per lane). On the k/2^52 grid shifted by half a step (exact in
    float64, so neither 0 nor 1 occurs: Gumbel noise -log(-log u) stays finite). Both lanes are hashed in
    one tensor (*keys.shape[:-1], 2, vocab_size): each elementwise op runs once, not twice.

    `workspace` (eager callers: the dynamic sampler, the eager static step): the hash runs in place in its
    fixed buffers, and the result is a view of its output buffer (valid until the next call). On a CPU that
    is about 3x faster than fresh tensors per operation (no pages faulted in per pass). Without one
    (inductor, which fuses the chain into one loop) every buffer is a fresh tensor. The same values either way."""
    shape = (*keys.shape[:-1], 2, vocab_size)
    if workspace is None:
        bits, scratch = (torch.empty(shape, dtype=torch.long, device=keys.device) for _ in range(2))
        out = None
    else:
        bits, scratch, out = workspace.buffers(shape, keys.device)
    # pcg_hash(x) is its output permutation of (x * A + C) mod 2^32; for x = key + token (and later x = inner +
    # other half) that is the row's part (key * A + C) plus the token's (or inner's) part times A, summed before
    # the one mod: the same value, as no product reaches 2^63
    token_part = torch.arange(vocab_size, dtype=torch.long, device=keys.device) * _PCG_MULTIPLIER
    row_part = (keys * _PCG_MULTIPLIER + _PCG_INCREMENT).unsqueeze(-1)
    torch.add(row_part, token_part, out=bits)
    _pcg_output_(bits.bitwise_and_(MASK32), scratch)  # inner_a = pcg(k_a + token)
    other = row_part.flip(-2)
    _pcg_output_(bits.mul_(_PCG_MULTIPLIER).add_(other).bitwise_and_(MASK32), scratch)  # pcg(inner_a + k_(1-a))
    high, low = bits.unbind(-2)
    bits = high.bitwise_left_shift_(20).bitwise_or_(low.bitwise_right_shift_(12))  # 32 + 20 = 52 bits
    uniform = bits.to(torch.float64) if out is None else out.copy_(bits)
    return uniform.add_(0.5).mul_(2.0**-52)


_PCG_MULTIPLIER, _PCG_INCREMENT = 747796405, 2891336453


def _pcg_hash_(x: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """`pcg_hash` in place on `x` (int64 values in [0, 2^32)), with `scratch` of its shape."""
    x.mul_(_PCG_MULTIPLIER).add_(_PCG_INCREMENT).bitwise_and_(MASK32)  # state
    return _pcg_output_(x, scratch)


def _pcg_output_(state: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """The PCG hash's output permutation of `state` (its LCG step done), in place."""
    torch.bitwise_right_shift(state, 28, out=scratch).add_(4)
    torch.bitwise_right_shift(state, scratch, out=scratch)
    scratch.bitwise_xor_(state).mul_(277803737).bitwise_and_(MASK32)  # word
    torch.bitwise_right_shift(scratch, 22, out=state)
    return state.bitwise_xor_(scratch)


class NoiseWorkspace:
    """Fixed buffers for `counter_uniforms`: two int64 of both halves' hashes and one float64 of the largest
    draw asked for, allocated once on first use (a run reuses them every step; a captured step reads them at
    fixed addresses). `grown` counts reallocations, so a holder of captured graphs can tell they went stale."""

    def __init__(self):
        self.flat: torch.Tensor | None = None
        self.grown = 0

    def reserve(self, elements: int, device: torch.device | str) -> None:
        """Room for a draw of `elements` uniforms (rows x vocabulary) on `device`."""
        need = 5 * elements
        device = torch.device(device)
        if self.flat is None or self.flat.numel() < need or self.flat.device != device:
            self.flat = torch.empty(need, dtype=torch.long, device=device)
            self.grown += 1

    def buffers(self, shape: tuple[int, ...], device: torch.device | str):
        """(bits, scratch, out) for hashes of `shape` (..., 2, vocabulary): int64, int64 of `shape`, and the
        float64 uniforms of shape (..., vocabulary)."""
        n = math.prod(shape)
        self.reserve(n // 2, device)
        bits, scratch = (self.flat[i * n : (i + 1) * n].view(shape) for i in range(2))
        out = self.flat[2 * n : 2 * n + n // 2].view(torch.float64).view(*shape[:-2], shape[-1])
        return bits, scratch, out


def sample_uniforms(
    seeds: torch.Tensor, step: torch.Tensor | int, positions: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """The uniforms of one draw: (B, R, vocab_size) for samples with `seeds` (B,) at `step`, rows unmasking
    `positions` (B, R). A row's values depend on its own (seed, step, position) only."""
    return counter_uniforms(row_keys(seeds, step, positions), vocab_size)
