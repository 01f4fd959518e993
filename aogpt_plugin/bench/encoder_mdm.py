"""Encoder-only masked diffusion baseline (RADD/MDLM style), for the speed comparison only.

A bidirectional transformer of the same width, depth and heads as AO-GPT (the same blocks, with
no target conditioning), fed tokens or [MASK] plus learned positions, with no time input. Its
standard sampler runs T full-sequence forwards with no cache; each step unmasks the same number
of positions the AO sampler would (same schedule code), at uniformly random positions. Random
weights are fine: it exists to be timed. To keep the comparison conservative, the output head
runs only on the positions being unmasked, not on all n.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..devices import synchronize
from ..model import AOGPTModelArgs
from ..model.model import TransformerBlock
from ..sampler.decode_view import decode_model
from ..sampler.generation import plan_generator
from ..sampler.prompt import generation_orders
from ..sampler.sampling import SamplingParams, noise_workspace, sample_tokens
from ..sampler.schedule import step_counts


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
        self.norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.padded_vocab_size, bias=True)

    def init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, std=0.02, a=-0.06, b=0.06)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.RMSNorm):
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
) -> EncoderResult:
    """The standard MDM sampler: start all-[MASK]; each step is one full forward over all n slots."""
    sampling = (sampling or SamplingParams()).validate()
    device = model.output.weight.device
    model = decode_model(model, linears).model  # the same Linear kernels as the AO sampler (linears.py)
    plan_gen = plan_generator(seed)
    orders = generation_orders(length, batch, None, "random", plan_gen).to(device)
    per_step = step_counts(length, steps, batch, schedule, counts, plan_gen)
    noise = torch.Generator(device=device).manual_seed(seed)
    synchronize(device)
    start_time = time.perf_counter()
    x = torch.full((batch, length + 1), model.mask_id, dtype=torch.long, device=device)  # column n: scratch
    known = torch.zeros(batch, dtype=torch.long)
    workspace = noise_workspace(batch * int(per_step.max()), model.model_args.vocab_size, device)
    forward_passes = 0
    for step in range(steps):
        new = per_step[:, step]
        if int(new.max()) == 0:
            continue
        r = torch.arange(int(new.max()))
        at = orders.gather(1, torch.clamp(known[:, None] + r, max=length - 1).to(device))
        h = model.hidden(x[:, :length])
        h = h.gather(1, at.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        tokens = sample_tokens(model.output(h), model.model_args.vocab_size, sampling, noise, workspace)
        x.scatter_(1, torch.where((r < new[:, None]).to(device), at, length), tokens)
        known += new
        forward_passes += 1
    tokens = x[:, :length].cpu()
    synchronize(device)
    return EncoderResult(tokens, forward_passes, time.perf_counter() - start_time)
