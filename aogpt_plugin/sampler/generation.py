"""The AO-GPT sampler: T steps over a fixed order, every step one cached forward (paper §4.3, App. B.4).

Decoder slot j reads the j-th token of the sample's order sigma (slot 0 reads [None]) and is
conditioned on target position sigma(j) -- exactly its training conditioning. Per sample we track

  known     : tokens known so far (given + generated) = u; slots 0..u have real inputs
  cache_len : slots already encoded in the KV cache = c; slots c..u are *pending*, p = u + 1 - c

A step that unmasks b >= 1 tokens (the next b positions of sigma) feeds width = p + b - 1 slots:
the p pending slots (slot c + q, target sigma(c + q)) and b - 1 duplicates of the last one
(slot u's input, targets sigma(u + 1) .. sigma(u + b - 1)); with the mask of masks.py, the last b
outputs are the model's conditionals for those b targets given the u known tokens. Afterwards the
p real slots stay cached (c <- u + 1) and the duplicates' K/V are left to be overwritten. Every
real token is encoded once, with its true next target, so total work is O(n) for any T.

Samples of a batch may unmask different numbers of tokens in a step (binomial counts): the step
is padded to the widest sample, each sample keeps its own cache length and (p, b) in the mask, and
a sample with b = 0 just keeps its pending slots. A step where no sample unmasks runs no forward.

The step's formulas (its geometry, draws and cached forward) are step.py's, which the static step
(static.py) runs too. `speculative_generate` sets a run up the same way and hands it to the rounds of
speculative.py: the sequential (T = n) distribution, exactly, in fewer forward passes. What a run runs
with (graphs, attention, Linear kernel) is resolved once (choices.py), by the caller's plan or here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..devices import synchronize
from ..errors import UserError
from ..model import AOGPT
from ..orders import READ_ORDERS
from ..seeding import stream_generator
from .choices import SamplerChoices, check_names, resolve_choices
from .decoder import CachedDecoder
from .options import COUNTS, SCHEDULES
from .prompt import Prompt, generation_orders
from .sampling import SamplingParams, noise_workspace, sample_tokens, step_counts
from .speculative import MAX_DRAFT, SpeculativeStats, parse_draft, sample_rounds
from .static import StaticDecoder, plan_steps, static_decoder, static_slots
from .step import draw_slots, forward_slots, step_geometry


@dataclass
class SampleConfig:
    length: int  # n: positions per sample (given + generated)
    steps: int  # T: denoising steps over the positions to generate
    num_samples: int = 1
    order: str = "random"  # random | l2r (a tensor order can be passed to `generate`)
    schedule: str = "linear"  # linear | cosine time grid
    counts: str = "deterministic"  # deterministic (authors' code) | binomial (Lemma 4.1)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    backend: str = "auto"  # auto | sdpa | flex (resolved with the two below: choices.py)
    linears: str = "auto"  # auto | aten | onednn (decoder.py)
    graphs: str = "auto"  # auto | on | off | compile | static (graphs.py): how each step runs

    def validate(
        self,
        max_positions: int,
        prompt: Prompt | None = None,
        vocab_size: int | None = None,
        speculative: bool = False,
    ):
        """Checks every value against the model; raises UserError naming the first bad one.
        `speculative`: the rounds decide the forwards, so `steps` does not apply and is not checked.
        backend, linears and graphs are names here (choices.py checks and resolves them)."""
        if self.num_samples < 1:
            raise UserError(f"num_samples={self.num_samples} must be >= 1")
        if not 1 <= self.length <= max_positions:
            raise UserError(f"length={self.length} is outside the model's positions; allowed: 1..{max_positions}")
        for name, value, allowed in (
            ("order", self.order, READ_ORDERS),
            ("schedule", self.schedule, SCHEDULES),
            ("counts", self.counts, COUNTS),
        ):
            if value not in allowed:
                raise UserError(f"{name}={value!r} is not supported; allowed: {', '.join(allowed)}")
        check_names(self.graphs, self.backend, self.linears)
        self.sampling.validate()
        if prompt is not None and vocab_size is not None:
            prompt.validate(self.length, vocab_size)
        to_fill = self.length - len(prompt or ())
        if to_fill < 1:
            raise UserError(f"all {self.length} positions are given; nothing is left to generate")
        if not speculative and not 1 <= self.steps <= to_fill:
            raise UserError(f"steps={self.steps} is outside the allowed range 1..{to_fill} (positions to generate)")
        return self


@dataclass
class StepRecord:
    """What one forward pass predicted (for tests and analysis): per sample, u known tokens before the
    step, b new targets (sigma(u) .. sigma(u + b - 1)), and their raw logits (B, max b, padded vocab)."""

    known: torch.Tensor
    counts: torch.Tensor
    logits: torch.Tensor


@dataclass
class GenerationResult:
    tokens: torch.Tensor  # (B, n) in position order, on CPU
    orders: torch.Tensor  # (B, n) the order each sample was generated in (given positions first)
    num_given: int
    steps: int
    forward_passes: int
    seconds: float
    trace: list[StepRecord] | None = None

    @property
    def generated_tokens(self) -> int:
        return self.tokens.numel() - self.tokens.shape[0] * self.num_given

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / max(self.seconds, 1e-9)


def samples_record(tokens: list[list[int]], texts: list[str], **meta) -> dict:
    """The samples-file layout that `aogpt sample --json` prints and `aogpt eval genppl --save-samples`
    writes (eval/samples.py reads it): one record per sample, the same columns, then the settings."""
    samples = [{"tokens": t, "text": s} for t, s in zip(tokens, texts, strict=True)]
    return {"samples": samples, "tokens": tokens, "text": texts, **meta}


def plan_generator(seed: int) -> torch.Generator:
    """Draws orders and binomial counts (CPU)."""
    return stream_generator("sample_plan", seed)


def noise_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """Draws the Gumbel noise of every token, on the model's device."""
    return stream_generator("sample_noise", seed, device=device)


@dataclass
class _Run:
    """What both samplers set up the same way: the orders, the noise stream, the cache and the
    in-order token table with the prompt in it (set up by `_start`, read out by `_finish`).
    With graphs off the cache is sized to the run; otherwise the model's static decoder holds it."""

    n: int
    batch: int
    given: int
    device: torch.device
    choices: SamplerChoices
    orders: torch.Tensor  # (B, n) on CPU
    order_dev: torch.Tensor
    plan: torch.Generator  # orders drawn; a parallel run draws its step counts next
    noise: torch.Generator
    decoder: CachedDecoder | None = None
    static: StaticDecoder | None = None
    in_order: torch.Tensor | None = None  # in_order[:, j] = x[sigma(j)]; column n (or later) is scratch
    start_time: float = 0.0

    def start(self, model: AOGPT, config: SampleConfig, prompt: Prompt, plan=None) -> None:
        """The timed part begins: the cache and the token table (and a static run's plan)."""
        synchronize(self.device)
        self.start_time = time.perf_counter()
        c = self.choices
        if c.graphs != "off":
            self.static = static_decoder(model, self.batch, c.backend, c.linears, c.graphs)
            self.static.start(self.orders, prompt.tokens, plan)
            self.decoder, self.in_order = self.static.decoder, self.static.in_order
            return
        self.decoder = CachedDecoder(model, self.batch, self.n + 1, c.backend, c.linears)
        self.in_order = torch.zeros(self.batch, self.n + 1, dtype=torch.long, device=self.device)
        if self.given:
            self.in_order[:, : self.given] = torch.tensor(prompt.tokens, device=self.device)

    def forward(self, cache_len, pending, width, rows) -> torch.Tensor:
        """One cached forward of a step whose geometry the host decided ((B,) host tensors, rows (B, R)):
        step.forward_slots over the slots the step needs (dynamic), or the static decoder's forward."""
        if self.static is not None:
            return self.static.forward_rows(cache_len, pending, width, rows)
        q_len = int(width.max())
        mask, kv_len = self.decoder.step_mask(cache_len, pending, width, q_len)
        lockstep = bool((width > 0).all() and (cache_len == cache_len[0]).all() and (width == width[0]).all())
        write = int(cache_len[0]) if lockstep else None  # one slot range for every sample
        cache_len, pending, width, rows = (t.to(self.device) for t in (cache_len, pending, width, rows))
        q = torch.arange(q_len, device=self.device)
        return forward_slots(
            self.decoder, self.in_order, self.order_dev, cache_len, pending, width, q, rows, mask, kv_len, write
        )


def _start(
    model: AOGPT,
    config: SampleConfig,
    prompt: Prompt | None,
    order: torch.Tensor | None,
    choices: SamplerChoices | None,
    speculative: bool,
) -> tuple[_Run, Prompt]:
    """Checks the config against the model, resolves its choices unless the caller's plan did
    (choices.py), and draws the orders: the set-up both samplers share."""
    args = model.model_args
    prompt = prompt or Prompt()
    config.validate(args.max_seq_len, prompt, args.vocab_size, speculative=speculative)
    weight = model.tok_embeddings.weight
    device = weight.device
    if choices is None:
        choices = resolve_choices(
            config.graphs, config.backend, config.linears, device, weight.dtype, args.head_dim, speculative
        )
    n, batch, given = config.length, config.num_samples, len(prompt)
    plan = plan_generator(config.seed)
    orders = generation_orders(n, batch, prompt, config.order if order is None else order, plan)
    run = _Run(n, batch, given, device, choices, orders, orders.to(device), plan, noise_generator(config.seed, device))
    return run, prompt


def _finish(run: _Run) -> tuple[torch.Tensor, float]:
    """The samples in position order (CPU) and the seconds since `start`."""
    tokens = torch.zeros(run.batch, run.n, dtype=torch.long, device=run.device)
    tokens = tokens.scatter_(1, run.order_dev, run.in_order[:, : run.n]).cpu()
    synchronize(run.device)
    return tokens, time.perf_counter() - run.start_time


@torch.inference_mode()
def generate(
    model: AOGPT,
    config: SampleConfig,
    prompt: Prompt | None = None,
    order: torch.Tensor | None = None,
    progress: bool = False,
    record: bool = False,
    choices: SamplerChoices | None = None,
) -> GenerationResult:
    """Sample config.num_samples sequences of config.length tokens.

    `order` (optional): the positions to generate in the order to generate them, (m,) or (B, m);
    it replaces config.order. `record` keeps every step's logits in `result.trace`. `choices`: what
    the run runs with, as the caller's plan resolved them (None: resolved here from the config).
    """
    args = model.model_args
    run, prompt = _start(model, config, prompt, order, choices, speculative=False)
    n, batch, given, device, noise = run.n, run.batch, run.given, run.device, run.noise
    counts = step_counts(n - given, config.steps, batch, config.schedule, config.counts, run.plan)
    if run.choices.graphs != "off":
        return _generate_static(model, config, run, prompt, counts, progress, record)

    run.start(model, config, prompt)
    in_order = run.in_order
    workspace = noise_workspace(batch * int(counts.max()), args.vocab_size, device)
    scratch = n  # cache slot and token column that padding writes to
    known = torch.full((batch,), given, dtype=torch.long)
    cache_len = torch.zeros(batch, dtype=torch.long)
    pending = known + 1 - cache_len
    forward_passes, trace = 0, [] if record else None

    bar = _progress_bar(config.steps, progress)
    for step in range(config.steps):
        new = counts[:, step]
        bar.update(1)
        if int(new.max()) == 0:
            continue  # Lemma 4.1: nothing unmasked, nothing to compute
        width, known_after, cache_len_after, pending_after = step_geometry(known, cache_len, pending, new)
        r = torch.arange(int(new.max()))
        rows, dest = draw_slots(known, pending, new, r, int(width.max()) - 1, scratch)
        logits = run.forward(cache_len, pending, width, rows)
        tokens = sample_tokens(logits, args.vocab_size, config.sampling, noise, workspace)
        forward_passes += 1
        in_order.scatter_(1, dest.to(device), tokens)
        if record:
            trace.append(StepRecord(known.clone(), new.clone(), logits.float().cpu()))
        known, cache_len, pending = known_after, cache_len_after, pending_after
        bar.set_postfix(forwards=forward_passes, refresh=False)
    bar.refresh()  # tqdm draws at most every 0.1 s: show the total before the bar goes
    bar.close()

    tokens, seconds = _finish(run)
    return GenerationResult(tokens, run.orders, given, config.steps, forward_passes, seconds, trace)


def _generate_static(model, config, run, prompt, counts, progress, record) -> GenerationResult:
    """`generate` on the static decoder: the host replays one captured step per planned forward and
    reads the device once, at the end (static.py)."""
    plan = plan_steps(counts, run.given)
    run.start(model, config, prompt, plan)
    state, trace = run.static, [] if record else None
    bar = _progress_bar(config.steps, progress)
    done = 0
    for k, (width, rows) in enumerate(plan.shapes()):
        noise = state.noise_view(rows)
        noise.uniform_(generator=run.noise)  # the dynamic sampler's draw: same generator, shape and order
        logits = state.decode(width, rows, noise, config.sampling)
        if record:
            trace.append(StepRecord(plan.known[:, k].clone(), plan.counts[:, k].clone(), logits.float().cpu()))
        bar.update(int(plan.step_of[k]) + 1 - done)
        done = int(plan.step_of[k]) + 1
        bar.set_postfix(forwards=k + 1, refresh=False)
    bar.update(config.steps - done)
    bar.refresh()
    bar.close()
    tokens, seconds = _finish(run)
    return GenerationResult(tokens, run.orders, run.given, config.steps, plan.steps, seconds, trace)


@torch.inference_mode()
def speculative_generate(
    model: AOGPT,
    config: SampleConfig,
    draft: int | str = 4,
    prompt: Prompt | None = None,
    order: torch.Tensor | None = None,
    progress: bool = False,
    inspect=None,
    choices: SamplerChoices | None = None,
) -> tuple[GenerationResult, SpeculativeStats]:
    """Sample config.num_samples sequences of config.length tokens from the sequential distribution,
    exactly, in the rounds of speculative.py.

    config.steps, schedule and counts do not apply (the rounds decide how many tokens each forward
    fixes). `inspect(decoder, known, cache_len, in_order, orders)` is called after every forward
    (tests check the cache there). `choices` as for `generate`.
    """
    run, prompt = _start(model, config, prompt, order, choices, speculative=True)
    draft = parse_draft(draft)
    to_fill = run.n - run.given
    run.start(model, config, prompt)
    bar = _progress_bar(to_fill * run.batch, progress, unit="tok")
    forwards, stats = sample_rounds(run, model.model_args.vocab_size, config.sampling, draft, bar, inspect)
    bar.refresh()  # tqdm draws at most every 0.1 s: show the total before the bar goes
    bar.close()
    tokens, seconds = _finish(run)
    steps = max(1, min(config.steps, to_fill))  # reported as the config asked, within 1..to_fill
    return GenerationResult(tokens, run.orders, run.given, steps, forwards, seconds), stats


def _progress_bar(total: int, enabled: bool, unit: str = "step"):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="sampling", unit=unit, leave=False)


def memory_per_sample(
    args, config: SampleConfig, given: int, itemsize: int, draft: int | str | None = None, static: bool = False
) -> int:
    """Bytes one more sample of a batch needs while sampling (an estimate from above): its KV cache
    slots (`static`: every position of the model), the logits, noise and probability rows of the
    widest step, and its order and token rows. The commands refuse a batch that cannot fit before any
    work instead of swapping."""
    to_fill = max(1, config.length - given)
    if draft is None:
        rows = -(-to_fill // max(1, min(config.steps, to_fill)))  # tokens of the widest deterministic step
        rows = to_fill if config.counts == "binomial" else rows
        per_row = args.padded_vocab_size * (itemsize + 4 + 4) + args.vocab_size * 8  # logits, scores, noise
        extra = 0
    else:
        rows = 2 * MAX_DRAFT  # verify rows, then the next drafts
        per_row = args.padded_vocab_size * (itemsize + 4) + args.vocab_size * 8 * 2  # float64 probabilities
        extra = MAX_DRAFT * args.vocab_size * 8  # the drafts' proposals
    slots = static_slots(args.max_seq_len) if static else config.length + 1
    cache = 2 * args.n_layers * slots * args.dim * itemsize
    activations = (rows + config.length) * args.dim * (4 + 2 * args.mlp_ratio) * itemsize
    return cache + rows * per_row + extra + activations + 8 * 8 * (config.length + 1)
