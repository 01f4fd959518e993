"""model/gpt2.py: a GPT-2 folder made by transformers maps onto AO-GPT with nothing lost (at the identity
order the model is that GPT-2 reading <|endoftext|> + x), the conditioning starts silent but learns,
and a folder that does not fit is one line naming both values before any weight is read."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from conftest import gpt2_logits, tiny_gpt2

from aogpt_plugin.errors import UserError
from aogpt_plugin.model import AOGPT, FLAVORS
from aogpt_plugin.model.gpt2 import (
    RANDOM_TABLE,
    GPT2Weights,
    check_gpt2_matches,
    from_gpt2,
    gpt2_model_args,
    init_target_table,
    read_gpt2_folder,
)

pytest.importorskip("transformers")


def ao_from_folder(path, conditioning: str = "adaln") -> AOGPT:
    folder = read_gpt2_folder(str(path))
    args = dataclasses.replace(gpt2_model_args(folder), conditioning=conditioning)
    state = from_gpt2(GPT2Weights(folder, args), args, folder.start_token_id)
    if conditioning == "adaln":
        state[RANDOM_TABLE] = init_target_table(args, 0)
    model = AOGPT(args)
    model.load_state_dict(state, strict=True)
    return model.eval()


@pytest.mark.parametrize("weights", ["safetensors", "bin", "legacy-bin"])
@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_at_the_identity_order_the_logits_are_gpt2s_after_endoftext(tmp_path, weights, conditioning):
    gpt2 = tiny_gpt2(tmp_path, weights=weights)
    model = ao_from_folder(tmp_path, conditioning)
    tokens = torch.randint(0, 50256, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(tokens)[..., :50257]
    theirs = gpt2_logits(gpt2, tokens)
    assert theirs.abs().max() > 2, theirs.abs().max()  # logits spread as a trained model's, not all near 0
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert torch.equal(model.tok_embeddings.weight[50257:], torch.zeros(47, 32))  # padded rows: never read


def test_the_conditioning_is_silent_at_the_start_and_learns(tmp_path):
    """The identity adaLN makes every target position give the same logits; gradients reach the adaLN
    weights from the first step and, once those moved, the target table."""
    tiny_gpt2(tmp_path)
    model = ao_from_folder(tmp_path).train()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 50256, (4, 32), generator=g)
    order = torch.stack([torch.randperm(32, generator=g) for _ in range(4)])
    with torch.no_grad():
        before = model(tokens, order)
        model.target_embeddings.weight.normal_(generator=g)  # another table: the same logits
        assert torch.equal(model(tokens, order), before)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        opt.zero_grad()
        logits = model(tokens, order)[..., :50257]
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.gather(1, order).flatten()).backward()
        conditioning = {n: p.grad for n, p in model.named_parameters() if "adaln" in n or n == RANDOM_TABLE}
        assert len(conditioning) == 2 * 2 + 2 + 1
        silent = [n for n, grad in conditioning.items() if grad is None or grad.abs().max() == 0]
        assert silent == ([RANDOM_TABLE] if step == 0 else []), silent  # the table learns once adaLN has moved
        opt.step()


def test_a_sharded_index_and_a_prefixless_file_read_the_same(tmp_path):
    """model.safetensors.index.json shards (as save_pretrained writes large models) and a bin of GPT2Model's
    names give the tensors of the plain file."""
    gpt2 = tiny_gpt2(tmp_path / "one")
    gpt2.save_pretrained(tmp_path / "sharded", max_shard_size="2MB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    tiny_gpt2(tmp_path / "bin", weights="bin")
    folders = [read_gpt2_folder(str(tmp_path / name)) for name in ("one", "sharded", "bin")]
    assert len(folders[1].weight_files) > 1
    args = gpt2_model_args(folders[0])
    reads = [GPT2Weights(f, args) for f in folders]
    assert all(set(r) == set(reads[0]) for r in reads)
    assert all(torch.equal(r[k], reads[0][k]) for r in reads for k in reads[0])


def _write_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"n_layer": 3}, "has layers n_layer=3 but model.flavor='x' has n_layers=2"),
        ({"n_embd": 64}, "has width n_embd=64 but model.flavor='x' has dim=32"),
        ({"n_head": 8}, "has heads n_head=8 but model.flavor='x' has n_heads=4"),
        (
            {"vocab_size": 50000},
            "has vocabulary vocab_size=50000 but model.flavor='x' has vocab_size \\(the tokenizer's\\)=50257",
        ),
        ({"n_positions": 1024}, "has positions n_positions=1024 but model.flavor='x' has max_seq_len \\+ 1 .*=33"),
        ({"n_inner": 64}, "has MLP width n_inner=64 but model.flavor='x' has mlp_ratio x dim=128"),
        ({"layer_norm_epsilon": 1e-6}, "has layer_norm_epsilon=1e-06 but model.flavor='x' has norm_eps=1e-05"),
        ({"activation_function": "relu"}, "has activation_function='relu', a GPT-2 variant aogpt does not map"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True, a GPT-2 variant"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False, a GPT-2 variant"),
    ],
)
def test_a_folder_that_does_not_fit_is_one_line_naming_both_values(tmp_path, changes, message):
    tiny_gpt2(tmp_path)
    args = gpt2_model_args(read_gpt2_folder(str(tmp_path)))
    _write_config(tmp_path, **changes)
    with pytest.raises(UserError, match=message) as e:
        check_gpt2_matches(read_gpt2_folder(str(tmp_path)), args, "model.flavor='x'")
    assert "\n" not in str(e.value)


def test_the_paper_backbone_cannot_hold_a_gpt2(tmp_path):
    tiny_gpt2(tmp_path)
    folder = read_gpt2_folder(str(tmp_path))
    with pytest.raises(
        UserError, match="needs GPT-2's backbone but model.flavor='small' has norm='rmsnorm', qk_norm=True"
    ):
        check_gpt2_matches(folder, FLAVORS["small"], "model.flavor='small'")


def test_folders_that_are_no_gpt2_are_refused_before_any_weight_is_read(tmp_path):
    gpt2 = tiny_gpt2()
    (tmp_path / "config-only").mkdir()
    gpt2.config.save_pretrained(tmp_path / "config-only")
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "file").write_text("x")
    cases = [
        (tmp_path / "nope", "does not exist"),
        (tmp_path / "file", "is a file"),
        (tmp_path / "config-only", "holds no weights; allowed: model.safetensors"),
        (tmp_path / "llama", "holds a model_type='llama' config.json; allowed: 'gpt2'"),
    ]
    for path, message in cases:
        with pytest.raises(UserError, match=message):
            read_gpt2_folder(str(path))


def test_damaged_weights_are_named(tmp_path):
    from safetensors.torch import load_file, save_file

    tiny_gpt2(tmp_path)
    args = gpt2_model_args(read_gpt2_folder(str(tmp_path)))
    state = load_file(tmp_path / "model.safetensors")
    for edit, message in (
        (lambda s: s.pop("transformer.h.1.mlp.c_fc.bias"), "lacks 'transformer.h.1.mlp.c_fc.bias'"),
        (lambda s: s.update({"transformer.h.2.ln_1.weight": torch.ones(32)}), "holds 'transformer.h.2.ln_1.weight'"),
        (
            lambda s: s.update({"transformer.wpe.weight": torch.ones(33, 16)}),
            "tensor 'transformer.wpe.weight' has shape \\[33, 16\\] but its config.json implies \\[33, 32\\]",
        ),
    ):
        damaged = dict(state)
        edit(damaged)
        save_file(damaged, tmp_path / "model.safetensors")
        with pytest.raises(UserError, match=message):
            GPT2Weights(read_gpt2_folder(str(tmp_path)), args)
