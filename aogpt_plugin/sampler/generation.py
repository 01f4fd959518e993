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

`speculative_generate` (second half of this file) runs the same cached steps as drafts and verifies
them with the same network: the sequential (T = n) distribution, exactly, in fewer forward passes.
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
from .decoder import CachedDecoder
from .graphs import resolve_graphs
from .options import BACKENDS, COUNTS, GRAPHS, LINEAR_KERNELS, SCHEDULES
from .prompt import Prompt, generation_orders
from .sampling import (
    SamplingParams,
    filtered_scores,
    gumbel_argmax,
    noise_workspace,
    sample_tokens,
    step_counts,
)
from .static import StaticDecoder, plan_steps, static_decoder, static_slots


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
    backend: str = "auto"  # auto | sdpa | flex
    linears: str = "auto"  # auto | aten | onednn (linears.py)
    graphs: str = "auto"  # auto | on | off | compile | static (graphs.py): how each step runs

    def validate(
        self,
        max_positions: int,
        prompt: Prompt | None = None,
        vocab_size: int | None = None,
        speculative: bool = False,
    ):
        """Checks every value against the model; raises UserError naming the first bad one.
        `speculative`: the rounds decide the forwards, so `steps` does not apply and is not checked."""
        if self.num_samples < 1:
            raise UserError(f"num_samples={self.num_samples} must be >= 1")
        if not 1 <= self.length <= max_positions:
            raise UserError(f"length={self.length} is outside the model's positions; allowed: 1..{max_positions}")
        for name, value, allowed in (
            ("order", self.order, READ_ORDERS),
            ("schedule", self.schedule, SCHEDULES),
            ("counts", self.counts, COUNTS),
            ("backend", self.backend, BACKENDS),
            ("linears", self.linears, LINEAR_KERNELS),
            ("graphs", self.graphs, GRAPHS),
        ):
            if value not in allowed:
                raise UserError(f"{name}={value!r} is not supported; allowed: {', '.join(allowed)}")
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
    graphs: str  # resolved: off | static | on | compile
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
        if self.graphs != "off":
            self.static = static_decoder(model, self.batch, config.backend, config.linears, self.graphs)
            self.static.start(self.orders, prompt.tokens, plan)
            self.decoder, self.in_order = self.static.decoder, self.static.in_order
            return
        self.decoder = CachedDecoder(
            model, self.batch, slots=self.n + 1, backend=config.backend, linears=config.linears
        )
        self.in_order = torch.zeros(self.batch, self.n + 1, dtype=torch.long, device=self.device)
        if self.given:
            self.in_order[:, : self.given] = torch.tensor(prompt.tokens, device=self.device)

    def forward(self, cache_len, pending, width, rows) -> torch.Tensor:
        """One cached forward of a step whose geometry the host decided (host tensors)."""
        if self.static is not None:
            return self.static.forward_rows(cache_len, pending, width, rows)
        return forward_step(self.decoder, self.in_order, self.order_dev, cache_len, pending, width, rows)


def _start(
    model: AOGPT, config: SampleConfig, prompt: Prompt | None, order: torch.Tensor | None, speculative: bool
) -> tuple[_Run, Prompt]:
    """Checks the config against the model and draws the orders: the set-up both samplers share."""
    args = model.model_args
    prompt = prompt or Prompt()
    config.validate(args.max_seq_len, prompt, args.vocab_size, speculative=speculative)
    device = model.tok_embeddings.weight.device
    n, batch, given = config.length, config.num_samples, len(prompt)
    plan = plan_generator(config.seed)
    orders = generation_orders(n, batch, prompt, config.order if order is None else order, plan)
    graphs = resolve_graphs(config.graphs, device)
    run = _Run(n, batch, given, device, graphs, orders, orders.to(device), plan, noise_generator(config.seed, device))
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
) -> GenerationResult:
    """Sample config.num_samples sequences of config.length tokens.

    `order` (optional): the positions to generate in the order to generate them, (m,) or (B, m);
    it replaces config.order. `record` keeps every step's logits in `result.trace`.
    """
    args = model.model_args
    run, prompt = _start(model, config, prompt, order, speculative=False)
    n, batch, given, device, noise = run.n, run.batch, run.given, run.device, run.noise
    counts = step_counts(n - given, config.steps, batch, config.schedule, config.counts, run.plan)
    if run.graphs != "off":
        return _generate_static(model, config, run, prompt, counts, progress, record)

    run.start(model, config, prompt)
    decoder, in_order, order_dev = run.decoder, run.in_order, run.order_dev
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
        active = new > 0
        width = torch.where(active, pending + new - 1, 0)
        out_len = int(new.max())
        rows = torch.clamp(pending[:, None] - 1 + torch.arange(out_len), max=int(width.max()) - 1)
        logits = forward_step(decoder, in_order, order_dev, cache_len, pending, width, rows)
        tokens = sample_tokens(logits, args.vocab_size, config.sampling, noise, workspace)
        forward_passes += 1

        r = torch.arange(out_len)
        dest = torch.where(r < new[:, None], known[:, None] + r, scratch)
        in_order.scatter_(1, dest.to(device), tokens)
        if record:
            trace.append(StepRecord(known.clone(), new.clone(), logits.float().cpu()))
        cache_len = torch.where(active, known + 1, cache_len)
        known = known + new
        pending = known + 1 - cache_len
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
        logits = state.decode(
            (width, rows, config.sampling), state, state.arange(width), state.arange(rows, "r"), noise, config.sampling
        )
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


def forward_step(decoder, in_order, order_dev, cache_len, pending, width, rows) -> torch.Tensor:
    """One cached forward of every sample's step; logits (B, R, padded vocab) of query rows `rows` (B, R).

    Per sample (host tensors (B,)): cache slots 0..cache_len-1 are encoded; `pending` real slots
    cache_len..L follow (slot j reads the token at order index j - 1 of `in_order`, [None] for j = 0,
    and is conditioned on target sigma(j)), then width - pending duplicates of slot L conditioned on
    sigma(L + 1), sigma(L + 2), ...; a sample with width 0 takes no part (its rows are padding).
    """
    device, scratch = in_order.device, in_order.shape[1] - 1
    q_len = int(width.max())
    q = torch.arange(q_len)
    valid = q < width[:, None]
    slot = cache_len[:, None] + q  # cache slot (= decoder slot) of query q; also its target index
    reads = torch.where(valid, cache_len[:, None] + torch.minimum(q, pending[:, None] - 1), 0)
    active = width > 0
    lockstep = bool(active.all() and (cache_len == cache_len[0]).all() and (width == width[0]).all())
    write = int(cache_len[0]) if lockstep else torch.where(valid, slot, scratch).to(device)
    reads, targets_at = reads.to(device), torch.where(valid, slot, 0).to(device)
    prev = (reads - 1).clamp(min=0)
    h, cond = decoder.embed(
        in_order.gather(1, prev), order_dev.gather(1, prev), reads == 0, order_dev.gather(1, targets_at)
    )
    mask, kv_len = decoder.step_mask(cache_len, pending, width, q_len)
    h = decoder.forward(h, cond, write, mask, kv_len)
    return decoder.logits(h, cond, rows.to(device))


def _progress_bar(total: int, enabled: bool, unit: str = "step"):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="sampling", unit=unit, leave=False)


# ---- speculative sampling ------------------------------------------------------------------
# Any-order speculative sampling: the sequential (T = n) distribution, exactly, in fewer forward passes.
#
# Why it is exact (Any-Subset Speculative Decoding, Guo & Ermon 2025, arXiv 2504.20456): the same
# network gives (a) the parallel conditionals p_j of the next k positions sigma(u..u+k-1) given the u
# known tokens -- one step of the parallel sampler, the last slot and k-1 duplicates -- and (b) the
# sequential conditionals q_j = p(x_sigma(u+j) | known, d_<j) of drafts d_j read as real slots. A draft
# d_j ~ p_j is a proposal for q_j: accept it with probability min(1, q_j(d_j) / p_j(d_j)); at the first
# rejection draw from normalize(max(q_j - p_j, 0)) and stop. That is speculative sampling, so every
# token follows q_j exactly; q_0 = p_0, so d_0 is always accepted. Temperature, top-k and top-p process
# both p and q, so samples follow the processed sequential distribution exactly.
#
# One forward does both jobs. Per sample it reads the drafts in flight as real slots u+1..L (L = u + k)
# -- their outputs are q_1..q_{k-1} -- and slot L plus k'-1 duplicates give the next round's parallel
# drafts (with all drafts accepted as context). If every draft is accepted, those next drafts are
# already right and no separate draft pass is run; after a rejection they are dropped and the next
# forward is a draft pass from the corrected prefix. Accepted slots' K/V are already right in the
# static cache; a rejected slot is overwritten by the next forward. Every forward yields at least one
# token (the exact first draft of the set it makes, or a verified token), and a last forward that
# would verify nothing is skipped, so forward passes never exceed generated tokens.

MAX_DRAFT = 16


def parse_draft(value: str | int) -> int | str:
    """`--speculative K` (K >= 1) or `auto`."""
    if value == "auto":
        return "auto"
    try:
        k = int(value)
    except (TypeError, ValueError):
        raise UserError(
            f"--speculative {value!r} is not allowed; allowed: a draft size 1..{MAX_DRAFT} or auto"
        ) from None
    if not 1 <= k <= MAX_DRAFT:
        raise UserError(f"--speculative {k} is not allowed; allowed: a draft size 1..{MAX_DRAFT} or auto")
    return k


def check_sampling_flags(
    draft: str | int | None,
    steps: int | None = None,
    schedule: str | None = None,
    counts: str | None = None,
    distribution: str = "the T=N distribution",
) -> int | str | None:
    """The one rule of which sampler flags combine (every command calls it; None = a flag not given):
    --speculative samples the sequential distribution in rounds it sizes itself, so the flags that
    spread a parallel run over T steps (--steps, --schedule, --counts) do not apply with it.
    Returns the parsed draft size (None without --speculative)."""
    if draft is None:
        return None
    draft = parse_draft(draft)
    for flag, value in (("--steps", steps), ("--schedule", schedule), ("--counts", counts)):
        if value is not None:
            raise UserError(f"{flag} does not apply with --speculative (it samples {distribution}); drop it")
    return draft


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


@dataclass
class SpeculativeStats:
    """What the rounds did: tokens finalised per forward, and the drafts verified and accepted."""

    tokens_per_forward: list[list[int]] = field(default_factory=list)  # per forward, per sample
    drafts_checked: int = 0  # drafts j >= 1 put to the accept test
    drafts_accepted: int = 0
    draft_sizes: list[int] = field(default_factory=list)  # k of each forward (auto adapts it)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / tested drafts, with one of each assumed up front (so `auto` starts at k = 2)."""
        return (self.drafts_accepted + 1) / (self.drafts_checked + 2)

    def as_dict(self, generated: int, forwards: int) -> dict:
        """`generated`: tokens per sample (the batch shares every forward)."""
        return {
            "tokens_per_forward": round(generated / max(forwards, 1), 4),
            "draft_acceptance_rate": round(self.acceptance_rate, 4),
            "draft_sizes": sorted(set(self.draft_sizes)),
        }


def auto_draft_size(rate: float) -> int:
    """The draft size whose expected accepted run, (1 - r^k) / (1 - r), is worth its rows: about the
    expected run length 1 / (1 - r), capped."""
    return max(2, min(MAX_DRAFT, round(1.0 / max(1.0 - rate, 1e-3))))


@torch.inference_mode()
def speculative_generate(
    model: AOGPT,
    config: SampleConfig,
    draft: int | str = 4,
    prompt: Prompt | None = None,
    order: torch.Tensor | None = None,
    progress: bool = False,
    inspect=None,
) -> tuple[GenerationResult, SpeculativeStats]:
    """Sample config.num_samples sequences of config.length tokens from the sequential distribution.

    config.steps, schedule and counts do not apply (the rounds decide how many tokens each forward
    fixes). `inspect(decoder, known, cache_len, in_order, orders)` is called after every forward
    (tests check the cache there).
    """
    args = model.model_args
    run, prompt = _start(model, config, prompt, order, speculative=True)
    draft = parse_draft(draft)
    n, batch, given, device, noise = run.n, run.batch, run.given, run.device, run.noise
    to_fill = n - given

    run.start(model, config, prompt)
    decoder, in_order, order_dev = run.decoder, run.in_order, run.order_dev  # in_order: known, then drafts
    known = torch.full((batch,), given, dtype=torch.long)
    cache_len = torch.zeros(batch, dtype=torch.long)
    in_flight = torch.zeros(batch, dtype=torch.long)  # drafts at order indices known .. known + in_flight - 1
    draft_probs = torch.zeros(batch, MAX_DRAFT, args.vocab_size, dtype=torch.float64, device=device)  # p_j
    stats, forwards = SpeculativeStats(), 0
    bar = _progress_bar(to_fill * batch, progress, unit="tok")

    while bool((known < n).any()):
        k = draft if isinstance(draft, int) else auto_draft_size(stats.acceptance_rate)
        left = n - known
        # a last forward that would verify nothing (one exact draft left) is skipped: accept it
        done_by_draft = (in_flight == 1) & (left == 1)
        known = known + done_by_draft.long()
        in_flight = torch.where(done_by_draft, 0, in_flight)
        if stats.tokens_per_forward and bool(done_by_draft.any()):  # counted with the forward that drew it
            stats.tokens_per_forward[-1] = [
                t + int(d) for t, d in zip(stats.tokens_per_forward[-1], done_by_draft, strict=True)
            ]
        active = known < n
        if not bool(active.any()):
            break
        last = known + in_flight  # slot L reads the newest known or drafted token and targets sigma(L)
        new = torch.where(active, torch.clamp(n - last, min=0, max=k), 0)  # next drafts: sigma(L) ..
        top = torch.where(new > 0, last, last - 1)  # the last real slot (none targets sigma(n))
        pending = top + 1 - cache_len
        width = torch.where(active, pending + torch.clamp(new - 1, min=0), 0)
        # rows: the verify slots known+1 .. L-1 (q_1 .. q_{k-1}), then slot L and its duplicates (next p)
        verify = torch.clamp(in_flight - 1, min=0)
        rows_len = int((verify + new).max())
        r = torch.arange(rows_len)
        first_verify = known + 1 - cache_len  # query index of slot known + 1
        rows = torch.where(r < verify[:, None], first_verify[:, None] + r, pending[:, None] - 1 + (r - verify[:, None]))
        rows = torch.clamp(torch.where(active[:, None], rows, 0), min=0, max=int(width.max()) - 1)
        logits = run.forward(cache_len, pending, width, rows)
        forwards += 1
        probs = filtered_scores(logits, args.vocab_size, config.sampling).softmax(dim=-1)  # processed, float64

        # ---- verify the drafts in flight (d_0 needs no test: its proposal is its exact conditional)
        produced = torch.where(in_flight > 0, 1, 0)  # d_0
        rejected = torch.zeros(batch, dtype=torch.bool)
        for j in range(1, int(in_flight.max())):
            checking = (in_flight > j) & ~rejected
            if not bool(checking.any()):
                break
            d = in_order.gather(1, torch.clamp(known + j, max=n).unsqueeze(1).to(device))  # draft j, (B, 1)
            q, p = probs[:, j - 1], draft_probs[:, j]  # its sequential conditional and its proposal
            ratio = (q.gather(1, d) / p.gather(1, d).clamp(min=1e-300)).squeeze(1)
            u = torch.rand(batch, dtype=torch.float64, generator=noise, device=device)
            accept = (u < ratio).cpu() & checking
            stats.drafts_checked += int(checking.sum())
            stats.drafts_accepted += int(accept.sum())
            reject = checking & ~accept
            if bool(reject.any()):  # the correction: normalize(max(q - p, 0))
                residual = (q - p).clamp(min=0)
                residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, q)  # q == p exactly: q itself
                fixed = gumbel_argmax(residual.log(), noise)
                slot = torch.where(reject, known + j, n).to(device)  # column n is scratch
                in_order.scatter_(1, slot.unsqueeze(1), fixed.unsqueeze(1))
            produced = produced + (accept | reject).long()
            rejected |= reject

        # ---- new state: accepted drafts (and a correction) are known; next drafts if all were accepted
        all_in = active & ~rejected
        known = known + produced
        cache_len = torch.where(active, torch.where(rejected, known, top + 1), cache_len)
        next_drafts = torch.where(all_in, new, 0)
        if bool((next_drafts > 0).any()):
            width_n = int(next_drafts.max())
            p_next = _take_draft_rows(probs, verify, next_drafts)
            tokens = gumbel_argmax(p_next.log(), noise)  # d'_j ~ p'_j, float64 noise
            cols = known[:, None] + torch.arange(width_n)
            cols = torch.where(torch.arange(width_n) < next_drafts[:, None], cols, n).to(device)
            in_order.scatter_(1, cols, tokens)
            draft_probs[:, :width_n] = p_next
        in_flight = next_drafts
        stats.tokens_per_forward.append(produced.tolist())
        stats.draft_sizes.append(k)
        bar.update(int(produced.sum()))
        if inspect is not None:
            inspect(decoder, known.clone(), cache_len.clone(), in_order, order_dev)
    bar.refresh()  # tqdm draws at most every 0.1 s: show the total before the bar goes
    bar.close()

    tokens, seconds = _finish(run)
    steps = max(1, min(config.steps, to_fill))  # reported as the config asked, within 1..to_fill
    return GenerationResult(tokens, run.orders, given, steps, forwards, seconds), stats


def _take_draft_rows(probs: torch.Tensor, verify: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """(B, max new, V): each sample's rows after its verify rows (slot L and its duplicates)."""
    width = int(new.max())
    idx = torch.clamp(verify[:, None] + torch.arange(width), max=probs.shape[1] - 1).to(probs.device)
    return probs.gather(1, idx.unsqueeze(-1).expand(-1, -1, probs.shape[-1]))
