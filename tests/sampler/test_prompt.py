"""Prompts and infilling: given tokens stay, every other position is generated."""

from __future__ import annotations

import pytest
import torch

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler import Prompt, PromptBuilder, SampleConfig, generate, parse_infill


def test_parse_infill_spans_text_and_tokens():
    encode = lambda text: [len(w) for w in text.split()]  # a stand-in tokenizer
    spec = '{"spans": [{"start": 10, "tokens": [7, 8]}, {"start": 0, "text": "ab c"}, {"start": 30, "text": "xyz"}]}'
    prompt = parse_infill(spec, encode).build()
    assert prompt.positions == (0, 1, 10, 11, 30)
    assert prompt.tokens == (2, 1, 7, 8, 3)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("{not json", "not valid JSON"),
        ('{"spans": [{"start": 0, "tokens": [1, 2]}, {"start": 1, "tokens": [3]}]}', "given twice"),
        ('{"spans": [{"start": -1, "tokens": [1]}]}', "negative"),
        ('{"spans": [{"start": 0}]}', "exactly one of"),
        ('{"spans": [{"start": 0, "tokens": []}]}', "empty"),
        ('{"spans": [{"start": "0", "tokens": [1]}]}', "integer 'start'"),
        ('{"span": []}', "JSON object"),
        ("@/nonexistent/infill.json", "cannot be read"),
    ],
)
def test_bad_infill_rejected(spec, match):
    with pytest.raises(UserError, match=match):
        parse_infill(spec)


@pytest.mark.parametrize(
    "prompt,match",
    [
        (Prompt((0, 24), (1, 2)), "outside the sampled length"),
        (Prompt((3, 3), (1, 2)), "given twice"),
        (Prompt((0,), (61,)), "outside the vocabulary"),
    ],
)
def test_bad_prompt_rejected(ao_model, prompt, match):
    with pytest.raises(UserError, match=match):
        generate(ao_model, SampleConfig(length=24, steps=4), prompt)


def test_all_positions_given_rejected(ao_model):
    with pytest.raises(UserError, match="nothing is left"):
        generate(ao_model, SampleConfig(length=3, steps=1), Prompt((0, 1, 2), (1, 2, 3)))


@pytest.mark.parametrize("order", ["random", "l2r"])
@pytest.mark.parametrize(
    "spans",
    [
        [(0, [5, 6, 7])],  # prefix
        [(20, [8, 9, 10, 11])],  # suffix
        [(0, [1]), (7, [2, 3]), (15, [4]), (23, [60])],  # scattered
    ],
)
def test_infilling_keeps_given_tokens_and_fills_the_rest(ao_model, order, spans):
    builder = PromptBuilder()
    for start, toks in spans:
        builder.add(start, toks)
    prompt = builder.build()
    config = SampleConfig(length=24, steps=5, num_samples=3, order=order, counts="binomial", seed=7)
    result = generate(ao_model, config, prompt)
    given = torch.tensor(prompt.positions)
    assert (result.tokens[:, given] == torch.tensor(prompt.tokens)).all()
    free = prompt.free_positions(24)
    assert torch.equal(result.orders[:, len(prompt) :].sort(dim=1).values, free.expand(3, -1))
    assert (result.tokens >= 0).all() and (result.tokens < 61).all()
    if order == "l2r":
        assert torch.equal(result.orders[:, len(prompt) :], free.expand(3, -1))
    assert result.generated_tokens == 3 * (24 - len(prompt))


def test_prompt_changes_the_samples(ao_model):
    config = SampleConfig(length=16, steps=4, num_samples=2, seed=3)
    free = generate(ao_model, config).tokens
    prompted = generate(ao_model, config, Prompt((0, 1, 2), (50, 51, 52))).tokens
    assert not torch.equal(free[:, 3:], prompted[:, 3:])
