"""The models the sampler benchmarks time (`build_decoder`: AO-GPT or its plain AR backbone with random weights)
and the baselines they time the AO-GPT sampler against (they exist to be timed, and to be checked for
exactness against uncached forwards):

  - the encoder-only masked-diffusion model (RADD/MDLM style): bidirectional, no cache, T
    full-sequence forwards;
  - plain autoregressive KV-cache decoding of the AO-GPT backbone (identity order, one token a step).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..devices import synchronize
from ..model import AOGPT, FLAVORS, AOGPTModelArgs
from ..model.model import TransformerBlock, make_norm
from ..sampler.choices import SamplerChoices, resolve_choices
from ..sampler.decoder import CachedDecoder, decode_model
from ..sampler.generation import noise_seed, plan_generator
from ..sampler.graphs import StepRunner, uses_inductor
from ..sampler.noise import NoiseWorkspace, keys_at, parallel_draw_keys
from ..sampler.prompt import Prompt, sample_orders
from ..sampler.sampling import SamplingParams, sample_tokens, step_counts
from ..seeding import sample_seed


def build_decoder(flavor: str, conditioning: str, device, dtype) -> AOGPT:
    """A decoder of `flavor` with seeded random weights and the given conditioning (adaln: AO-GPT; none: the
    plain AR GPT of the same backbone): what the sampler benchmarks time (timings do not depend on weights)."""
    args = dataclasses.replace(FLAVORS[flavor], conditioning=conditioning)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = AOGPT(args)
    model.to_empty(device=device)
    model.init_weights()
    return model.to(dtype).eval().requires_grad_(False)


# ---- encoder-only masked diffusion ------------------------------------------------------------
# Encoder-only masked diffusion baseline (RADD/MDLM style), for the speed comparison only.
#
# A bidirectional transformer of the same width, depth and heads as AO-GPT (the same blocks, with
# no target conditioning), fed tokens or [MASK] plus learned positions, with no time input. Its
# standard sampler runs T full-sequence forwards with no cache; each step unmasks the same number
# of positions the AO sampler would (same schedule code), at uniformly random positions. Random
# weights are fine: it exists to be timed. To keep the comparison conservative, the output head
# runs only on the positions being unmasked, not on all n.


def bidirectional_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class EncoderMDM(nn.Module):
    def __init__(self, model_args: AOGPTModelArgs):
        super().__init__()
        args = self.model_args = dataclasses.replace(model_args, conditioning="none")
        self.mask_id = args.vocab_size
        self.tok_embeddings = nn.Embedding(args.vocab_size + 1, args.dim)  # + [MASK]
        self.pos_embeddings = nn.Embedding(args.max_seq_len, args.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = make_norm(args, args.dim)
        self.output = nn.Linear(args.dim, args.padded_vocab_size, bias=True)

    def init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, std=0.02, a=-0.06, b=0.06)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.RMSNorm | nn.LayerNorm):
                module.reset_parameters()

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, n) tokens or mask_id -> final hidden states (B, n, dim), every position seeing all."""
        h = self.tok_embeddings(tokens) + self.pos_embeddings.weight[: tokens.shape[1]]
        for layer in self.layers.values():
            h = layer(h, attend=bidirectional_attend)
        return self.norm(h)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.output(self.hidden(tokens))


def build_encoder_mdm(model_args: AOGPTModelArgs, device, dtype=torch.float32) -> EncoderMDM:
    with torch.device("meta"):
        model = EncoderMDM(model_args)
    model.to_empty(device=device)
    model.init_weights()
    return model.to(dtype).eval().requires_grad_(False)


@dataclass
class EncoderResult:
    tokens: torch.Tensor  # (B, n) on CPU
    forward_passes: int
    seconds: float


class StaticEncoder:
    """The encoder sampler's state at fixed addresses, so its steps are captured like the AO sampler's
    (static.py): the token table (column n is scratch), the order, tokens known, the plan of counts,
    every position's noise key, the step index and the noise buffers. Kept on the model's view across runs
    (`step_buffers`), as the AO sampler's."""

    def __init__(self, model: EncoderMDM, batch: int, length: int, mode: str):
        device = model.tok_embeddings.weight.device
        self.model, self.length, self.vocab_size = model, length, model.model_args.vocab_size
        self.x = torch.empty(batch, length + 1, dtype=torch.long, device=device)
        self.orders = torch.zeros(batch, length, dtype=torch.long, device=device)
        self.known = torch.zeros(batch, dtype=torch.long, device=device)
        self.plan = torch.zeros(batch, length, dtype=torch.long, device=device)
        self.draw_keys = torch.zeros(batch, length, 2, dtype=torch.long, device=device)
        self.step_index = torch.zeros(1, dtype=torch.long, device=device)
        self.noise = None if uses_inductor(mode, device) else NoiseWorkspace()
        self.aranges = {}
        self.step = StepRunner(encoder_step, mode, device, "encoder step")

    def start(self, orders: torch.Tensor, counts: torch.Tensor, noise_keys: torch.Tensor) -> None:
        self.x.fill_(self.model.mask_id)
        self.orders.copy_(orders)
        self.known.zero_()
        self.plan.zero_()
        self.plan[:, : counts.shape[1]] = counts
        self.draw_keys.copy_(parallel_draw_keys(noise_keys, self.length))
        self.step_index.zero_()
        if self.noise is not None:
            grown = self.noise.grown
            self.noise.reserve(self.x.shape[0] * int(counts.max()) * self.vocab_size, self.x.device)
            if self.noise.grown != grown:  # graphs read the old buffers
                self.step.reset()

    def run_step(self, rows: int, sampling: SamplingParams) -> None:
        if rows not in self.aranges:
            self.aranges[rows] = torch.arange(rows, device=self.x.device)
        self.step((rows, sampling), self, self.aranges[rows], sampling)


def encoder_step(state: StaticEncoder, r: torch.Tensor, sampling: SamplingParams) -> None:
    """encoder_generate's step on device tensors: a full forward, the heads of the R positions drawn, each
    with its sample's counter noise (the AO sampler's draw)."""
    n = state.length
    new = state.plan.index_select(1, state.step_index).squeeze(1)
    at = state.orders.gather(1, torch.clamp(state.known[:, None] + r, max=n - 1))
    h = state.model.hidden(state.x[:, :n])
    h = h.gather(1, at.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
    tokens = sample_tokens(state.model.output(h), state.vocab_size, sampling, keys_at(state.draw_keys, at), state.noise)
    state.x.scatter_(1, torch.where(r < new[:, None], at, n), tokens)
    state.known.add_(new)
    state.step_index.add_(1)


def encoder_plan(
    length: int, steps: int, batch: int, schedule: str = "linear", counts: str = "deterministic", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The encoder sampler's run, drawn on the host as the AO sampler draws its own: each sample's order
    (B, n) and tokens per step (B, T), and the seeds (sample i: sample_seed(seed, i))."""
    seeds = [sample_seed(seed, i) for i in range(batch)]
    generators = [plan_generator(s) for s in seeds]
    orders = sample_orders(length, (length,) * batch, (Prompt(),) * batch, ("random",) * batch, generators)
    return orders, step_counts([length] * batch, steps, schedule, counts, generators), seeds


def encoder_forwards(
    length: int, steps: int, batch: int, schedule: str = "linear", counts: str = "deterministic", seed: int = 0
) -> int:
    """The forwards `encoder_generate` runs with these arguments: one per step that unmasks a token. Each is
    the same full forward whatever T (only its head's rows follow the step's count), so the bench times a
    few and multiplies (bench/sampler_speed.py)."""
    per_step = encoder_plan(length, steps, batch, schedule, counts, seed)[1]
    return int((per_step.max(dim=0).values > 0).sum())


@torch.inference_mode()
def encoder_generate(
    model: EncoderMDM,
    length: int,
    steps: int,
    batch: int = 1,
    schedule: str = "linear",
    counts: str = "deterministic",
    sampling: SamplingParams | None = None,
    seed: int = 0,
    linears: str = "auto",
    graphs: str = "off",
    choices: SamplerChoices | None = None,
    forwards: int | None = None,
) -> EncoderResult:
    """The standard MDM sampler: start all-[MASK]; each step is one full forward over all n slots.
    Sample i is seeded sample_seed(seed, i), as the AO sampler's (its order, counts and noise).
    `graphs` (graphs.py): off runs the loop below; the other modes run the same step at fixed shapes.
    `choices`: the AO sampler's, resolved (the benchmark's); else resolved here from `linears` and `graphs`.
    `forwards`: stop after that many (a run cut short, to time a forward; the tokens are then partly masked)."""
    sampling = (sampling or SamplingParams()).validate()
    weight = model.output.weight
    device = weight.device
    if choices is None:
        choices = resolve_choices(graphs, "auto", linears, device, weight.dtype)
    mode = choices.graphs
    view = decode_model(model, choices.linears)  # the same Linear kernels as the AO sampler (decoder.py)
    model = view.model
    orders, per_step, seeds = encoder_plan(length, steps, batch, schedule, counts, seed)
    orders = orders.to(device)
    noise_keys = torch.tensor([noise_seed(s) for s in seeds], dtype=torch.long, device=device)
    limit = per_step.shape[1] if forwards is None else forwards
    synchronize(device)
    start_time = time.perf_counter()
    if mode != "off":
        per_step = per_step[:, per_step.max(dim=0).values > 0]
        key = ("encoder", batch, length, mode)
        state = view.step_buffers.get(key)
        if state is None:
            view.step_buffers.clear()
            state = view.step_buffers[key] = StaticEncoder(model, batch, length, mode)
        state.start(orders, per_step.to(device), noise_keys)
        rows_of_steps = per_step.max(dim=0).values.tolist()[:limit]
        for rows in rows_of_steps:
            state.run_step(rows, sampling)
        tokens = state.x[:, :length].cpu()
        synchronize(device)
        return EncoderResult(tokens, len(rows_of_steps), time.perf_counter() - start_time)
    x = torch.full((batch, length + 1), model.mask_id, dtype=torch.long, device=device)  # column n: scratch
    known = torch.zeros(batch, dtype=torch.long)
    workspace = NoiseWorkspace()
    draw_keys = parallel_draw_keys(noise_keys, length)
    forward_passes = 0
    for step in range(steps):
        new = per_step[:, step]
        if int(new.max()) == 0:
            continue
        if forward_passes == limit:
            break
        r = torch.arange(int(new.max()))
        at = orders.gather(1, torch.clamp(known[:, None] + r, max=length - 1).to(device))
        h = model.hidden(x[:, :length])
        h = h.gather(1, at.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        drawn = (r < new[:, None]).to(device)
        keys = keys_at(draw_keys, at)
        tokens = sample_tokens(model.output(h), model.model_args.vocab_size, sampling, keys, workspace, drawn)
        x.scatter_(1, torch.where(drawn, at, length), tokens)
        known += new
        forward_passes += 1
    tokens = x[:, :length].cpu()
    synchronize(device)
    return EncoderResult(tokens, forward_passes, time.perf_counter() - start_time)


# ---- autoregressive decoding ----------------------------------------------------------------
# Plain autoregressive KV-cache decoding of the AO-GPT backbone: identity order, one token per step.
#
# The gpt-fast decode loop (preallocated cache, one query slot per step, no mask: the only query may see
# every cached slot) -- the baseline the AO sampler at T = n is timed against, and the reference
# that T = n with a left-to-right order must reproduce.


@dataclass
class ARResult:
    tokens: torch.Tensor  # (B, n) on CPU
    forward_passes: int
    seconds: float


@torch.inference_mode()
def ar_generate(
    model: AOGPT,
    length: int,
    batch: int = 1,
    sampling: SamplingParams | None = None,
    seed: int = 0,
    backend: str = "sdpa",
    linears: str = "auto",
) -> ARResult:
    """x_0 from [None], then x_j from slot j reading x_{j-1}; slot j is conditioned on target j. Sample i
    draws position j with the AO sampler's noise of seed sample_seed(seed, i): its tokens are those of the AO sampler
    at T = n in left-to-right order, given the same logits."""
    sampling = (sampling or SamplingParams()).validate()
    vocab = model.model_args.vocab_size
    weight = model.tok_embeddings.weight
    device = weight.device
    choices = resolve_choices("off", backend, linears, device, weight.dtype, model.model_args.head_dim)
    noise_keys = torch.tensor([noise_seed(sample_seed(seed, i)) for i in range(batch)], dtype=torch.long, device=device)
    synchronize(device)
    start_time = time.perf_counter()
    decoder = CachedDecoder(model, batch, length + 1, choices.backend, choices.linears)
    tokens = torch.zeros(batch, length, dtype=torch.long, device=device)
    prev = torch.zeros(batch, 1, dtype=torch.long, device=device)
    workspace = NoiseWorkspace()
    draw_keys = parallel_draw_keys(noise_keys, length)
    one = torch.ones(batch, dtype=torch.long)
    for j in range(length):
        position = torch.full((batch, 1), j - 1, dtype=torch.long, device=device)
        target = position + 1
        h, cond = decoder.embed(prev, position, position < 0, target)
        if decoder.backend == "flex":
            mask, kv_len = decoder.step_mask(one * j, one, one, 1)
        else:
            mask, kv_len = None, j + 1
        h = decoder.forward(h, cond, j, mask, kv_len)
        prev = sample_tokens(decoder.logits(h, cond), vocab, sampling, keys_at(draw_keys, target), workspace)
        tokens[:, j] = prev[:, 0]
    tokens = tokens.cpu()
    synchronize(device)
    return ARResult(tokens, length, time.perf_counter() - start_time)
