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
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..devices import LINEAR_KERNELS, synchronize
from ..errors import UserError
from ..model import AOGPT
from ..orders import READ_ORDERS
from ..seeding import stream_generator
from .decoder import BACKENDS, CachedDecoder
from .prompt import Prompt, generation_orders
from .sampling import SamplingParams, noise_workspace, sample_tokens
from .schedule import COUNTS, SCHEDULES, step_counts


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

    def validate(self, max_positions: int, prompt: Prompt | None = None, vocab_size: int | None = None):
        """Checks every value against the model; raises UserError naming the first bad one."""
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
        ):
            if value not in allowed:
                raise UserError(f"{name}={value!r} is not supported; allowed: {', '.join(allowed)}")
        self.sampling.validate()
        if prompt is not None and vocab_size is not None:
            prompt.validate(self.length, vocab_size)
        to_fill = self.length - len(prompt or ())
        if to_fill < 1:
            raise UserError(f"all {self.length} positions are given; nothing is left to generate")
        if not 1 <= self.steps <= to_fill:
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
    prompt = prompt or Prompt()
    config.validate(args.max_seq_len, prompt, args.vocab_size)
    device = model.tok_embeddings.weight.device
    n, batch, given = config.length, config.num_samples, len(prompt)
    plan_gen = plan_generator(config.seed)
    orders = generation_orders(n, batch, prompt, config.order if order is None else order, plan_gen)
    counts = step_counts(n - given, config.steps, batch, config.schedule, config.counts, plan_gen)
    noise = noise_generator(config.seed, device)

    synchronize(device)
    start_time = time.perf_counter()
    decoder = CachedDecoder(model, batch, slots=n + 1, backend=config.backend, linears=config.linears)
    workspace = noise_workspace(batch * int(counts.max()), args.vocab_size, device)
    scratch = n  # cache slot and token column that padding writes to
    order_dev = orders.to(device)
    in_order = torch.zeros(batch, n + 1, dtype=torch.long, device=device)  # in_order[:, j] = x[sigma(j)]
    if given:
        in_order[:, :given] = torch.tensor(prompt.tokens, device=device)
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

    tokens = torch.zeros(batch, n, dtype=torch.long, device=device).scatter_(1, order_dev, in_order[:, :n])
    tokens = tokens.cpu()
    synchronize(device)
    seconds = time.perf_counter() - start_time
    return GenerationResult(tokens, orders, given, config.steps, forward_passes, seconds, trace)


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


def _progress_bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="sampling", unit="step", leave=False)
