"""Counter-based noise: the uniforms of a draw as a pure function of (seed, step, position, token).

Why: a torch.Generator is one stream for the whole batch, so a sample's noise (and so its tokens)
depends on how many samples were drawn before it and in which shape. Batched generation where
"sample 17" must come out the same in a batch of 1 or 64, next to any neighbours and in any graphs
mode, needs noise that is a function of the sample's own key instead: here, each uniform is a hash of
(the sample's seed, the step, the target position the row unmasks, the token id). The hash is
Jarzynski & Olano's PCG hash ("Hash Functions for GPU Rendering", JCGT 2020), chained over the key
parts and run twice for the 52 bits of a float64 uniform. It uses only elementwise integer ops on
the device (no generator state, no host read), so a CUDA graph can capture it and replay it with
the step index and seeds as device data.

All arithmetic stays in int64 without overflow: every operand is a 32-bit value and every multiplier
is below 2^30, so no product reaches 2^63 (torch defines no wrap-around for int64).
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
_STREAM_2 = 0x9E3779B9  # the second 32-bit draw's key offset (the golden ratio's bits)


def pcg_hash(x: torch.Tensor) -> torch.Tensor:
    """The PCG hash of 32-bit values held in an int64 tensor (values in [0, 2^32)); same shape and dtype."""
    state = (x * 747796405 + 2891336453) & MASK32
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & MASK32
    return (word >> 22) ^ word


def fold32(x: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """A 64-bit key (an int64, negative allowed) as a 32-bit value: the high half added to the hash of the low
    one (plus `offset`, so the two chains of `row_keys` fold a key two independent ways)."""
    return pcg_hash((((x >> 32) & MASK32) + pcg_hash((x + offset) & MASK32)) & MASK32)


def row_keys(seeds: torch.Tensor, step: torch.Tensor | int, positions: torch.Tensor) -> torch.Tensor:
    """The 64-bit key of each row drawn, as two 32-bit halves: seeds (B,), the step (a scalar or (B,)),
    positions (B, R) -> (B, R, 2). Two chains over the same parts, the second started from another offset,
    so two rows share a key with probability ~2^-64, not the 2^-32 of one chain."""
    step = torch.as_tensor(step, dtype=torch.long, device=positions.device)
    step = step.view(-1, 1) if step.dim() else step
    halves = []
    for offset in (0, _STREAM_2):
        key = fold32(positions, offset)
        key = pcg_hash((fold32(step, offset) + key) & MASK32)
        halves.append(pcg_hash((fold32(seeds, offset).view(-1, 1) + key) & MASK32))
    return torch.stack(halves, dim=-1)


def counter_uniforms(keys: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """float64 uniforms in (0, 1), (*keys.shape[:-1], vocab_size): 52 random bits each, 32 from the hash of
    (the key's first half + token id) and 20 from the second's, on the k/2^52 grid shifted by half a step
    (exact in float64, so neither 0 nor 1 occurs: Gumbel noise -log(-log u) stays finite)."""
    token = torch.arange(vocab_size, dtype=torch.long, device=keys.device)
    high = pcg_hash((keys[..., :1] + token) & MASK32)
    low = pcg_hash((keys[..., 1:] + token) & MASK32)
    bits = (high << 20) | (low >> 12)  # 32 + 20 = 52 bits
    return (bits.to(torch.float64) + 0.5) * 2.0**-52


def sample_uniforms(
    seeds: torch.Tensor, step: torch.Tensor | int, positions: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """The uniforms of one draw: (B, R, vocab_size) for samples with `seeds` (B,) at `step`, rows unmasking
    `positions` (B, R). A row's values depend on its own (seed, step, position) only."""
    return counter_uniforms(row_keys(seeds, step, positions), vocab_size)
