"""The continuous-batching engine: a fixed number of slots, each holding one sample at its own point of its own
schedule. A sample joins a free slot at a step boundary and leaves when its last position is drawn.

Why: a fixed batch runs until its slowest row ends, and a request that comes meanwhile waits for the whole
batch. AO-GPT's cache is append-only per row and its step already takes per-row data (step.py: known,
cache_len, pending, width), so rows at different steps, of different lengths, orders, prompts, infill spans
and sampling options share one step.

A sample's tokens are those it gets drawn alone (`generation.generate`) with the same seed, whatever runs
beside it and whenever it joins: its order and its counts come from its own generator (`start_parallel`,
the code `generate` runs), its noise from its own key (noise.py: a function of the seed, the draw and the
position, never of the step), its temperature, top-p and top-k are its row's (`row_filtered_scores`: the
per-batch values exactly), and it unmasks the non-zero counts of its schedule in turn, one per engine step,
as its lone run does (a lone run's step where it unmasks nothing runs no forward).

A step runs as the run's choices say (choices.py): `--graphs off`, the dynamic step sized on the host over a
cache of the slots (generation.py's loop); otherwise `static.slot_step` over the engine's own StaticDecoder
(eager, inductor-compiled, or captured and replayed on CUDA: one graph per width bucket, rows drawn and
filters). A step that raises fails every sample in it; a sample whose logits are not finite fails alone (its
row's cache is cleared, the other rows never read it). Either way the engine goes on with the others.

`batching="fixed"` admits samples only while no slot is busy: fixed batches, which run until their slowest
row ends, kept for comparison (`aogpt bench serve`).

Speculative sampling is not the engine's: its rounds decide per sample how many tokens a forward fixes and
verify drafts of their own. `aogpt sample --requests --speculative` keeps fixed batches
(request.sample_batches); the server serves the parallel sampler only.

One thread drives an engine (submit, cancel, step): a command's main thread, or the server's worker.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from ..devices import synchronize
from .decoder import CachedDecoder
from .generation import start_parallel
from .noise import NoiseWorkspace, keys_at, parallel_draw_keys
from .options import BATCHING
from .sampling import RowFilters, SamplingParams, row_parameters, sample_row_tokens
from .static import StaticDecoder, width_bucket
from .step import draw_slots, forward_slots, step_geometry

if TYPE_CHECKING:
    from ..model import AOGPT
    from .choices import SamplerChoices


@dataclass
class SampleOutput:
    """A finished sample: its tokens in position order (its own length), how many it was given, and the
    engine steps it took part in."""

    tokens: list[int]
    given: int
    steps: int


class Listener(Protocol):
    """What a job's submitter hears, on the engine's thread: each step's drawn (position, token) pairs of a
    sample, each finished sample, and a failure (the job's samples stop)."""

    def drawn(self, job: Job, sample: int, pairs: list[tuple[int, int]]) -> None: ...

    def finished(self, job: Job, sample: int, output: SampleOutput) -> None: ...

    def failed(self, job: Job, message: str) -> None: ...


class Job:
    """The samples of one submitted plan. `cancel` (Engine.cancel) drops them at the next step boundary."""

    def __init__(self, listener: Listener, samples: int):
        self.listener, self.samples, self.left = listener, samples, samples
        self.cancelled = self.over = False


@dataclass
class _Row:
    """One sample on the host: its order, given tokens and schedule (its non-zero counts), its noise key and
    sampling parameters, and its tokens in order as they are drawn."""

    job: Job
    sample: int
    order: torch.Tensor  # (n,) CPU: given positions, then its fill order, then positions it never reaches
    given_table: torch.Tensor  # (n,) CPU: its given tokens in order, 0 after them
    given: int
    length: int
    noise_key: int
    counts: list[int]
    sampling: SamplingParams
    in_order: list[int] = field(default_factory=list)
    step: int = 0

    def output(self) -> SampleOutput:
        tokens = [0] * self.length
        for j, position in enumerate(self.order[: self.length].tolist()):
            tokens[position] = self.in_order[j]
        return SampleOutput(tokens, self.given, self.step)


class Engine:
    """`slots` rows over one step; `submit` queues a plan's samples, `step` runs one step (admitting queued
    samples into free slots first), `cancel` drops a job's samples at the next step boundary."""

    def __init__(self, model: AOGPT, slots: int, choices: SamplerChoices, batching: str = "continuous"):
        if batching not in BATCHING:
            raise ValueError(f"batching={batching!r}; allowed: {', '.join(BATCHING)}")
        self.model, self.slots, self.choices, self.batching = model, slots, choices, batching
        self.vocab_size = model.model_args.vocab_size
        self.rows: list[_Row | None] = [None] * slots
        self.waiting: deque[_Row] = deque()
        self.known, self.cache_len, self.pending = (torch.zeros(slots, dtype=torch.long) for _ in range(3))
        self.pending += 1
        static = choices.static_step
        self._slots = _StaticSlots(model, slots, choices) if static else _DynamicSlots(model, slots, choices)
        self.steps = 0  # steps run
        self.seconds = 0.0  # spent in steps (a compile of the static step included: compile_seconds)
        self.last_step_seconds = 0.0

    # ---- the submitter's side ---------------------------------------------------------------------
    def submit(self, plan, listener: Listener) -> Job:
        """Queue the samples of `plan` (a checked parallel plan: request.SamplePlan); each is drawn as its
        lone run would draw it."""
        run, counts = start_parallel(self.model, plan.config, plan.prompts, plan.order, plan.choices)
        job = Job(listener, run.batch)
        for b in range(run.batch):
            self.waiting.append(
                _Row(
                    job,
                    b,
                    run.orders[b],
                    run.given_table[b],
                    int(run.given[b]),
                    int(run.lengths[b]),
                    int(run.noise_keys[b]),
                    [c for c in counts[b].tolist() if c > 0],
                    plan.config.sampling,
                    run.given_table[b, : int(run.given[b])].tolist() + [0] * int(run.lengths[b] - run.given[b]),
                )  # fmt: skip
            )
        return job

    def cancel(self, job: Job) -> None:
        job.cancelled = True

    @property
    def busy(self) -> int:
        """Slots holding a sample."""
        return sum(row is not None for row in self.rows)

    @property
    def queued(self) -> int:
        """Samples waiting for a slot."""
        return len(self.waiting)

    def idle(self) -> bool:
        return not self.waiting and not self.busy

    def compile_seconds(self) -> float:
        return self._slots.compile_seconds()

    # ---- one step ---------------------------------------------------------------------------------
    def step(self) -> int:
        """Drop cancelled samples, admit queued ones into free slots, run one step; returns the samples that
        took part (0: nothing to do)."""
        for slot, row in enumerate(self.rows):
            if row is not None and (row.job.cancelled or row.job.over):
                self.rows[slot] = None
        self._admit()
        active = [slot for slot, row in enumerate(self.rows) if row is not None]
        if not active:
            return 0
        new = torch.zeros(self.slots, dtype=torch.long)
        for slot in active:
            row = self.rows[slot]
            new[slot] = row.counts[row.step]
        geometry = step_geometry(self.known, self.cache_len, self.pending, new)
        width, filters = geometry[0], RowFilters.of([self.rows[s].sampling for s in active], self.vocab_size)
        started = time.perf_counter()
        try:
            tokens, finite = self._slots.run(new, width, filters, self.known, self.cache_len, self.pending)
        except Exception as e:  # noqa: BLE001 - every sample of the step fails; the engine goes on
            message = f"the step failed ({type(e).__name__}: {e})"
            jobs = {id(self.rows[slot].job): self.rows[slot].job for slot in active}
            for slot in active:
                self._slots.clear(slot)
            for job in jobs.values():
                self._fail(job, message)
            return len(active)
        finally:
            self.last_step_seconds = time.perf_counter() - started
            self.seconds += self.last_step_seconds
            self.steps += 1
        known = self.known.tolist()
        self.known, self.cache_len, self.pending = geometry[1:]
        for slot in active:
            row = self.rows[slot]
            if row is None:  # its job failed with an earlier row of this step
                continue
            if not finite[slot]:
                self._slots.clear(slot)
                self._fail(row.job, "the model's logits were not finite")
                continue
            count, start = int(new[slot]), known[slot]
            drawn = tokens[slot, :count].tolist()
            row.in_order[start : start + count] = drawn
            row.step += 1
            positions = row.order[start : start + count].tolist()
            row.job.listener.drawn(row.job, row.sample, list(zip(positions, drawn, strict=True)))
            if row.step == len(row.counts):
                self.rows[slot] = None
                row.job.left -= 1
                row.job.over = row.job.left == 0
                row.job.listener.finished(row.job, row.sample, row.output())
        return len(active)

    def _admit(self) -> None:
        if self.batching == "fixed" and self.busy:
            return
        for slot in range(self.slots):
            while self.rows[slot] is None and self.waiting:
                row = self.waiting.popleft()
                if row.job.cancelled or row.job.over:
                    continue
                self.rows[slot] = row
                self.known[slot], self.cache_len[slot], self.pending[slot] = row.given, 0, row.given + 1
                self._slots.admit(slot, row)

    def fail_all(self, message: str) -> None:
        """Every job in a slot or in the queue fails (the caller met an error outside a step's guard)."""
        jobs = {id(r.job): r.job for r in [*self.rows, *self.waiting] if r is not None and not r.job.over}
        for slot in range(self.slots):
            if self.rows[slot] is not None:
                self._slots.clear(slot)
        for job in jobs.values():
            self._fail(job, message)

    def _fail(self, job: Job, message: str) -> None:
        """`job` fails: its samples leave their slots and the queue, its listener hears why once."""
        job.over = True
        for slot, row in enumerate(self.rows):
            if row is not None and row.job is job:
                self.rows[slot] = None
        self.waiting = deque(row for row in self.waiting if row.job is not job)
        job.listener.failed(job, message)


class _DynamicSlots:
    """The rows' device state for the dynamic step (`--graphs off`): a cache of every position of the model
    per slot, each step sized on the host (generation.py's loop)."""

    def __init__(self, model: AOGPT, slots: int, choices: SamplerChoices):
        args = model.model_args
        self.n, self.vocab_size = args.max_seq_len, args.vocab_size
        self.decoder = CachedDecoder(model, slots, self.n + 1, choices.backend, choices.linears)
        device = self.device = self.decoder.device
        self.in_order = torch.zeros(slots, self.n + 1, dtype=torch.long, device=device)  # column n: scratch
        self.order = torch.zeros(slots, self.n, dtype=torch.long, device=device)
        self.draw_keys = torch.zeros(slots, self.n, 2, dtype=torch.long, device=device)
        self.parameters = row_parameters([SamplingParams()] * slots, device)
        self.workspace = NoiseWorkspace()

    def admit(self, slot: int, row: _Row) -> None:
        m = row.order.shape[0]
        self.order[slot].zero_()
        self.order[slot, :m] = row.order.to(self.device)
        self.in_order[slot].zero_()
        self.in_order[slot, :m] = row.given_table.to(self.device)
        key = torch.tensor([row.noise_key], dtype=torch.long, device=self.device)
        self.draw_keys[slot] = parallel_draw_keys(key, self.n)[0]
        for tensor, value in zip(self.parameters, row_parameters([row.sampling], self.device), strict=True):
            tensor[slot] = value[0]

    def clear(self, slot: int) -> None:
        for k, v in zip(self.decoder.cache.k, self.decoder.cache.v, strict=True):
            k[slot].zero_()
            v[slot].zero_()

    def run(self, new, width, filters, known, cache_len, pending):
        r = torch.arange(int(new.max()))
        q_len = int(width.max())
        rows, dest = draw_slots(known, pending, new, r, q_len - 1, self.n)
        mask, kv_len = self.decoder.step_mask(cache_len, pending, width, q_len)
        to_device = (t.to(self.device) for t in (cache_len, pending, width, rows))
        cache_len_d, pending_d, width_d, rows_d = to_device
        q = torch.arange(q_len, device=self.device)
        logits = forward_slots(
            self.decoder, self.in_order, self.order, cache_len_d, pending_d, width_d, q, rows_d, mask, kv_len
        )
        positions = self.order.gather(1, (known[:, None] + r).clamp(0, self.n - 1).to(self.device))
        drawn = (r < new[:, None]).to(self.device)
        tokens = sample_row_tokens(
            logits, self.vocab_size, self.parameters, filters, keys_at(self.draw_keys, positions), drawn, self.workspace
        )
        finite = (torch.isfinite(logits[..., : self.vocab_size]).all(dim=-1) | ~drawn).all(dim=-1)
        self.in_order.scatter_(1, dest.to(self.device), tokens)
        return tokens.cpu(), finite.cpu()

    def compile_seconds(self) -> float:
        return 0.0


class _StaticSlots:
    """The rows' device state for the static step: the engine's own StaticDecoder (a generation run on the
    model's shared one would overwrite the rows' buffers)."""

    def __init__(self, model: AOGPT, slots: int, choices: SamplerChoices):
        self.state = StaticDecoder(
            model, slots, choices.backend, choices.linears, choices.graphs, choices.decode_attention
        )
        self.state.pending.fill_(1)  # an empty slot's geometry: nothing encoded, the start slot pending

    def admit(self, slot: int, row: _Row) -> None:
        self.state.admit(slot, row.order, row.given_table, row.given, row.noise_key, row.sampling)

    def clear(self, slot: int) -> None:
        self.state.clear(slot)

    def run(self, new, width, filters, known, cache_len, pending):
        tokens, finite = self.state.step_slots(new, width_bucket(int(width.max())), int(new.max()), filters)
        tokens, finite = tokens.cpu(), finite.cpu()
        synchronize(self.state.device)
        return tokens, finite

    def compile_seconds(self) -> float:
        return self.state.compile_seconds()
