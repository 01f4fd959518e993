"""The decode step at fixed shapes over fixed buffers: one function a CUDA graph can capture and replay.

The dynamic sampler (generation.py) sizes every step on the host: it reads the step's widths, slices
the cache to the longest sample and copies positions to the device, four stream syncs a step, so the
GPU waits on Python. Here everything a step reads lives on the device at a fixed address, for the
life of a `StaticDecoder`:

  the KV cache over S slots (every position of the model, rounded up to FlexAttention's block; the
      last slot is scratch: padded query rows write there and nothing real is ever read from it),
  per sample: the order (positions), the token table in order (`in_order`), known / cache_len /
      pending (step.py's names), the width of the step, the plan: the tokens it unmasks at each
      step that runs a forward, the key of its noise (its seed's) and the noise key of every position's
      draw, hashed from it once per run (noise.py: `parallel_draw_keys`),
  the step index, and the buffers of the step's counter-based noise (noise.py).

`decode_step` is a pure function of those buffers and of aranges of two sizes: W, the step's width
bucket (a power of two at least as wide as its widest sample), and R, the rows it draws (its largest
count). It runs the step formulas of step.py (the dynamic sampler's) on the device, writes K/V
by tensor index, attends over the whole static cache under a mask built on the device from the
per-sample lengths (a dense mask for SDPA; kv-block lists for FlexAttention, which skips the blocks
past each sample), draws the tokens and advances the state: no host reads, no branches on values.
The host knows every step's W and R before it starts, because the counts are drawn up front and
`plan_steps` runs the same geometry ahead, so it only picks the graph to replay (`StaticDecoder.decode`).
A forward whose geometry the host decides per round (the speculative sampler's) runs as
`forward_set_step` (`StaticDecoder.forward_rows`).

Same seed, same tokens as the dynamic sampler: the orders and counts are drawn on the host the same way,
and the step makes each row's uniforms from its sample's noise key and the position it unmasks, as the
dynamic sampler does (noise.py): a function of device buffers, so a captured graph replays it. A mix of
samples with different prompts, lengths and seeds is only data in those buffers: no new shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model import AOGPT
from .decoder import CachedDecoder, decode_model
from .graphs import StepRunner, uses_inductor
from .masks import FLEX_BLOCK, step_block_mask, visible
from .noise import NoiseWorkspace, keys_at, parallel_draw_keys
from .options import DecodeAttention
from .sampling import RowFilters, SamplingParams, gumbel_argmax, row_filtered_scores, sample_tokens
from .step import draw_slots, forward_slots, step_geometry


def static_slots(max_seq_len: int) -> int:
    """Cache slots of a static decoder: every position plus the scratch slot, rounded up to a flex block."""
    return -(-(max_seq_len + 1) // FLEX_BLOCK) * FLEX_BLOCK


def width_bucket(width: int) -> int:
    """The static width a step of `width` query slots runs at: the next power of two."""
    return 1 << max(0, int(width) - 1).bit_length()


@dataclass
class StepPlan:
    """Every step of a run, known before it starts (per sample, for the steps that run a forward)."""

    counts: torch.Tensor  # (B, T') tokens unmasked
    known: torch.Tensor  # (B, T') tokens known before the step
    cache_len: torch.Tensor  # (B, T') slots encoded before the step
    pending: torch.Tensor  # (B, T') real slots not yet encoded
    width: torch.Tensor  # (B, T') query slots fed (0: the sample sits the step out)
    step_of: torch.Tensor  # (T',) the index among all T steps of each step that runs

    @property
    def steps(self) -> int:
        return self.counts.shape[1]

    def shapes(self) -> list[tuple[int, int]]:
        """(W, R) of every step: the width bucket and the rows drawn."""
        widths, rows = self.width.max(dim=0).values.tolist(), self.counts.max(dim=0).values.tolist()
        return [(width_bucket(w), r) for w, r in zip(widths, rows, strict=True)]


def plan_steps(counts: torch.Tensor, given: torch.Tensor) -> StepPlan:
    """The state before every step, from the (B, T) counts and each sample's given tokens (B,): the step
    geometry (step.py) run ahead of time, in closed form over all steps at once: a host loop of T steps of
    small tensor operations would keep a caller waiting ~20 ms before a 1024-step run (the tests iterate
    `step_geometry` and find the same plan). Steps where no sample unmasks run no forward and are dropped."""
    runs = counts.max(dim=0).values > 0
    counts, step_of = counts[:, runs].long(), runs.nonzero().squeeze(1)
    known = given.long()[:, None] + counts.cumsum(1) - counts  # known before each step
    active = counts > 0
    # a step that unmasks sets cache_len to its known + 1, one that does not keeps it (0 before the first)
    steps = torch.arange(counts.shape[1])
    last = torch.where(active, steps, -1).cummax(dim=1).values  # each sample's last step <= k that unmasks
    last_before = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=1)
    cache_len = torch.where(last_before >= 0, known.gather(1, last_before.clamp(min=0)) + 1, 0)
    pending = known + 1 - cache_len
    return StepPlan(counts, known, cache_len, pending, torch.where(active, pending + counts - 1, 0), step_of)


class StaticDecoder:
    """The fixed buffers of static decoding for one (model view, batch) and the steps that run on them.

    Built once and reused by every generation of the same model, batch and attention (graphs and
    compiled code are tied to its buffers' addresses); `static_decoder` keeps one per decode view.
    """

    def __init__(
        self, model: AOGPT, batch: int, backend: str, linears: str, mode: str, decode_attention: DecodeAttention | None
    ):
        args = model.model_args
        self.slots = static_slots(args.max_seq_len)
        self.scratch = self.slots - 1
        self.vocab_size = args.vocab_size
        self.decoder = CachedDecoder(model, batch, self.slots, backend, linears, True, decode_attention)
        # the step's BlockMask layout (choices.py: DEFAULT_DECODE_ATTENTION says why every touched block is partial)
        self.full_blocks = decode_attention is None or decode_attention.full_blocks
        self.batch, self.device, self.mode = batch, self.decoder.device, mode
        # the long-valued state in one flat buffer, so a run's set-up is one copy from pinned memory
        b, s = batch, self.slots
        sizes = {"order": b * s, "in_order": b * s, "plan": b * s, "rows": b * s}
        sizes.update({name: b for name in ("known", "cache_len", "pending", "width", "noise_keys", "new", "top_k")})
        sizes.update(step_index=1)
        self._flat = torch.zeros(sum(sizes.values()), dtype=torch.long, device=self.device)
        pin = self.device.type == "cuda"
        self._staging = torch.zeros(self._flat.shape, dtype=torch.long, pin_memory=pin)
        self._staged = torch.cuda.Event() if pin else None  # the last copy out of the staging buffer
        self._views = {}
        start = 0
        for name, size in sizes.items():
            shape = (b, s) if size == b * s else (size,)
            self._views[name] = (start, size, shape)
            start += size
        v = self.view
        self.order, self.in_order, self.plan, self.rows = v("order"), v("in_order"), v("plan"), v("rows")
        self.known, self.cache_len, self.pending, self.width = v("known"), v("cache_len"), v("pending"), v("width")
        self.noise_keys, self.step_index = v("noise_keys"), v("step_index")
        # the engine's slots (engine.py): what each row unmasks this step, and its own sampling parameters
        self.new, self.top_k = v("new"), v("top_k")
        self.temperature, self.top_p = (torch.ones(b, dtype=torch.float64, device=self.device) for _ in "tp")
        self.kv_index = torch.arange(s, device=self.device)
        self.draw_keys = torch.zeros(b, s, 2, dtype=torch.long, device=self.device)  # per sample and position
        self._aranges: dict[tuple[str, int], torch.Tensor] = {}
        # the noise's fixed buffers for an eager step; inductor fuses the noise into its own loop instead
        self.noise = None if uses_inductor(mode, self.device) else NoiseWorkspace()
        # the step functions as `mode` runs them, by shape key (graphs.py); called with this state
        self.decode_runner = StepRunner(decode_step, mode, self.device, "decode step")
        self.forward_runner = StepRunner(forward_set_step, mode, self.device, "forward step")
        self.slots_runner = StepRunner(slot_step, mode, self.device, "slot step")
        if self.decoder.backend == "flex":
            cache_len, pending, width = self.cache_len, self.pending, self.width

            def mask_mod(b, h, q_idx, kv_idx):
                return visible(q_idx, kv_idx, cache_len[b], pending[b], width[b])

            self.mask_mod = mask_mod

    def view(self, name: str, flat: torch.Tensor | None = None) -> torch.Tensor:
        start, size, shape = self._views[name]
        return (self._flat if flat is None else flat)[start : start + size].view(shape)

    def arange(self, length: int, role: str = "q") -> torch.Tensor:
        """A cached arange(length) on the device: the inputs that give a step its shape. One per role
        (q: query slots, r: rows drawn), so W == R does not alias them (a separate compile)."""
        key = (role, length)
        if key not in self._aranges:
            self._aranges[key] = torch.arange(length, device=self.device)
        return self._aranges[key]

    def compile_seconds(self) -> float:
        """Seconds spent compiling this decoder's steps so far (graphs.py; a runner wrapped by a profiler, which
        runs warm shapes only, counts none)."""
        runners = (self.decode_runner, self.forward_runner, self.slots_runner)
        return sum(getattr(r, "compile_seconds", 0.0) for r in runners)

    # ---- a run ------------------------------------------------------------------------------
    def start(
        self,
        orders: torch.Tensor,
        given_table: torch.Tensor,
        given: torch.Tensor,
        noise_keys: torch.Tensor,
        plan: StepPlan | None = None,
    ) -> None:
        """Every per-run buffer from the host in one non-blocking copy: the orders (B, n), each sample's
        given tokens in order (B, n), their counts (B,), the samples' noise keys (B,) and the plan; and the
        noise buffers for the plan's widest draw (the KV cache is not cleared: the masks never show a slot
        before this run writes it)."""
        staging = self._staging_free()
        staging.zero_()
        n = orders.shape[1]
        self.view("order", staging)[:, :n] = orders
        self.view("in_order", staging)[:, :n] = given_table
        if plan is not None:
            self.view("plan", staging)[:, : plan.steps] = plan.counts
            if self.noise is not None:
                grown = self.noise.grown
                self.noise.reserve(self.batch * int(plan.counts.max()) * self.vocab_size, self.device)
                if self.noise.grown != grown:  # graphs read the old buffers: forget them
                    self.decode_runner.reset()
        self.view("known", staging).copy_(given)
        self.view("pending", staging).copy_(given + 1)
        self.view("noise_keys", staging).copy_(noise_keys)
        self._flat.copy_(staging, non_blocking=True)
        self._staging_used()
        if plan is not None:
            self.draw_keys.copy_(parallel_draw_keys(self.noise_keys, self.slots))

    def _staging_free(self) -> torch.Tensor:
        """The pinned staging buffer, once the copy out of it that may still be in flight is done."""
        if self._staged is not None and not self._staged.query():
            self._staged.synchronize()
        return self._staging

    def _staging_used(self) -> None:
        if self._staged is not None:
            self._staged.record()

    def forward_rows(self, cache_len: torch.Tensor, pending: torch.Tensor, width: torch.Tensor, rows: torch.Tensor):
        """Logits (B, R, padded vocab) of a forward whose geometry the host decided (the speculative
        sampler's rounds): the (B,) host tensors and rows (B, R) go to the device buffers, padded to
        the step's shape bucket, then the step runs."""
        staging, rows_len = self._staging_free(), rows.shape[1]
        width_q, rows_r = width_bucket(int(width.max())), width_bucket(rows_len)
        for name, value in (("cache_len", cache_len), ("pending", pending), ("width", width)):
            self.view(name, staging).copy_(value)
            self.view(name).copy_(self.view(name, staging), non_blocking=True)
        padded = self.view("rows", staging)[:, :rows_r]
        padded.zero_()
        padded[:, :rows_len] = rows
        self.rows[:, :rows_r].copy_(padded, non_blocking=True)
        self._staging_used()
        q = self.arange(width_q)
        logits = self.forward_runner((width_q, rows_r), self, q, self.rows[:, :rows_r])
        return logits[:, :rows_len]

    def decode(self, width: int, rows: int, sampling: SamplingParams) -> torch.Tensor:
        """The plan's next step at width bucket `width` drawing `rows` rows: `decode_step` as the mode runs
        it. Returns its logits (B, rows, padded vocab)."""
        key = (width, rows, sampling)
        return self.decode_runner(key, self, self.arange(width), self.arange(rows, "r"), sampling)

    # ---- the engine's slots (engine.py): rows that join and leave at step boundaries -------------
    def admit(
        self,
        slot: int,
        order: torch.Tensor,
        given_table: torch.Tensor,
        given: int,
        noise_key: int,
        sampling: SamplingParams,
    ) -> None:
        """Row `slot` takes a new sample: its order (n,), its given tokens in order (n,), its count, its noise
        key (every position's draw key hashed here) and its sampling parameters. Its cache is not cleared:
        the mask never shows a slot before the sample writes it."""
        n = order.shape[0]
        self.order[slot].zero_()
        self.order[slot, :n] = order.to(self.device)
        self.in_order[slot].zero_()
        self.in_order[slot, :n] = given_table.to(self.device)
        for name, value in (("known", given), ("cache_len", 0), ("pending", given + 1), ("noise_keys", noise_key)):
            getattr(self, name)[slot] = value
        key = torch.tensor([noise_key], dtype=torch.long, device=self.device)
        self.draw_keys[slot] = parallel_draw_keys(key, self.slots)[0]
        self.temperature[slot], self.top_p[slot] = sampling.temperature, sampling.top_p
        self.top_k[slot] = sampling.top_k or 0

    def clear(self, slot: int) -> None:
        """Zero row `slot`'s cache (after a step that failed: a non-finite key or value would reach the next
        sample through the masked-out slots' zero weights)."""
        for k, v in zip(self.decoder.cache.k, self.decoder.cache.v, strict=True):
            k[slot].zero_()
            v[slot].zero_()

    def step_slots(self, new: torch.Tensor, width: int, rows: int, filters: RowFilters):
        """One engine step: row b unmasks new[b] (a (B,) host tensor; 0: it sits out) at width bucket `width`,
        drawing `rows` rows with its own sampling parameters. Returns (tokens (B, rows), finite (B,)): the
        tokens drawn (past a row's count: scratch) and whether every logit a row drew from was finite."""
        staging = self._staging_free()
        self.view("new", staging).copy_(new)
        self.new.copy_(self.view("new", staging), non_blocking=True)
        self._staging_used()
        if self.noise is not None:
            grown = self.noise.grown
            self.noise.reserve(self.batch * rows * self.vocab_size, self.device)
            if self.noise.grown != grown:
                self.slots_runner.reset()
        key = (width, rows, filters)
        return self.slots_runner(key, self, self.arange(width), self.arange(rows, "r"), filters)

    def mask(self, q: torch.Tensor, width: torch.Tensor):
        """The step's attention mask over the whole cache: a BlockMask (flex) or a dense (B, 1, W, S) one."""
        if self.decoder.backend == "flex":
            return step_block_mask(
                self.cache_len, self.pending, width, q.shape[0], self.slots, self.mask_mod, full_blocks=self.full_blocks
            )
        per_sample = [t.view(-1, 1, 1, 1) for t in (self.cache_len, self.pending, width)]
        return visible(q.view(1, 1, -1, 1), self.kv_index.view(1, 1, 1, -1), *per_sample)


def _forward(state: StaticDecoder, width: torch.Tensor, q: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The step's cached forward (step.forward_slots) over the whole static cache."""
    return forward_slots(
        state.decoder, state.in_order, state.order, state.cache_len, state.pending, width, q, rows,
        state.mask(q, width), state.slots,
    )  # fmt: skip


def decode_step(state: StaticDecoder, q: torch.Tensor, r: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """Step `state.step_index` of the plan: W = len(q) query slots, R = len(r) rows drawn, each with the
    counter noise of its sample's key and the position it unmasks (the dynamic sampler's). Advances the
    state in place; returns the step's logits (B, R, padded V)."""
    new = state.plan.index_select(1, state.step_index).squeeze(1)
    known = state.known
    width, known_after, cache_len_after, pending_after = step_geometry(known, state.cache_len, state.pending, new)
    state.width.copy_(width)
    rows, dest = draw_slots(known, state.pending, new, r, q.shape[0] - 1, state.scratch)
    logits = _forward(state, width, q, rows)
    positions = state.order.gather(1, torch.clamp(known[:, None] + r, max=state.scratch))
    tokens = sample_tokens(logits, state.vocab_size, sampling, keys_at(state.draw_keys, positions), state.noise)
    state.in_order.scatter_(1, dest, tokens)
    state.cache_len.copy_(cache_len_after)
    state.pending.copy_(pending_after)
    known.copy_(known_after)
    state.step_index.add_(1)
    return logits


def slot_step(state: StaticDecoder, q: torch.Tensor, r: torch.Tensor, filters: RowFilters):
    """`decode_step` for the engine's rows: row b unmasks state.new[b] tokens (each row at its own point of
    its own schedule, the host's to decide) and draws them with its own sampling parameters. Advances the
    state in place; returns (tokens (B, R), finite (B,))."""
    new, known = state.new, state.known
    width, known_after, cache_len_after, pending_after = step_geometry(known, state.cache_len, state.pending, new)
    state.width.copy_(width)
    rows, dest = draw_slots(known, state.pending, new, r, q.shape[0] - 1, state.scratch)
    logits = _forward(state, width, q, rows)
    positions = state.order.gather(1, torch.clamp(known[:, None] + r, max=state.scratch))
    parameters = (state.temperature[:, None], state.top_p[:, None], state.top_k[:, None])
    scores = row_filtered_scores(logits, state.vocab_size, *parameters, filters)
    tokens = gumbel_argmax(scores, keys_at(state.draw_keys, positions), state.noise)
    drawn = r < new[:, None]
    finite = (torch.isfinite(logits[..., : state.vocab_size]).all(dim=-1) | ~drawn).all(dim=-1)
    state.in_order.scatter_(1, dest, tokens)
    state.cache_len.copy_(cache_len_after)
    state.pending.copy_(pending_after)
    known.copy_(known_after)
    return tokens, finite


def forward_set_step(state: StaticDecoder, q: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A forward whose geometry the host set in the state's buffers (`StaticDecoder.forward_rows`)."""
    return _forward(state, state.width, q, rows)


def static_decoder(
    model: AOGPT, batch: int, backend: str, linears: str, mode: str, decode_attention: DecodeAttention | None = None
) -> StaticDecoder:
    """The model's static decoder for this batch, attention (and its FlexAttention setting), Linear kernel
    and mode (all resolved: choices.py): reused while they stay the same (its graphs with it), rebuilt
    otherwise. One per decode view, so a model whose weights changed gets a new one with its new view."""
    view = decode_model(model, linears)
    key = (batch, backend, view.linears, mode, decode_attention)
    held = view.step_buffers
    state = held.get("decoder")
    if state is None or held.get("key") != key:
        held.clear()  # one at a time: its KV cache spans every position
        state = StaticDecoder(model, batch, backend, linears, mode, decode_attention)
        held.update(decoder=state, key=key)
    return state
