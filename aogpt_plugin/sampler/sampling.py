"""What one decoding step draws: how many positions it unmasks, and which token each one gets.

Which token: temperature, top-k, top-p, then a float64 Gumbel-max draw. Everything runs in float64.
Zheng et al. (cited in paper §4.3) showed that float32 Gumbel noise truncates the tail of the noise
distribution and lowers the effective temperature; argmax of float64 logits plus float64 Gumbel noise
is an exact categorical draw up to 2^-53 effects. Padded vocabulary rows (ids >= vocab_size) are
never sampled. The uniforms of a row are counter-based (noise.py): a hash of its sample's seed, the
draw and the position it unmasks, so a sample's tokens never depend on its batch neighbours, the batch
size or how the step runs.

How many positions (paper §4.3, Eq. 5, Lemma 4.1): a time grid t_0 = 1 > t_1 > ... > t_T = 0
(linear, or the authors' cosine f(t) = cos((1 - t) pi / 2) applied to linspace(1, 0, T + 1)) is
turned into per-step counts in one of two ways:

  deterministic - the authors' code: n_k = max(floor(N (1 - t_k)), n_{k-1} + 1) tokens known after
                  step k, so every step unmasks at least one token and there are exactly T forwards.
  binomial      - Lemma 4.1: at step k every still-masked position is unmasked independently with
                  probability (t_{k-1} - t_k) / t_{k-1}, so the count is Binomial(#masked, (t - s) / t)
                  and may be 0 (such a step needs no forward pass). The last step (t_T = 0) unmasks
                  everything left. We draw it as one uniform u per position: the position is unmasked
                  at the step k with t_k < u <= t_{k-1}, which has probability t_{k-1} - t_k -- the same
                  law as the step-by-step Bernoulli trials, with N draws instead of N * T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import UserError
from .noise import NoiseWorkspace, counter_uniforms
from .options import COUNTS, SCHEDULES


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0  # nucleus mass in (0, 1]; 1 keeps every token
    top_k: int | None = None  # keep the k most likely tokens; None keeps all

    def validate(self) -> SamplingParams:
        if not self.temperature > 0 or self.temperature == float("inf"):
            raise UserError(f"temperature={self.temperature} must be a finite number > 0", "temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top_p={self.top_p} is outside the allowed range (0, 1]", "top_p")
        if self.top_k is not None and self.top_k < 1:
            raise UserError(f"top_k={self.top_k} must be >= 1 (leave it unset to keep all tokens)", "top_k")
        return self


def top_p_keep(scores: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """Bool mask of the nucleus: the most likely tokens whose mass *before* them is < top_p (a number, or
    per row a tensor broadcastable to scores).

    That is the smallest set of top tokens with mass >= top_p; the top token is always kept.
    """
    sorted_scores, sorted_ids = scores.sort(dim=-1, descending=True)
    probs = sorted_scores.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    keep_sorted = mass_before < top_p
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, sorted_ids, keep_sorted)


def filtered_scores(logits: torch.Tensor, vocab_size: int, params: SamplingParams) -> torch.Tensor:
    """float64 log-weights over the real vocabulary after temperature, top-k and top-p (-inf = dropped)."""
    scores = logits[..., :vocab_size].to(torch.float64, copy=True)
    if params.temperature != 1.0:
        scores.div_(params.temperature)
    if params.top_k is not None and params.top_k < vocab_size:
        kth = scores.topk(params.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:  # p = 1 is skipped outright: a rounded cumsum must not drop tail mass
        scores = scores.masked_fill(~top_p_keep(scores, params.top_p), float("-inf"))
    return scores


@dataclass(frozen=True)
class RowFilters:
    """The filters a step with per-row sampling parameters runs, decided on the host (part of a compiled
    step's key): `top_k`, how many top values it takes (a power of two at least the widest row's k, at most
    the vocabulary; 0: no row keeps a top-k) and `top_p`, whether any row keeps a nucleus. A step of rows
    that filter nothing sorts nothing."""

    top_k: int = 0
    top_p: bool = False

    @classmethod
    def of(cls, params, vocab_size: int) -> RowFilters:
        """The filters of rows sampled with `params` (SamplingParams, one per row)."""
        ks = [p.top_k for p in params if p.top_k is not None and p.top_k < vocab_size]
        top_k = min(1 << (max(ks) - 1).bit_length(), vocab_size) if ks else 0
        return cls(top_k, any(p.top_p < 1.0 for p in params))


def row_parameters(params, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(temperature, top_p, top_k) of rows sampled with `params` (SamplingParams, one per row) as (B,)
    tensors: float64, float64 and long (0: no top-k)."""
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float64, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float64, device=device)
    top_k = torch.tensor([p.top_k or 0 for p in params], dtype=torch.long, device=device)
    return temperature, top_p, top_k


def row_filtered_scores(
    logits: torch.Tensor,
    vocab_size: int,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    filters: RowFilters,
) -> torch.Tensor:
    """`filtered_scores` with each row's own parameters: `temperature`, `top_p` (float64) and `top_k` (long,
    0: none), each of logits.shape[:-1] or broadcastable to it. The same values as `filtered_scores` with a
    row's SamplingParams, exactly: a division by 1 is exact, a row's k-th largest value is the same taken
    from a wider top-k, and a row without a filter has its mask switched off, as the per-batch path skips it."""
    scores = logits[..., :vocab_size].to(torch.float64, copy=True)
    scores.div_(temperature.unsqueeze(-1))
    if filters.top_k:
        values = scores.topk(filters.top_k, dim=-1).values
        k = top_k.clamp(1, filters.top_k).expand(scores.shape[:-1]).unsqueeze(-1)
        kth = values.gather(-1, k - 1)
        kept = ((top_k > 0) & (top_k < vocab_size)).expand(scores.shape[:-1]).unsqueeze(-1)
        scores = scores.masked_fill((scores < kth) & kept, float("-inf"))
    if filters.top_p:
        nucleus = top_p_keep(scores, top_p.unsqueeze(-1)) | (top_p >= 1.0).unsqueeze(-1)
        scores = scores.masked_fill(~nucleus, float("-inf"))
    return scores


def gumbel_argmax(scores: torch.Tensor, keys: torch.Tensor, workspace: NoiseWorkspace | None = None) -> torch.Tensor:
    """One categorical draw per row of softmax(scores): argmax(scores + Gumbel) with the row's float64
    counter noise (noise.py; `keys` (*scores.shape[:-1], 2) from `row_keys`: its sample's seed, the draw
    and the position). u in (0, 1) gives finite Gumbel noise, so -inf scores are never drawn. `workspace`:
    the noise's fixed buffers (eager callers); the draws are the same without."""
    return gumbel_max(scores, counter_uniforms(keys, scores.shape[-1], workspace))


def gumbel_max(scores: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """argmax(scores + Gumbel) from uniforms in (0, 1) of the same shape (they are overwritten with the
    noise, in place: no buffer of the draw's size is allocated)."""
    perturbed = uniform.log_().neg_().log_().neg_().add_(scores)
    return split_argmax(perturbed) if torch.compiler.is_compiling() else perturbed.argmax(dim=-1)


ARGMAX_PARTS = 64  # parts of a row the compiled step's argmax reduces in parallel


def split_argmax(values: torch.Tensor, parts: int = ARGMAX_PARTS) -> torch.Tensor:
    """values.argmax(-1), the same index (the first maximal one, NaN counting as maximal), in two
    reductions: each of `parts` slices of a row, then the slices' maxima. Inductor does not split an
    argmax, so a compiled step reduced each 50k-wide float64 row in one GPU program: 61 us of an 851 us
    step at batch 32 on an H200 (docs/benchmarks.md). Padding is -inf, which never beats a real entry
    and loses ties to it (the first slice wins)."""
    size = values.shape[-1]
    width = -(-size // parts)
    padded = torch.nn.functional.pad(values, (0, width * parts - size), value=float("-inf"))
    slices = padded.view(*values.shape[:-1], parts, width)
    # each slice's first maximal index, as a row index, and its maximum (NaN if it holds one). Not the
    # maximum gathered at that index: torch 2.11's inductor miscompiles that form on a CPU.
    first = slices.argmax(dim=-1) + torch.arange(parts, device=values.device) * width
    part = slices.amax(dim=-1).argmax(dim=-1, keepdim=True)
    return first.gather(-1, part).squeeze(-1)


# rows of one draw of the dynamic sampler: its float64 scores and noise buffers stay this many vocabulary rows
DRAW_CHUNK = 32


def sample_tokens(
    logits: torch.Tensor,
    vocab_size: int,
    params: SamplingParams,
    keys: torch.Tensor,
    workspace: NoiseWorkspace | None = None,
    drawn: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token ids (logits.shape[:-1]) drawn from the filtered, tempered distribution with each row's counter
    noise (`gumbel_argmax`). `drawn` (a bool mask of logits.shape[:-1]): only those rows are drawn, DRAW_CHUNK
    at a time (the others are 0): a ragged step pays for its real rows only, in bounded memory. A row's
    token is the same either way."""
    if drawn is None:
        return gumbel_argmax(filtered_scores(logits, vocab_size, params), keys, workspace)
    tokens = torch.zeros(drawn.shape, dtype=torch.long, device=logits.device)
    where = drawn.nonzero(as_tuple=True)
    rows, row_keys = logits[where], keys[where]
    for start in range(0, rows.shape[0], DRAW_CHUNK):
        part = slice(start, start + DRAW_CHUNK)
        scores = filtered_scores(rows[part], vocab_size, params)
        drawn_tokens = gumbel_argmax(scores, row_keys[part], workspace)
        tokens[tuple(w[part] for w in where)] = drawn_tokens
    return tokens


def sample_row_tokens(
    logits: torch.Tensor,
    vocab_size: int,
    parameters: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    filters: RowFilters,
    keys: torch.Tensor,
    drawn: torch.Tensor,
    workspace: NoiseWorkspace | None = None,
) -> torch.Tensor:
    """`sample_tokens` of the rows `drawn` (a bool mask of logits.shape[:-1], (B, R)), each sample b with its
    own (temperature, top_p, top_k) (`row_parameters`, (B,) each), DRAW_CHUNK rows at a time; 0 elsewhere.
    A row's token is the one `sample_tokens` draws for it with its sample's SamplingParams."""
    tokens = torch.zeros(drawn.shape, dtype=torch.long, device=logits.device)
    where = drawn.nonzero(as_tuple=True)
    rows, row_keys = logits[where], keys[where]
    per_row = [p[where[0]] for p in parameters]
    for start in range(0, rows.shape[0], DRAW_CHUNK):
        part = slice(start, start + DRAW_CHUNK)
        scores = row_filtered_scores(rows[part], vocab_size, *(p[part] for p in per_row), filters)
        tokens[tuple(w[part] for w in where)] = gumbel_argmax(scores, row_keys[part], workspace)
    return tokens


# -- how many positions each of the T steps unmasks --


def time_grid(steps: int, schedule: str = "linear") -> torch.Tensor:
    """t_0..t_T in float64, from 1 down to exactly 0."""
    if schedule not in SCHEDULES:
        raise UserError(f"schedule={schedule!r} is not supported; allowed: {', '.join(SCHEDULES)}")
    if steps < 1:
        raise UserError(f"steps={steps} must be >= 1")
    t = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    if schedule == "cosine":
        t = torch.cos((1.0 - t) * (math.pi / 2))
    t[0], t[-1] = 1.0, 0.0  # cos(pi/2) is 6e-17, not 0: without this the last step could leave a token masked
    return t


def deterministic_counts(num_tokens: int, steps: int, schedule: str = "linear") -> torch.Tensor:
    """(T,) tokens unmasked per step, each >= 1, summing to num_tokens (the authors' rule)."""
    if steps > num_tokens:
        raise UserError(
            f"steps={steps} is larger than the {num_tokens} positions to generate; allowed: 1..{num_tokens}"
        )
    t = time_grid(steps, schedule)
    # known after step k: max(floor(N (1 - t_k)), known after step k-1, plus 1), from known_0 = 0; the running
    # max of floor - k, plus k, is that recurrence in one pass (a host loop costs ~1.6 ms a sample at T=1024)
    k = torch.arange(steps + 1)
    known = torch.floor(num_tokens * (1.0 - t)).long().sub_(k).cummax(0).values.add_(k)
    assert int(known[-1]) == num_tokens, (int(known[-1]), num_tokens)  # holds for T <= N (see module docstring)
    return known.diff()


def binomial_counts(
    num_tokens: int, steps: int, batch: int, schedule: str = "linear", generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, T) per-sample counts under Lemma 4.1; rows sum to num_tokens, entries may be 0."""
    if steps > num_tokens:
        raise UserError(
            f"steps={steps} is larger than the {num_tokens} positions to generate; allowed: 1..{num_tokens}"
        )
    t = time_grid(steps, schedule)
    u = 1.0 - torch.rand(batch, num_tokens, dtype=torch.float64, generator=generator)  # in (0, 1]
    # the step k in 1..T with t_k < u <= t_{k-1}; the grid is decreasing, so search its reverse
    step = steps + 1 - torch.searchsorted(t.flip(0).contiguous(), u, right=False)
    counts = torch.zeros(batch, steps + 1, dtype=torch.long)
    counts.scatter_add_(1, step, torch.ones_like(step))
    return counts[:, 1:]


def step_counts(
    to_fill: list[int],
    steps: int | None,
    schedule: str = "linear",
    counts: str = "deterministic",
    generators: list[torch.Generator] | None = None,
) -> torch.Tensor:
    """(B, T) tokens each sample unmasks at each step: sample b spreads its own to_fill[b] positions over
    `steps` steps (None: one step per position, to_fill[b] steps), its binomial counts drawn with its own
    generator, so a sample's counts never depend on the batch. Rows with fewer steps end in 0s."""
    if counts not in COUNTS:
        raise UserError(f"counts={counts!r} is not supported; allowed: {', '.join(COUNTS)}")
    rows = []
    for b, num_tokens in enumerate(to_fill):
        row_steps = num_tokens if steps is None else steps
        if counts == "deterministic":
            rows.append(deterministic_counts(num_tokens, row_steps, schedule))
        else:
            generator = None if generators is None else generators[b]
            rows.append(binomial_counts(num_tokens, row_steps, 1, schedule, generator)[0])
    out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out
