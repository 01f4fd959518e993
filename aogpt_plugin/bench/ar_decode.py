"""Plain autoregressive KV-cache decoding of the AO-GPT backbone: identity order, one token per step.

The gpt-fast decode loop (static cache, one query slot per step, no mask: the only query may see
every cached slot) -- the baseline the AO sampler at T = n is timed against, and the reference
that T = n with a left-to-right order must reproduce.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..devices import synchronize
from ..model import AOGPT
from ..sampler.decoder import CachedDecoder
from ..sampler.sampling import SamplingParams, noise_workspace, sample_tokens


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
    generator: torch.Generator | None = None,
    backend: str = "sdpa",
    linears: str = "auto",
) -> ARResult:
    """x_0 from [None], then x_j from slot j reading x_{j-1}; slot j is conditioned on target j."""
    sampling = (sampling or SamplingParams()).validate()
    vocab = model.model_args.vocab_size
    device = model.tok_embeddings.weight.device
    synchronize(device)
    start_time = time.perf_counter()
    decoder = CachedDecoder(model, batch, slots=length + 1, backend=backend, linears=linears)
    tokens = torch.zeros(batch, length, dtype=torch.long, device=device)
    prev = torch.zeros(batch, 1, dtype=torch.long, device=device)
    workspace = noise_workspace(batch, vocab, device)
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
        prev = sample_tokens(decoder.logits(h, cond), vocab, sampling, generator, workspace)
        tokens[:, j] = prev[:, 0]
    tokens = tokens.cpu()
    synchronize(device)
    return ARResult(tokens, length, time.perf_counter() - start_time)
