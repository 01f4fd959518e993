"""api.py: `aogpt_plugin.load` on the three folder kinds, and the model it returns against the commands
(`aogpt sample --json`, `aogpt eval ppl --json`) and against independent computations of log p(x | sigma)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, tiny_model

import aogpt_plugin
from aogpt_plugin import cli
from aogpt_plugin.api import LoadedModel
from aogpt_plugin.errors import InputError
from aogpt_plugin.eval.perplexity import base_order, score_chunks
from aogpt_plugin.model_dir import save_model
from aogpt_plugin.seeding import sample_seed

VOCAB = 61  # the sampler preset's; its folders use the symbols:61 tokenizer (text is integers)


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    """Tiny models: one intra-op thread (tests/conftest.py)."""


@pytest.fixture(scope="module")
def module():
    return tiny_model("adaln", preset="sampler")  # 40 positions, sharp conditionals


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, module):
    path = tmp_path_factory.mktemp("api") / "model"
    save_model(module, str(path), tokenizer=f"symbols:{VOCAB}", step=3, weights="ema")
    return str(path)


@pytest.fixture(scope="module")
def lm(model_dir) -> LoadedModel:
    return aogpt_plugin.load(model_dir, device="cpu")


def run_cli(capsys, argv: list[str]) -> dict:
    assert cli.main([*argv, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    return json.loads(out[0])


def tokens_of(lm: LoadedModel, batch: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, lm.model_args.vocab_size, (batch, n), generator=torch.Generator().manual_seed(seed))


def test_import_stays_light_and_load_is_lazy(model_dir):
    script = (
        "import sys, aogpt_plugin\n"
        "assert 'torch' not in sys.modules, 'import aogpt_plugin loaded torch'\n"
        f"lm = aogpt_plugin.load({model_dir!r}, device='cpu')\n"
        "assert 'torchtitan' not in sys.modules, 'load imported torchtitan'\n"
        "print(type(lm).__name__)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "LoadedModel", proc.stderr[-2000:]


# ---- generate: the options and tokens of `aogpt sample` ----------------------------------------
SAMPLE_CASES = [
    ["--num-samples", "3", "--length", "20", "--steps", "5", "--counts", "binomial", "--top-k", "7", "--seed", "3"],
    ["--num-samples", "2", "--length", "24", "--steps", "6", "--schedule", "cosine", "--temperature", "0.7"]
    + ["--top-p", "0.9", "--order", "l2r", "--prompt", "5 6 7", "--seed", "11"],
    ["--num-samples", "2", "--length", "16", "--speculative", "auto", "--seed", "4"]
    + ["--infill", '{"spans": [{"start": 2, "tokens": [9, 10]}, {"start": 12, "text": "1 2"}]}'],
    ["--num-samples", "3", "--length", "20", "--steps", "7", "--counts", "binomial", "--graphs", "static"],
]


def _keywords(argv: list[str]) -> dict:
    """`aogpt sample` flags -> generate keywords, typed as argparse types them."""
    types = {"num_samples": int, "length": int, "steps": int, "top_k": int, "seed": int}
    types |= {"temperature": float, "top_p": float}
    out = {}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        key = flag.removeprefix("--").replace("-", "_")
        out[key] = types.get(key, str)(value)
    return out


@pytest.mark.parametrize(
    "argv", SAMPLE_CASES, ids=["binomial-top-k", "l2r-prompt-cosine", "speculative-infill", "static-step"]
)
def test_generate_gives_the_tokens_of_aogpt_sample(capsys, model_dir, lm, argv):
    record = run_cli(capsys, ["sample", "--model", model_dir, "--device", "cpu", "--no-progress", *argv])
    out = lm.generate(**_keywords(argv))
    assert out.tokens.tolist() == record["tokens"]
    assert out.texts == record["text"]
    assert out.result.forward_passes == record["forward_passes"]
    if "--speculative" in argv:
        assert out.speculative["draft_acceptance_rate"] == record["draft_acceptance_rate"]
    other = lm.generate(**{**_keywords(argv), "seed": 99})
    assert other.tokens.tolist() != record["tokens"]  # the seed decides the draw


def test_generate_takes_every_sampler_option_the_command_has():
    """A sampler option is a SampleRequest field, a flag of `aogpt sample` and a keyword of generate:
    adding one (say the graphs switch) without passing it through fails here."""
    from aogpt_plugin.sampler.request import SampleRequest

    fields = {f.name for f in dataclasses.fields(SampleRequest)}
    keywords = set(inspect.signature(LoadedModel.generate).parameters) - {"self", "progress", "requests"}
    assert keywords == fields
    flags = vars(cli.build_parser("sample").parse_args(["sample", "--model", "M"]))
    assert fields <= set(flags)


# ---- logprob: exact log p(x | sigma), checked independently -------------------------------------
def _conditionals_by_masking(module, tokens: torch.Tensor, sigma: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """(B, n) log p(x[sigma_j] | x[sigma_<j]) in position order, one forward per j in which every token
    outside sigma_<j is replaced by a random one: the conditional cannot have read them."""
    batch, n = tokens.shape
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(batch, n)
    rows = torch.arange(batch)
    for j in range(n):
        noise = torch.randint(0, module.model_args.vocab_size, tokens.shape, generator=g)
        keep = torch.zeros_like(tokens, dtype=torch.bool)
        keep[rows[:, None], sigma[:, :j]] = True
        logits = module(torch.where(keep, tokens, noise), order=sigma)[:, j, : module.model_args.vocab_size]
        target = sigma[:, j]
        out[rows, target] = torch.log_softmax(logits.float(), -1)[rows, tokens[rows, target]]
    return out


def test_logprob_is_the_sum_of_the_exact_conditionals(lm, module):
    tokens = tokens_of(lm, 3, 12)
    sigma = torch.stack([torch.randperm(12, generator=torch.Generator().manual_seed(b)) for b in range(3)])
    with torch.no_grad():
        expected = _conditionals_by_masking(module, tokens, sigma)
        per_token = lm.logprob(tokens, order=sigma, per_token=True)
        total = lm.logprob(tokens, order=sigma)
        torch.testing.assert_close(per_token, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(total, expected.sum(-1), rtol=1e-5, atol=1e-4)
        assert total.shape == (3,)
        # the masking is a real test: the same conditionals in another order are other numbers
        other = _conditionals_by_masking(module, tokens, sigma.flip(1))
        assert (other.sum(-1) - total).abs().min() > 1e-2
        assert lm.logprob(tokens[0], order=sigma[0]).shape == ()  # one sequence, one number
        torch.testing.assert_close(lm.logprob(tokens[0], order=sigma[0]), total[0])


def test_logprob_of_samples_equals_the_cached_samplers_conditionals(lm, module):
    """T = n steps draw one token per cached forward; the log-probabilities of the drawn tokens under
    those forwards' logits sum to logprob of the sample under its generation order."""
    from aogpt_plugin.sampler import SampleConfig, generate

    result = generate(module, SampleConfig(length=16, steps=16, num_samples=3, seed=5), record=True)
    rows = torch.arange(3)
    in_order = result.tokens.gather(1, result.orders)
    cached = torch.zeros(3)
    for step, record in enumerate(result.trace):
        assert record.counts.tolist() == [1, 1, 1]
        logp = torch.log_softmax(record.logits[:, 0, :VOCAB].float(), -1)
        cached += logp[rows, in_order[:, step]]
    with torch.no_grad():
        torch.testing.assert_close(lm.logprob(result.tokens, order=result.orders), cached, rtol=1e-5, atol=1e-4)


def test_identity_order_is_the_causal_lm_reading(lm, tmp_path):
    """Left to right (None, "l2r", or the identity) is log p(x) read as a causal LM: token j scored
    from a forward over x[:j] alone; for a model without target conditioning that is a plain GPT."""
    tokens = tokens_of(lm, 2, 10, seed=1)
    with torch.no_grad():
        left = lm.logprob(tokens)
        assert torch.equal(left, lm.logprob(tokens, order="l2r"))
        torch.testing.assert_close(left, lm.logprob(tokens, order=torch.arange(10)))
        save_model(tiny_model("none", preset="sampler"), str(tmp_path / "gpt"), tokenizer=f"symbols:{VOCAB}")
        gpt = aogpt_plugin.load(tmp_path / "gpt", device="cpu")
        causal = torch.zeros(2)
        for j in range(10):
            logits = gpt.module(tokens[:, : j + 1])[:, j, :VOCAB]  # slot j has read x_0 .. x_{j-1}
            causal += torch.log_softmax(logits, -1)[torch.arange(2), tokens[:, j]]
        torch.testing.assert_close(gpt.logprob(tokens), causal, rtol=1e-5, atol=1e-4)


@pytest.mark.filterwarnings("ignore:.*inference_mode")
def test_logprob_equals_the_nll_aogpt_eval_ppl_computes(lm):
    """Per (chunk, order) the mean NLL `aogpt eval ppl` scores (score_chunks) is -logprob / n, left to
    right and under its random orders; order="random" with a seed is its first order per chunk."""
    chunks = tokens_of(lm, 4, 16, seed=2)
    scored = score_chunks(lm.module, chunks, "random", draws=2, seed=7)
    with torch.no_grad():
        for k in range(2):
            sigma = torch.stack([base_order("random", 16, 7, c, k) for c in range(4)])
            torch.testing.assert_close(
                -lm.logprob(chunks, order=sigma).double() / 16, scored.per_draw_nll[:, k, 0], rtol=1e-5, atol=1e-6
            )
        first = torch.stack([base_order("random", 16, 7, c, 0) for c in range(4)])
        assert torch.equal(lm.logprob(chunks, order="random", seed=7), lm.logprob(chunks, order=first))
        left = score_chunks(lm.module, chunks, "l2r")
        torch.testing.assert_close(-lm.logprob(chunks).double() / 16, left.per_draw_nll[:, 0, 0], rtol=1e-5, atol=1e-6)


def test_logprob_gradients_reach_the_weights_and_match_finite_differences(model_dir):
    lm = aogpt_plugin.load(model_dir, device="cpu")  # its own copy: the weights are moved here
    module = lm.module
    tokens = tokens_of(lm, 2, 8, seed=3)
    sigma = torch.stack([base_order("random", 8, 0, c, 0) for c in range(2)])
    module.zero_grad(set_to_none=True)
    lm.logprob(tokens, order=sigma).sum().backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    for name in ("tok_embeddings.weight", "layers.0.attention.wqkv.weight", "layers.1.adaln.weight", "output.weight"):
        assert grads[name].abs().sum() > 0, name

    # central differences along one direction through every weight: half the gradient's, half a random
    # one (a random direction alone has a derivative too small to tell from float32 rounding)
    g = torch.Generator().manual_seed(0)
    noise = {n: torch.randn(p.shape, generator=g) for n, p in module.named_parameters()}
    grad_norm = math.sqrt(sum(float(v.pow(2).sum()) for v in grads.values()))
    noise_norm = math.sqrt(sum(float(v.pow(2).sum()) for v in noise.values()))
    direction = {n: grads[n] / grad_norm + noise[n] / noise_norm for n in grads}
    norm = math.sqrt(sum(float(d.pow(2).sum()) for d in direction.values()))
    analytic = sum(float((grads[n] * d).sum()) for n, d in direction.items()) / norm

    def shifted(eps: float) -> float:
        with torch.no_grad():
            for n, p in module.named_parameters():
                p.add_(direction[n], alpha=eps / norm)
            value = float(lm.logprob(tokens, order=sigma).double().sum())
            for n, p in module.named_parameters():
                p.sub_(direction[n], alpha=eps / norm)
        return value

    eps = 1e-2
    numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
    assert numeric == pytest.approx(analytic, rel=1e-3)
    # and the check can fail: the gradient of another order's log-likelihood is another number
    module.zero_grad(set_to_none=True)
    lm.logprob(tokens, order=sigma.flip(1)).sum().backward()
    wrong = sum(float((p.grad * direction[n]).sum()) for n, p in module.named_parameters()) / norm
    module.zero_grad(set_to_none=True)
    assert wrong != pytest.approx(numeric, rel=5e-2)


# ---- score: `aogpt eval ppl` -------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "gpt2-model"
    save_model(tiny_model(vocab_size=50257, max_seq_len=24, dim=32, scale=5.0, preset="eval"), str(path))
    return str(path)


DOCUMENTS = [f"Document {i}: the quick brown fox number {i * 7} jumps over {i} lazy dogs." for i in range(12)]


@pytest.mark.parametrize(
    "flags,keywords",
    [
        (["--order", "l2r"], {"order": "l2r"}),
        (
            ["--order", "random", "--orders", "3", "--ensemble", "2", "--seq-len", "12", "--max-chunks", "3"]
            + ["--seed", "5", "--batch-size", "4"],
            {"order": "random", "orders": 3, "ensemble": 2, "seq_len": 12, "max_chunks": 3, "seed": 5, "batch_size": 4},
        ),
    ],
    ids=["l2r", "random-ensemble"],
)
def test_score_reports_what_aogpt_eval_ppl_reports(capsys, tmp_path, gpt2_dir, flags, keywords):
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCUMENTS))
    record = run_cli(capsys, ["eval", "ppl", "--model", gpt2_dir, "--dataset", str(data), "--device", "cpu", *flags])
    lm = aogpt_plugin.load(gpt2_dir, device="cpu")
    report = lm.score(DOCUMENTS, **keywords)
    assert report.per_chunk_nll.shape == (record["chunks"], record["orders"])
    assert (report.nll, report.ppl, report.bits_per_byte[record["M"]]) == (
        record["nll"],
        record["ppl"],
        record["bits_per_byte"],
    )
    assert report.final.as_dict() == {k: record[k] for k in ("nll", "ppl", "nll_se_orders", "nll_se_chunks")}
    # the same chunks given as tokens score the same
    from aogpt_plugin.eval.benchmarks import pack_documents

    chunks = pack_documents(DOCUMENTS, lm.tokenizer, record["seq_len"]).chunks[: record["chunks"]]
    as_tokens = lm.score(chunks, **{k: v for k, v in keywords.items() if k not in ("seq_len", "max_chunks")})
    assert as_tokens.nll == record["nll"]


# ---- the three folder kinds ---------------------------------------------------------------------
def _checkpoint(step_dir, raw, ema, tokenizer: str):
    """A DCP step folder as training writes one: raw weights, EMA shadows, and its aogpt.json record."""
    import torch.distributed.checkpoint as dcp

    from aogpt_plugin.checkpoints import write_record

    state = {k: v.clone() for k, v in raw.state_dict().items()}
    state.update({f"ema.{k}": v.clone() for k, v in ema.named_parameters()})
    dcp.save(state, checkpoint_id=str(step_dir), no_dist=True)
    write_record(str(step_dir), {"model_args": raw.model_args.to_dict(), "tokenizer": tokenizer})


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_model_folder_an_export_and_a_checkpoint_give_equal_logits(tmp_path, model_dir, module):
    from aogpt_plugin.hf_export import export

    export(model_dir, str(tmp_path / "hf"))
    other = tiny_model("adaln", seed=1, preset="sampler")
    _checkpoint(tmp_path / "run" / "checkpoint" / "step-4", module, other, f"symbols:{VOCAB}")
    _checkpoint(tmp_path / "run" / "checkpoint" / "step-2", other, module, f"symbols:{VOCAB}")
    (tmp_path / "run" / "checkpoint" / "step-6").mkdir()  # a save that never finished: no .metadata
    tokens = tokens_of(aogpt_plugin.load(model_dir), 2, 16)
    sigma = torch.stack([torch.randperm(16, generator=torch.Generator().manual_seed(b)) for b in range(2)])

    def logits(path, **kw):
        lm = aogpt_plugin.load(path, device="cpu", **kw)
        with torch.no_grad():
            return lm.module(tokens, order=sigma), lm

    reference, _ = logits(model_dir)
    exported, hf = logits(tmp_path / "hf")
    assert torch.equal(exported, reference) and hf.kind == "model folder"
    newest, lm = logits(tmp_path / "run" / "checkpoint", weights="raw")  # step-4, the newest complete
    assert torch.equal(newest, reference) and (lm.kind, lm.config.step) == ("checkpoint", 4)
    assert lm.tokenizer.decode([1, 2]) == "1 2"
    ema, _ = logits(tmp_path / "run" / "checkpoint" / "step-2")  # EMA weights by default
    assert torch.equal(ema, reference)
    raw_2, _ = logits(tmp_path / "run" / "checkpoint", weights="raw", step=2)
    assert not torch.allclose(raw_2, reference)
    assert not any(p.name.startswith(".aogpt") for p in tmp_path.rglob("*"))  # nothing was written


# ---- bad input: one InputError (a ValueError) naming the value and what is allowed, before any work ----
@pytest.fixture
def forwards(lm):
    """Counts the module's forward passes (a bad input must be refused before the first)."""
    calls = []
    handle = lm.module.register_forward_pre_hook(lambda *_: calls.append(1))
    yield calls
    handle.remove()


def test_a_folder_of_no_known_kind_is_one_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"model_type": "gpt2"}')
    allowed = "allowed: a model folder (aogpt convert / aogpt export) or a DCP checkpoint folder (.metadata or step-N folders)"
    for path, what in (
        (tmp_path / "empty", " is neither kind of folder"),
        (tmp_path / "file.txt", " is a file"),
        (tmp_path / "missing", " does not exist"),
        (tmp_path / "other", ": its config.json is not an aogpt model folder's"),
    ):
        with pytest.raises(InputError, match=rf"path '{path}'{what}; {re.escape(allowed)}") as info:
            aogpt_plugin.load(path)
        assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_options_that_do_not_apply_or_exist_are_one_error(model_dir, tmp_path):
    with pytest.raises(InputError, match="weights applies to a checkpoint folder; .* is a model folder"):
        aogpt_plugin.load(model_dir, weights="raw")
    with pytest.raises(InputError, match="dtype='float64' is not supported; allowed: float32, bfloat16, float16"):
        aogpt_plugin.load(model_dir, dtype=torch.float64)
    with pytest.raises(InputError, match="device='tpu' is not a device"):
        aogpt_plugin.load(model_dir, device="tpu")


BAD_LOGPROB = [
    (
        {"tokens": [[1, 2, VOCAB]]},
        rf"token id {VOCAB} \(tokens row 0, position 2\) is outside the vocabulary; allowed: 0..60",
    ),
    ({"tokens": [[1, -1]]}, r"token id -1 \(tokens row 0, position 1\) is outside the vocabulary; allowed: 0..60"),
    ({"tokens": [list(range(41))]}, r"tokens have length 41, outside the model's positions; allowed: 1..40"),
    ({"tokens": [[0.5, 1.0]]}, r"tokens must hold integer token ids; got dtype torch.float32"),
    ({"tokens": []}, r"^tokens is empty \(shape \(0,\)\); allowed: token ids, .*at least one token"),
    ({"tokens": [[1, 2]], "seed": 2**64}, r"^seed 18446744073709551616 is an int; allowed: an integer in 0..2\*\*64-1"),
    ({"tokens": [[1, 2, 3]], "order": [[0, 0, 2]]}, r"order row 0 is not a permutation of 0..2 .*: \[0, 0, 2\]"),
    ({"tokens": [[1, 2, 3]], "order": [[0, 1, 3]]}, r"order row 0 is not a permutation of 0..2"),
    ({"tokens": [[1, 2], [3, 4]], "order": [[0, 1], [1, 1]]}, r"order row 1 is not a permutation of 0..1"),
    ({"tokens": [[1, 2, 3]], "order": [0, 1]}, r"order has shape \(2,\); allowed: \(1, 3\) or \(3,\)"),
    ({"tokens": [[1, 2, 3]] * 2, "order": [[0, 1, 2]] * 3}, r"order has shape \(3, 3\); allowed: \(2, 3\) or \(3,\)"),
    ({"tokens": [[1, 2]], "order": "r2l"}, r"order 'r2l' is not supported; allowed: None, random, l2r, or a \(B, n\)"),
]


BAD_LOGPROB += [  # types, before values: the keyword, the type given and what it takes
    ({"tokens": "1 2 3"}, r"^tokens '1 2 3' is a str; allowed: token ids: a \(B, n\) or \(n,\) tensor or list$"),
    ({"tokens": [[1, 2]], "seed": "x"}, r"^seed 'x' is a str; allowed: an integer$"),
    ({"tokens": [[1, 2]], "order": 5}, r"^order 5 is an int; allowed: None, random, l2r, or permutations"),
    ({"tokens": [[1, 2]], "per_token": "yes"}, r"^per_token 'yes' is a str; allowed: True or False$"),
]


@pytest.mark.parametrize("kwargs,message", BAD_LOGPROB)
def test_bad_logprob_input_is_one_error_before_any_forward(lm, forwards, kwargs, message):
    with pytest.raises(InputError, match=message) as info:
        lm.logprob(**kwargs)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert forwards == []


BAD_GENERATE = [
    ({"length": 41}, r"length=41 is outside the model's positions; allowed: 1..40"),
    ({"length": 8, "steps": 9}, r"steps=9 is outside the allowed range 1..8"),
    ({"top_p": 0.0}, r"top_p=0.0 is outside the allowed range \(0, 1\]"),
    ({"order": "r2l"}, r"order='r2l' is not supported; allowed: random, l2r"),
    ({"length": 4, "order": torch.tensor([0, 1, 1, 2])}, r"order must list each position to generate exactly once"),
    ({"infill": [{"start": 2, "tokens": [VOCAB]}]}, rf"token id {VOCAB} is outside the vocabulary; allowed: 0..60"),
    ({"speculative": 3, "steps": 4}, r"^steps does not apply with speculative \(it samples"),
    ({"speculative": 0}, r"^speculative 0 is not allowed; allowed: a draft size 1..16 or auto"),
    # types, before values: the keyword and what it takes
    ({"length": "8"}, r"^length '8' is a str; allowed: an integer, or a list of integers \(one per sample\)"),
    ({"num_samples": "2"}, r"^num_samples '2' is a str; allowed: an integer"),
    ({"top_p": "0.5"}, r"^top_p '0.5' is a str; allowed: a number"),
    ({"steps": 2.5}, r"^steps 2.5 is a float; allowed: an integer"),
    ({"seed": "x"}, r"^seed 'x' is a str; allowed: an integer, or a list of integers"),
    ({"temperature": True}, r"^temperature True is a bool; allowed: a number"),
    # a prompt longer than the sample: named with its token count
    (
        {"length": 8, "prompt": " ".join(["5"] * 50)},
        r"^prompt has 50 tokens, and length=8 leaves no position to generate",
    ),
    (
        {"length": 8, "infill": [{"start": 0, "tokens": [5] * 50}]},
        r"^infill gives 50 tokens, up to position 49, and length=8 ends at 7; allowed: spans within 0..7",
    ),
    (
        {"prompt": ["1", "2"], "num_samples": 3},
        r"^prompt has 2 items for num_samples 3; allowed: one value, or one per",
    ),
    ({"prompt": ["1", "2"], "seed": [1, 2, 3]}, r"^seed has 3 items and prompt has 2"),
    ({"requests": [{"promt": "1"}]}, r"^requests\[0\], field 'promt' is not a request field; allowed: prompt, infill"),
    ({"requests": [{"prompt": "1"}], "prompt": "2"}, r"^prompt is given for every sample and the requests give one"),
    ({"requests": "x"}, r"^requests 'x' is a str; allowed: None, or a list of dicts \(one per sample\)$"),
    ({"requests": [1]}, r"^requests\[0\]: a request is a JSON object \(a dict\), got int"),
    ({"requests": []}, r"^requests must be a non-empty list of dicts"),
    ({"requests": [{"length": 8}, {"length": "8"}]}, r"^requests\[1\], field 'length' must be an integer, got \"8\"$"),
    (
        {"requests": [{"length": 8}], "length": [8, 9]},
        r"^length is a list \(one per sample\) and the requests give each sample its own",
    ),
    ({"requests": [{"length": 8}, {"length": 41}]}, r"^requests\[1\], field 'length': length=41 is outside"),
    (
        {"requests": [{"length": 8, "seed": 2**64}]},
        r"^requests\[0\], field 'seed': seed=18446744073709551616 is outside",
    ),
    ({"requests": [{"length": 8}], "seed": -1}, r"^seed -1 is outside the allowed range 0..2\*\*64-1$"),
    # empty lists and seeds outside 64 bits: named, with what is allowed
    ({"prompt": []}, r"^prompt is an empty list; allowed: one value for every sample, or a list with one per sample"),
    ({"length": []}, r"^length is an empty list; allowed"),
    ({"seed": []}, r"^seed is an empty list; allowed"),
    ({"length": 8, "seed": -1}, r"^seed=-1 is outside the allowed range 0..2\*\*64-1"),
    ({"length": 8, "seed": 2**64}, r"^seed=18446744073709551616 is outside the allowed range 0..2\*\*64-1"),
    ({"length": 8, "num_samples": 2, "seed": [0, -3]}, r"^seed=-3 of sample 1 is outside the allowed range"),
    ({"progress": "yes"}, r"^progress 'yes' is a str; allowed: True or False$"),
    ({"top_k": 2.0}, r"^top_k 2.0 is a float; allowed: an integer$"),
    ({"order": 5}, r"^order 5 is an int; allowed: random, l2r, a tensor of positions"),
    ({"decode_attention": "dense"}, r"^decode_attention='dense': the layout 'dense' is not one of full, partial"),
    ({"decode_attention": "full"}, r"^decode_attention='full' sets the static step's FlexAttention, and this run"),
    ({"decode_attention": 4}, r"^decode_attention 4 is an int; allowed: a string$"),
]


@pytest.mark.parametrize("kwargs,message", BAD_GENERATE)
def test_bad_generate_input_is_one_error_before_any_forward(lm, forwards, kwargs, message):
    """Each names the keyword as Python spells it, never as the command's flag (`steps`, not `--steps`)."""
    with pytest.raises(InputError, match=message) as info:
        lm.generate(**kwargs)
    assert forwards == []
    assert "--" not in str(info.value) and "\n" not in str(info.value)


def test_generate_takes_a_request_per_sample_and_each_gets_its_lone_tokens(lm):
    """Lists per keyword and `requests` give the same batch; row i is what generate gives request i alone,
    at its own length (-1 after it); a request without a seed gets sample i of the seed's."""
    seeds = [5, sample_seed(5, 1), sample_seed(5, 2)]
    lists = lm.generate(prompt=["1 2", "3", None], length=[10, 12, 8], seed=seeds, steps=None, top_k=20)
    requests = lm.generate(
        requests=[{"prompt": "1 2", "length": 10, "seed": 5}, {"prompt": "3", "length": 12}, {"length": 8}],
        seed=5,
        top_k=20,
    )
    assert torch.equal(lists.tokens, requests.tokens) and lists.texts == requests.texts
    for i, (prompt, length) in enumerate((("1 2", 10), ("3", 12), (None, 8))):
        alone = lm.generate(prompt=prompt, length=length, seed=seeds[i], top_k=20)
        assert alone.tokens[0].tolist() == lists.tokens[i, :length].tolist() and alone.texts[0] == lists.texts[i]
        assert (lists.tokens[i, length:] == -1).all()
    assert lists.texts[0].startswith("1 2 ") and lists.texts[1].startswith("3 ")


MIXED = [  # one request each, differing in every run option and per-sample field
    {"length": 8, "seed": 0},
    {"length": 8, "steps": 4, "seed": 1},
    {"length": 10, "temperature": 0.7, "prompt": "1 2"},
    {"length": 12, "top_p": 0.8, "seed": 3, "infill": [{"start": 6, "tokens": [4, 5]}]},
    {"length": 9, "top_k": 1, "seed": 4},
    {"length": 11, "order": "l2r", "steps": 5, "seed": 5},
    {"length": 8, "steps": 4, "top_k": 5},
    {"length": 7, "schedule": "cosine", "counts": "binomial", "steps": 3, "seed": 8},
]


@pytest.mark.parametrize("graphs", ["off", "static"])
def test_each_request_runs_with_its_own_options_whatever_else_the_call_asks_for(lm, graphs):
    """Reported: request 0 of [{"length": 8, "seed": 0}, {"length": 8, "steps": 4, "seed": 1}] was sampled
    with request 1's steps=4 (and a request beside one with top_k=1 came out greedy). Each request's tokens
    are its own request's alone, for the dynamic sampler and the static step."""
    together = lm.generate(requests=MIXED, seed=11, graphs=graphs)
    assert together.tokens.shape == (len(MIXED), 12)
    for i, request in enumerate(MIXED):
        alone = lm.generate(requests=[request], seed=sample_seed(11, i) if "seed" not in request else 0, graphs=graphs)
        n = request["length"]
        assert together.tokens[i, :n].tolist() == alone.tokens[0].tolist(), i
        assert (together.tokens[i, n:] == -1).all() and together.texts[i] == alone.texts[0]
        assert int(together.result.lengths[i]) == n
    one_step = lm.generate(requests=[{**MIXED[0], "steps": 4}], graphs=graphs)  # the check can fail
    assert one_step.tokens[0].tolist() != together.tokens[0, :8].tolist()


def test_bad_score_input_is_one_error_before_any_forward(lm, forwards):
    for kwargs, message in (
        ({"orders": 0}, r"orders 0: the number of orders per chunk K must be >= 1"),
        ({"order": "l2r", "orders": 2}, r"orders 2 needs order random"),
        ({"seq_len": 41}, r"seq_len 41 is above the 40 positions of .*; allowed: 1..40"),
        ({"seq_len": 30}, r"the texts have 10 tokens, fewer than one chunk of seq_len 30"),
    ):
        with pytest.raises(InputError, match=message):
            lm.score(["1 2 3 4 5", "6 7 8 9 10"], **kwargs)
    with pytest.raises(InputError, match=r"texts_or_tokens is empty; allowed: documents \(strings\) or token chunks"):
        lm.score([])
    with pytest.raises(InputError, match=r"token id 61 \(texts_or_tokens row 0, position 0\)"):
        lm.score(torch.full((2, 8), VOCAB))
    with pytest.raises(InputError, match=r"^texts_or_tokens\[1\] is None \(a NoneType\); allowed: a string"):
        lm.score(["1 2 3", None])
    with pytest.raises(InputError, match=r"^seed -1 is an int; allowed: an integer in 0..2\*\*64-1"):
        lm.score(["1 2 3"], seed=-1)
    assert forwards == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"orders": "2"}, r"^orders '2' is a str; allowed: an integer$"),
        ({"ensemble": 1.5}, r"^ensemble 1.5 is a float; allowed: an integer$"),
        ({"seq_len": "4"}, r"^seq_len '4' is a str; allowed: None or an integer$"),
        ({"max_chunks": "1"}, r"^max_chunks '1' is a str; allowed: None or an integer$"),
        ({"seed": "x"}, r"^seed 'x' is a str; allowed: an integer$"),
        ({"batch_size": "8"}, r"^batch_size '8' is a str; allowed: an integer$"),
        ({"order": 1}, r"^order 1 is an int; allowed: random or l2r$"),
        ({"progress": "y"}, r"^progress 'y' is a str; allowed: True or False$"),
        ({"texts_or_tokens": 5}, r"^texts_or_tokens 5 is an int; allowed: a string, a list of strings, or token"),
    ],
)
def test_score_checks_each_keywords_type_before_its_value(lm, forwards, kwargs, message):
    """A wrong type names the keyword and what it takes (not a TypeError from a comparison deep inside)."""
    kwargs = {"texts_or_tokens": ["1 2 3 4 5"], **kwargs}
    with pytest.raises(InputError, match=message) as info:
        lm.score(**kwargs)
    assert forwards == [] and "--" not in str(info.value)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((123,), {}, r"^path 123 is an int; allowed: a path \(a str or os.PathLike\)$"),
        ((None,), {}, r"^path None is a NoneType; allowed: a path"),
        (("M",), {"device": 0}, r"^device 0 is an int; allowed: None, a device name or a torch.device$"),
        (("M",), {"dtype": 16}, r"^dtype 16 is an int; allowed: None, a dtype name or a torch.dtype$"),
        (("M",), {"weights": 1}, r"^weights 1 is an int; allowed: None, ema or raw$"),
        (("M",), {"step": "3"}, r"^step '3' is a str; allowed: None or an integer$"),
        (("M",), {"tokenizer": 1}, r"^tokenizer 1 is an int; allowed: None or a tokenizer name$"),
        (("M",), {"verify": "yes"}, r"^verify 'yes' is a str; allowed: True or False$"),
    ],
)
def test_load_checks_each_keywords_type(model_dir, args, kwargs, message):
    args = tuple(model_dir if a == "M" else a for a in args)
    with pytest.raises(InputError, match=message):
        aogpt_plugin.load(*args, **kwargs)


def test_text_the_model_does_not_embed_is_one_error(tmp_path):
    save_model(tiny_model(preset="sampler"), str(tmp_path / "m"))  # GPT-2's tokenizer over a 61-token model
    lm = aogpt_plugin.load(tmp_path / "m", device="cpu")
    with pytest.raises(InputError, match="has a 61-token vocabulary but its tokenizer 'gpt2' has 50257"):
        lm.score(["hello world"] * 20)


def test_a_converted_gpt2_scores_text_as_transformers_does(tmp_path):
    """`aogpt_plugin.load` of a `aogpt convert --from-hf` folder: log p(x) left to right, per token, is
    the GPT-2's after <|endoftext|>, and gradients reach the tied head (the token embedding)."""
    pytest.importorskip("transformers")
    from conftest import gpt2_logits, tiny_gpt2

    gpt2 = tiny_gpt2(tmp_path / "hf")
    assert cli.main(["convert", "--from-hf", str(tmp_path / "hf"), str(tmp_path / "ao")]) == 0
    lm = aogpt_plugin.load(str(tmp_path / "ao"))
    tokens = torch.randint(0, 50256, (2, 20), generator=torch.Generator().manual_seed(3))
    ours = lm.logprob(tokens, per_token=True)
    theirs = torch.log_softmax(gpt2_logits(gpt2, tokens), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours.detach(), theirs, atol=1e-5, rtol=0)
    lm.module.requires_grad_(True)
    (-lm.logprob(tokens).sum()).backward()
    assert lm.module.output is None and lm.module.tok_embeddings.weight.grad.abs().sum() > 0


def test_close_frees_the_decode_state_and_the_model_stays_usable(model_dir):
    """`generate` keeps the decode view and its static step (a full-length KV cache) for the next call; close()
    (or leaving a `with` block) drops them, and a later generate builds them again with the same tokens."""
    import gc
    import weakref

    from aogpt_plugin.sampler.decoder import _views

    with aogpt_plugin.load(model_dir, device="cpu") as lm:
        first = lm.generate(length=12, steps=4, seed=2, graphs="static")
        view = weakref.ref(_views[lm.module][1])
        assert view() is not None and view().step_buffers  # kept for the next call
        lm.close()
        gc.collect()
        assert lm.module not in _views and view() is None  # nothing else held it: freed
        again = lm.generate(length=12, steps=4, seed=2, graphs="static")
        assert torch.equal(again.tokens, first.tokens) and lm.module in _views
    assert lm.module not in _views  # the block's end closed it
