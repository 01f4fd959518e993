"""Plain AR KV-cache decoding against the uncached causal forward."""

from __future__ import annotations

import pytest
import torch

from aogpt_plugin.bench.ar_decode import ar_generate
from aogpt_plugin.sampler import SamplingParams


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_greedy_ar_decode_equals_uncached_greedy(gpt_model, backend):
    n = 14
    result = ar_generate(gpt_model, n, batch=2, sampling=SamplingParams(top_k=1), backend=backend)
    tokens = torch.zeros(2, n, dtype=torch.long)
    for j in range(n):
        tokens[:, j] = gpt_model(tokens)[:, j, :61].argmax(-1)
    assert torch.equal(result.tokens, tokens)
    assert result.forward_passes == n


def test_ar_decode_is_seeded(gpt_model):
    def run(seed):
        return ar_generate(gpt_model, 10, batch=2, generator=torch.Generator().manual_seed(seed)).tokens

    assert torch.equal(run(0), run(0)) and not torch.equal(run(0), run(1))
