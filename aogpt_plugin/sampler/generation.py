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

Each sample of a batch is its own request: its given tokens, its length (up to the batch's), its fill
order and its seed. Its order and binomial counts come from a generator of its own seed and its Gumbel
noise is counter-based (noise.py: a hash of its seed, the draw and the position), so its tokens depend
on its own request and seed only, never on its neighbours, the batch size or how the step runs.

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
from ..seeding import MAX_SEED, sample_seed, stream_generator, stream_seed
from .choices import SamplerChoices, check_names, resolve_choices
from .decoder import CachedDecoder
from .noise import PARALLEL_DRAW, NoiseWorkspace, keys_at, parallel_draw_keys, row_keys
from .options import COUNTS, SCHEDULES
from .prompt import Prompt, order_specs, sample_orders, sample_prompts
from .sampling import SamplingParams, sample_tokens, step_counts
from .speculative import MAX_DRAFT, SpeculativeStats, parse_draft, sample_rounds
from .static import StaticDecoder, plan_steps, static_decoder, static_slots
from .step import draw_slots, forward_slots, step_geometry


@dataclass
class SampleConfig:
    length: int  # n: positions per sample (given + generated); with `lengths`, the batch's longest
    steps: int | None = None  # T: denoising steps over each sample's positions to generate; None: one per token
    num_samples: int = 1
    order: str = "random"  # random | l2r (a tensor order, or one per sample, can be passed to `generate`)
    schedule: str = "linear"  # linear | cosine time grid
    counts: str = "deterministic"  # deterministic (authors' code) | binomial (Lemma 4.1)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = (
        0  # sample i's seed is seeding.sample_seed(seed, i) (sample 0's: seed), unless `seeds` gives each its own
    )
    backend: str = "auto"  # auto | sdpa | flex (resolved with the two below: choices.py)
    linears: str = "auto"  # auto | aten | onednn (decoder.py)
    graphs: str = "auto"  # auto | on | off | compile | static (graphs.py): how each step runs
    decode_attention: str = "auto"  # the static step's FlexAttention: auto | a setting (options.DecodeAttention)
    lengths: tuple[int, ...] | None = None  # per sample, each <= length; None: every sample has `length`
    seeds: tuple[int, ...] | None = None  # per sample; None: derived from seed

    def sample_lengths(self) -> tuple[int, ...]:
        return tuple(self.lengths) if self.lengths is not None else (self.length,) * self.num_samples

    def sample_seeds(self) -> tuple[int, ...]:
        """Each sample's seed: its orders, counts and noise are drawn from it alone (batch invariance)."""
        if self.seeds is not None:
            return tuple(self.seeds)
        return tuple(sample_seed(self.seed, i) for i in range(self.num_samples))

    def validate(
        self,
        max_positions: int,
        prompt: Prompt | tuple[Prompt, ...] | None = None,
        vocab_size: int | None = None,
        speculative: bool = False,
    ):
        """Checks every value against the model; raises UserError naming the first bad one (and the sample,
        in a batch whose samples differ). `prompt`: one for every sample or one per sample.
        `speculative`: the rounds decide the forwards, so `steps` does not apply and is not checked.
        backend, linears, graphs and decode_attention are names here (choices.py checks and resolves them)."""
        if self.num_samples < 1:
            raise UserError(f"num_samples={self.num_samples} must be >= 1", "num_samples")
        check_length(self.length, max_positions)
        for name, values in (("lengths", self.lengths), ("seeds", self.seeds)):
            if values is not None and len(values) != self.num_samples:
                raise UserError(
                    f"{name} has {len(values)} items for {self.num_samples} samples; allowed: one per sample", name
                )
        for b, seed in enumerate(self.seeds or (self.seed,)):
            if not 0 <= seed <= MAX_SEED:
                of = f" of sample {b}" if self.seeds is not None and self.num_samples > 1 else ""
                raise UserError(f"seed={seed}{of} is outside the allowed range 0..2**64-1", "seed")
        for b, n_b in enumerate(self.lengths or ()):
            if not 1 <= n_b <= self.length:
                raise UserError(
                    f"length={n_b} of sample {b} is outside 1..{self.length} (the batch's length)", "length"
                )
        for name, value, allowed in (
            ("order", self.order, READ_ORDERS),
            ("schedule", self.schedule, SCHEDULES),
            ("counts", self.counts, COUNTS),
        ):
            if value not in allowed:
                raise UserError(f"{name}={value!r} is not supported; allowed: {', '.join(allowed)}", name)
        check_names(self.graphs, self.backend, self.linears, self.decode_attention)
        self.sampling.validate()
        if isinstance(prompt, tuple) or self.lengths is not None:  # per sample
            prompts, lengths = sample_prompts(prompt, self.num_samples), self.sample_lengths()
            differ = len(set(prompts)) > 1 or len(set(lengths)) > 1
        else:  # one check serves every sample (num_samples may be large: the memory check comes later)
            prompts, lengths, differ = (prompt or Prompt(),), (self.length,), False
        for b, (n_b, given) in enumerate(zip(lengths, prompts, strict=True)):
            of = f" (sample {b})" if differ else ""
            given.validate(n_b, vocab_size, of)
            to_fill = n_b - len(given)
            if not speculative and self.steps is not None and not 1 <= self.steps <= to_fill:
                raise UserError(
                    f"steps={self.steps} is outside the allowed range 1..{to_fill} (positions to generate){of}", "steps"
                )
        return self


def check_length(n: int, max_positions: int) -> None:
    """A sample's length against the model's positions (the request plan checks each sample's, validate the batch's)."""
    if not 1 <= n <= max_positions:
        raise UserError(f"length={n} is outside the model's positions; allowed: 1..{max_positions}", "length")


@dataclass
class StepRecord:
    """What one forward pass predicted (for tests and analysis): per sample, u known tokens before the
    step, b new targets (sigma(u) .. sigma(u + b - 1)), and their raw logits (B, max b, padded vocab)."""

    known: torch.Tensor
    counts: torch.Tensor
    logits: torch.Tensor


@dataclass
class GenerationResult:
    tokens: torch.Tensor  # (B, n) in position order, on CPU; -1 past a sample's length
    orders: torch.Tensor  # (B, n) the order each sample was generated in (given positions first)
    given: torch.Tensor  # (B,) given tokens per sample
    lengths: torch.Tensor  # (B,) positions per sample
    steps: int
    forward_passes: int
    seconds: float  # sampling, and compiling the step if it was compiled in this run (compile_seconds)
    trace: list[StepRecord] | None = None
    compile_seconds: float = 0.0

    @property
    def generated_tokens(self) -> int:
        return int((self.lengths - self.given).sum())

    @property
    def tokens_per_second(self) -> float:
        """Sampling speed: generated tokens over the seconds spent sampling (a compile of the step excluded)."""
        return self.generated_tokens / max(self.seconds - self.compile_seconds, 1e-9)

    def sample_tokens(self, b: int) -> list[int]:
        """Sample b's tokens, its own length."""
        return self.tokens[b, : int(self.lengths[b])].tolist()


def samples_record(tokens: list[list[int]], texts: list[str], **meta) -> dict:
    """The samples-file layout that `aogpt sample --json` prints and `aogpt eval genppl --save-samples`
    writes (eval/samples.py reads it): one record per sample, the same columns, then the settings."""
    samples = [{"tokens": t, "text": s} for t, s in zip(tokens, texts, strict=True)]
    return {"samples": samples, "tokens": tokens, "text": texts, **meta}


def plan_generator(seed: int) -> torch.Generator:
    """Draws one sample's order and binomial counts (CPU), from its seed."""
    return stream_generator("sample_plan", seed)


def noise_seed(seed: int) -> int:
    """The key of one sample's counter-based noise (noise.py), from its seed."""
    return stream_seed("sample_noise", seed)


@dataclass
class _Run:
    """What both samplers set up the same way, per sample: the orders (drawn from the sample's seed), the
    given tokens and lengths, the noise keys, the cache and the in-order token table with the given tokens
    in it (set up by `_start`, read out by `_finish`). With graphs off the cache is sized to the run;
    otherwise the model's static decoder holds it."""

    n: int
    batch: int
    given: torch.Tensor  # (B,) on CPU
    lengths: torch.Tensor  # (B,) on CPU
    device: torch.device
    choices: SamplerChoices
    orders: torch.Tensor  # (B, n) on CPU
    order_dev: torch.Tensor
    generators: list[torch.Generator]  # per sample: its order drawn; a parallel run draws its counts next
    noise_keys: torch.Tensor  # (B,) the samples' noise keys (noise_seed), on CPU
    noise_keys_dev: torch.Tensor  # the same on the device
    given_table: torch.Tensor  # (B, n) on CPU: each sample's given tokens in order, 0 after them
    decoder: CachedDecoder | None = None
    static: StaticDecoder | None = None
    in_order: torch.Tensor | None = None  # in_order[:, j] = x[sigma(j)]; column n (or later) is scratch
    draw_keys: torch.Tensor | None = None  # (B, n, 2) every position's parallel-draw key, made on first use
    start_time: float = 0.0
    compiled_before: float = 0.0

    def start(self, model: AOGPT, plan=None) -> None:
        """The timed part begins: the cache and the token table (and a static run's plan)."""
        synchronize(self.device)
        self.start_time = time.perf_counter()
        c = self.choices
        if c.static_step:
            self.static = static_decoder(model, self.batch, c.backend, c.linears, c.graphs, c.decode_attention)
            self.compiled_before = self.static.compile_seconds()
            self.static.start(self.orders, self.given_table, self.given, self.noise_keys, plan)
            self.decoder, self.in_order = self.static.decoder, self.static.in_order
            return
        self.decoder = CachedDecoder(model, self.batch, self.n + 1, c.backend, c.linears)
        self.in_order = torch.zeros(self.batch, self.n + 1, dtype=torch.long, device=self.device)
        self.in_order[:, : self.n] = self.given_table.to(self.device)

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

    def keys(self, step, order_index: torch.Tensor) -> torch.Tensor:
        """Noise keys (B, R, 2) of draws `step` (noise.py) for the positions at `order_index` (B, R) of each
        sample's order (CPU; clamped into the order)."""
        positions = self.orders.gather(1, order_index.clamp(0, self.n - 1)).to(self.device)
        if isinstance(step, int) and step == PARALLEL_DRAW:  # looked up, hashed once per run (noise.py)
            if self.draw_keys is None:
                self.draw_keys = parallel_draw_keys(self.noise_keys_dev, self.n)
            return keys_at(self.draw_keys, positions)
        return row_keys(self.noise_keys_dev, step, positions)


def _start(
    model: AOGPT,
    config: SampleConfig,
    prompt: Prompt | tuple[Prompt, ...] | None,
    order,
    choices: SamplerChoices | None,
    speculative: bool,
) -> _Run:
    """Checks the config against the model, resolves its choices unless the caller's plan did
    (choices.py), and draws each sample's order from its own seed: the set-up both samplers share."""
    args = model.model_args
    config.validate(args.max_seq_len, prompt, args.vocab_size, speculative=speculative)
    weight = model.tok_embeddings.weight
    device = weight.device
    if choices is None:
        choices = resolve_choices(
            config.graphs, config.backend, config.linears, device, weight.dtype, args.head_dim, config.decode_attention,
        )  # fmt: skip
    n, batch = config.length, config.num_samples
    prompts, lengths = sample_prompts(prompt, batch), config.sample_lengths()
    seeds = config.sample_seeds()
    generators = [plan_generator(s) for s in seeds]
    orders = sample_orders(
        n, lengths, prompts, order_specs(config.order if order is None else order, batch), generators
    )
    given_table = torch.zeros(batch, n, dtype=torch.long)
    for b, p in enumerate(prompts):
        given_table[b, : len(p)] = torch.tensor(p.tokens, dtype=torch.long)
    given = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    noise_keys = torch.tensor([noise_seed(s) for s in seeds], dtype=torch.long)
    return _Run(
        n, batch, given, torch.tensor(lengths), device, choices, orders, orders.to(device), generators, noise_keys,
        noise_keys.to(device), given_table,
    )  # fmt: skip


def start_parallel(
    model: AOGPT,
    config: SampleConfig,
    prompt: Prompt | tuple[Prompt, ...] | None = None,
    order=None,
    choices: SamplerChoices | None = None,
) -> tuple[_Run, torch.Tensor]:
    """A parallel run set up (`_start`: checked, each sample's order, given tokens and noise key) and each
    sample's tokens unmasked per step (B, T), drawn from its own generator after its order: what `generate`
    runs, and what the engine (engine.py) takes each sample's row from."""
    run = _start(model, config, prompt, order, choices, speculative=False)
    to_fill = (run.lengths - run.given).tolist()
    return run, step_counts(to_fill, config.steps, config.schedule, config.counts, run.generators)


def _finish(run: _Run) -> tuple[torch.Tensor, float]:
    """The samples in position order (CPU; -1 past a sample's length) and the seconds since `start`."""
    tokens = torch.zeros(run.batch, run.n, dtype=torch.long, device=run.device)
    tokens = tokens.scatter_(1, run.order_dev, run.in_order[:, : run.n]).cpu()
    synchronize(run.device)
    seconds = time.perf_counter() - run.start_time
    tokens[torch.arange(run.n) >= run.lengths[:, None]] = -1
    return tokens, seconds


def _compile_seconds(run: _Run) -> float:
    """Seconds this run spent compiling the static step (said on stderr as they were spent; graphs.py)."""
    return 0.0 if run.static is None else run.static.compile_seconds() - run.compiled_before


@torch.inference_mode()
def generate(
    model: AOGPT,
    config: SampleConfig,
    prompt: Prompt | tuple[Prompt, ...] | None = None,
    order=None,
    progress: bool = False,
    record: bool = False,
    choices: SamplerChoices | None = None,
) -> GenerationResult:
    """Sample config.num_samples sequences, sample b of its own length with its own given tokens and seed.

    `prompt`: the given tokens of every sample, or a sequence with one Prompt per sample. `order`
    (optional): the positions to generate in the order to generate them, (m,) or (B, m), or one per
    sample (a name or positions); it replaces config.order. `record` keeps every step's logits in
    `result.trace`. `choices`: what the run runs with, as the caller's plan resolved them (None: resolved
    here from the config). Sample b's tokens depend on its own options and seed only.
    """
    args = model.model_args
    run, counts = start_parallel(model, config, prompt, order, choices)
    if run.choices.static_step:
        return _generate_static(model, config, run, counts, progress, record)

    run.start(model)
    n, batch, device, in_order = run.n, run.batch, run.device, run.in_order
    workspace = NoiseWorkspace()
    scratch = n  # cache slot and token column that padding writes to
    known = run.given.clone()
    cache_len = torch.zeros(batch, dtype=torch.long)
    pending = known + 1 - cache_len
    forward_passes, trace = 0, [] if record else None
    steps = counts.shape[1]

    bar = _progress_bar(steps, progress)
    for step in range(steps):
        new = counts[:, step]
        bar.update(1)
        if int(new.max()) == 0:
            continue  # Lemma 4.1: nothing unmasked, nothing to compute
        width, known_after, cache_len_after, pending_after = step_geometry(known, cache_len, pending, new)
        r = torch.arange(int(new.max()))
        rows, dest = draw_slots(known, pending, new, r, int(width.max()) - 1, scratch)
        logits = run.forward(cache_len, pending, width, rows)
        keys = run.keys(PARALLEL_DRAW, known[:, None] + r)
        drawn = (r < new[:, None]).to(device)
        tokens = sample_tokens(logits, args.vocab_size, config.sampling, keys, workspace, drawn)
        forward_passes += 1
        in_order.scatter_(1, dest.to(device), tokens)
        if record:
            trace.append(StepRecord(known.clone(), new.clone(), logits.float().cpu()))
        known, cache_len, pending = known_after, cache_len_after, pending_after
        bar.set_postfix(forwards=forward_passes, refresh=False)
    bar.refresh()  # tqdm draws at most every 0.1 s: show the total before the bar goes
    bar.close()

    tokens, seconds = _finish(run)
    return GenerationResult(tokens, run.orders, run.given, run.lengths, steps, forward_passes, seconds, trace)


def _generate_static(model, config, run, counts, progress, record) -> GenerationResult:
    """`generate` on the static decoder: the host replays one captured step per planned forward and
    reads the device once, at the end (static.py). The noise is made inside the step, from its buffers."""
    plan = plan_steps(counts, run.given)
    run.start(model, plan)
    state, trace = run.static, [] if record else None
    steps = counts.shape[1]
    bar = _progress_bar(steps, progress)
    done = 0
    for k, (width, rows) in enumerate(plan.shapes()):
        logits = state.decode(width, rows, config.sampling)
        if record:
            trace.append(StepRecord(plan.known[:, k].clone(), plan.counts[:, k].clone(), logits.float().cpu()))
        bar.update(int(plan.step_of[k]) + 1 - done)
        done = int(plan.step_of[k]) + 1
        bar.set_postfix(forwards=k + 1, refresh=False)
    bar.update(steps - done)
    bar.refresh()
    bar.close()
    tokens, seconds = _finish(run)
    return GenerationResult(
        tokens, run.orders, run.given, run.lengths, steps, plan.steps, seconds, trace, _compile_seconds(run)
    )


@torch.inference_mode()
def speculative_generate(
    model: AOGPT,
    config: SampleConfig,
    draft: int | str = 4,
    prompt: Prompt | tuple[Prompt, ...] | None = None,
    order=None,
    progress: bool = False,
    inspect=None,
    choices: SamplerChoices | None = None,
) -> tuple[GenerationResult, SpeculativeStats]:
    """Sample config.num_samples sequences from the sequential distribution, exactly, in the rounds of
    speculative.py; per-sample prompts, orders, lengths and seeds as for `generate`.

    config.steps, schedule and counts do not apply (the rounds decide how many tokens each forward
    fixes). `inspect(decoder, known, cache_len, in_order, orders)` is called after every forward
    (tests check the cache there). `choices` as for `generate`.
    """
    run = _start(model, config, prompt, order, choices, speculative=True)
    draft = parse_draft(draft)
    run.start(model)
    bar = _progress_bar(int((run.lengths - run.given).sum()), progress, unit="tok")
    forwards, stats = sample_rounds(run, model.model_args.vocab_size, config.sampling, draft, bar, inspect)
    bar.refresh()  # tqdm draws at most every 0.1 s: show the total before the bar goes
    bar.close()
    tokens, seconds = _finish(run)
    most = int((run.lengths - run.given).max())
    steps = most if config.steps is None else max(1, min(config.steps, most))  # as the config asked, within range
    return GenerationResult(
        tokens, run.orders, run.given, run.lengths, steps, forwards, seconds, None, _compile_seconds(run)
    ), stats


def _progress_bar(total: int, enabled: bool, unit: str = "step"):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="sampling", unit=unit, leave=False)


def memory_per_sample(
    args, config: SampleConfig, given: int, itemsize: int, draft: int | str | None = None, static: bool = False
) -> int:
    """Bytes one more sample of a batch needs while sampling (an estimate from above): its KV cache
    slots (`static`: every position of the model), the logits, noise and probability rows of the
    widest step, and its order and token rows. `given`: the fewest tokens a sample of the batch is given.
    The commands refuse a batch that cannot fit before any work instead of swapping."""
    to_fill = max(1, config.length - given)
    if draft is None:
        steps = to_fill if config.steps is None else config.steps
        rows = -(-to_fill // max(1, min(steps, to_fill)))  # tokens of the widest deterministic step
        rows = to_fill if config.counts == "binomial" else rows
        # logits, scores, and the noise's four buffers (noise.NoiseWorkspace)
        per_row = args.padded_vocab_size * (itemsize + 4 + 4) + args.vocab_size * 8 * 4
        extra = 0
    else:
        rows = 2 * MAX_DRAFT  # verify rows, then the next drafts
        per_row = args.padded_vocab_size * (itemsize + 4) + args.vocab_size * 8 * 2  # float64 probabilities
        extra = MAX_DRAFT * args.vocab_size * 8  # the drafts' proposals
    slots = static_slots(args.max_seq_len) if static else config.length + 1
    cache = 2 * args.n_layers * slots * args.dim * itemsize
    activations = (rows + config.length) * args.dim * (4 + 2 * args.mlp_ratio) * itemsize
    return cache + rows * per_row + extra + activations + 8 * 8 * (config.length + 1)
