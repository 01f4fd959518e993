"""`aogpt export`: a Hugging Face folder whose generated code, loaded by transformers in a process that
cannot import aogpt or torchtitan, gives our model's logits bit for bit; aogpt's readers still read it;
bad input is one line."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys

import pytest
import torch
from conftest import HELDOUT, SHARED_DATA, gpt2_logits, load_with_transformers, tiny_gpt2, tiny_model

from aogpt_plugin.cli import main
from aogpt_plugin.hf_export import ExportSourceError, _read_module, export, gpt2_vocab_and_merges, model_source
from aogpt_plugin.model_dir import load_model_dir, read_config, save_model

if importlib.util.find_spec("transformers") is None:
    pytest.skip("the loading side needs transformers (pip install -e '.[eval]')", allow_module_level=True)

TEXTS = ["Hello world, it's 2024!  ok", "naïve café — 東京\n\n  tabs\tand   spaces ", " 12345 x"]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A tiny GPT-2 saved by transformers (conftest.tiny_gpt2) and its folder."""
    path = tmp_path_factory.mktemp("gpt2") / "hf"
    return tiny_gpt2(path), str(path)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, gpt2):
    """One exported model per conditioning and tokenizer kind: adaLN + GPT-2, concat + a trained
    tokenizer.json, none (plain GPT) + bare symbols, and a GPT-2 converted by `aogpt convert --from-hf`
    (GPT-2's backbone); {name: (model, source folder, exported folder)}."""
    from aogpt_plugin.convert import convert_from_hf
    from aogpt_plugin.data.tokenizer_training import train_tokenizer

    root = tmp_path_factory.mktemp("hf_export")
    tok_json = root / "tok.json"
    train_tokenizer(str(HELDOUT), 300, str(tok_json), max_bytes=100_000)
    made = {}
    for name, conditioning, tokenizer, vocab in (
        ("adaln", "adaln", "gpt2", 50257),
        ("concat", "concat", str(tok_json), 300),
        ("none", "none", "symbols:61", 61),
    ):
        model = tiny_model(conditioning, seed=len(made), scale=4.0, vocab_size=vocab).eval().requires_grad_(False)
        save_model(model, str(root / f"{name}-src"), tokenizer=tokenizer)
        export(str(root / f"{name}-src"), str(root / name))
        made[name] = (model, str(root / f"{name}-src"), str(root / name))
    convert_from_hf(gpt2[1], str(root / "gpt2-src"))
    export(str(root / "gpt2-src"), str(root / "gpt2"))
    made["gpt2"] = (load_model_dir(str(root / "gpt2-src")).model, str(root / "gpt2-src"), str(root / "gpt2"))
    return made


@pytest.fixture(scope="module")
def loaded(folders, tmp_path_factory):
    """What transformers computes from the exported folders, in a process without aogpt."""
    work = tmp_path_factory.mktemp("loader")
    g = torch.Generator().manual_seed(0)
    inputs, cases = {}, {}
    for name, (model, _src, out) in folders.items():
        n, vocab = model.model_args.max_seq_len, model.model_args.vocab_size
        inputs[f"{name}/tokens"] = torch.randint(0, vocab, (2, n), generator=g)
        inputs[f"{name}/order"] = torch.stack([torch.randperm(n, generator=g) for _ in range(2)])
        cases[name] = {"dir": out, "texts": TEXTS if name != "none" else []}
    return inputs, load_with_transformers(cases, inputs, work)


@pytest.mark.parametrize("name", ["adaln", "concat", "none", "gpt2"])
def test_transformers_gives_our_logits_bit_for_bit(folders, loaded, name):
    """Same code (generated from ours), same float32 weights, one thread on both sides: equal bits,
    left to right and in a random order; the HF model leaves out the padded vocabulary rows."""
    inputs, out = loaded
    model = folders[name][0]
    vocab = model.model_args.vocab_size
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ours_l2r = model(inputs[f"{name}/tokens"])[..., :vocab]
        ours_order = model(inputs[f"{name}/tokens"], inputs[f"{name}/order"])[..., :vocab]
    finally:
        torch.set_num_threads(threads)
    assert out[f"{name}/l2r"].shape == ours_l2r.shape == (2, model.model_args.max_seq_len, vocab)
    assert torch.equal(out[f"{name}/l2r"], ours_l2r)
    assert torch.equal(out[f"{name}/order"], ours_order)
    assert not torch.equal(ours_l2r, ours_order)  # the order reached the model


def test_an_exported_gpt2_gives_gpt2s_logits_left_to_right(gpt2, loaded):
    """GPT-2 -> `aogpt convert --from-hf` -> `aogpt export` -> AutoModel (in a process without aogpt): at the
    identity order its logits are the GPT-2's after <|endoftext|>."""
    inputs, out = loaded
    theirs = gpt2_logits(gpt2[0], inputs["gpt2/tokens"])
    torch.testing.assert_close(out["gpt2/l2r"], theirs, atol=1e-5, rtol=0)
    assert not torch.allclose(out["gpt2/order"], theirs, atol=1e-2)  # another order reads other contexts


@pytest.mark.parametrize("name", ["adaln", "concat", "gpt2"])
def test_auto_tokenizer_gives_our_tokenizers_ids(folders, loaded, name):
    config = read_config(folders[name][2])
    tok = config.build_tokenizer(folders[name][2])
    assert loaded[1][f"{name}/ids"] == [tok.encode(text) for text in TEXTS]
    assert loaded[1][f"{name}/decoded"] == [tok.decode(tok.encode(text)) for text in TEXTS]


def test_gpt2_vocab_and_merges_are_openais_files():
    """Rebuilt from tiktoken's ranks, they equal GPT-2's encoder.json and vocab.bpe (= HF vocab.json, merges.txt)."""
    folder = SHARED_DATA / "gpt2_tokenizer"
    if not (folder / "vocab.bpe").exists():
        pytest.skip(f"no GPT-2 files in {folder}")
    vocab, merges = gpt2_vocab_and_merges("gpt2")  # (cached by the export above)
    assert vocab == json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    assert merges == [m for m in (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:] if m]


def test_the_modeling_file_is_the_package_source(folders):
    from aogpt_plugin.model.model import AOGPT, TransformerBlock

    code = open(os.path.join(folders["adaln"][2], "modeling_aogpt.py"), encoding="utf-8").read()
    assert inspect.getsource(AOGPT) in code and inspect.getsource(TransformerBlock) in code
    imports = {
        "." * n.level + (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse(code))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    tops = {name.split(".")[0] for name in imports if not name.startswith(".")}
    assert tops <= {"torch", "transformers", *sys.stdlib_module_names} and "torch" in tops
    assert {name for name in imports if name.startswith(".")} == {".configuration_aogpt"}


@pytest.mark.parametrize(
    "source,message",
    [
        ("import torchtitan\n", "line 1 imports 'torchtitan'; the exported modeling code may import only torch"),
        ("import numpy as np\n", "imports 'numpy'"),
        ("def f():\n    from ..sampler import x\n", "line 2 imports aogpt_plugin.sampler inside a function"),
        ("from .args import AOGPTModelArgs as A\n", "write in-package imports as `from .module import name"),
        ("from .args import NOT_THERE\n", "imports \\['NOT_THERE'\\] from aogpt_plugin.model.args"),
        ("class AOGPTModel:\n    pass\n", "both define 'AOGPTModel'"),
    ],
)
def test_the_generator_refuses_what_the_exported_code_could_not_import(source, message):
    fake = {"aogpt_plugin.model.fake": (source, "/x/aogpt_plugin/model/fake.py")}
    read = lambda name: fake[name] if name in fake else _read_module(name)
    with pytest.raises(ExportSourceError, match=message):
        model_source(("aogpt_plugin.model.fake",), read)


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("reader", ["load_model_dir", "sample", "eval ppl", "lm-eval"])
def test_aogpt_reads_the_exported_folder_as_its_source(folders, capsys, tmp_path, reader):
    _model, src, out = folders["adaln"]
    if reader == "load_model_dir":
        a, b = load_model_dir(src).model.state_dict(), load_model_dir(out).model.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        return
    if reader == "lm-eval":
        pytest.importorskip("lm_eval")
        from lm_eval.api.instance import Instance

        from aogpt_plugin.eval.lm_eval_model import AOGPTLM

        req = [Instance(request_type="loglikelihood", doc={}, arguments=("The cat sat", " on the mat"), idx=0)]
        results = [AOGPTLM(pretrained=path).loglikelihood(req, disable_tqdm=True) for path in (src, out)]
        assert results[0] == results[1]
        return
    if reader == "sample":
        argv = ["sample", "--num-samples", "2", "--length", "12", "--steps", "4", "--seed", "3", "--json"]
    else:
        data = tmp_path / "doc.jsonl"
        data.write_text(json.dumps({"text": "The quick brown fox jumps over the lazy dog. " * 3}) + "\n")
        argv = [
            "eval",
            "ppl",
            "--dataset",
            str(data),
            "--order",
            "random",
            "--seq-len",
            "24",
            "--json",
            "--no-progress",
        ]
    records = []
    for path in (src, out):
        code, stdout, err = _run(capsys, [*argv, "--model", path])
        assert code == 0, err
        records.append(json.loads(stdout))
    key = "tokens" if reader == "sample" else "nll"
    assert records[0][key] == records[1][key]


def test_bad_input_is_one_error_line_and_writes_nothing(folders, capsys, tmp_path):
    src = folders["none"][1]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(tmp_path / "nope"), str(tmp_path / "o")], "SRC '.*nope' does not exist"),
        ([str(tmp_path / "mine" / "notes.txt"), str(tmp_path / "o")], "is a file"),
        ([str(tmp_path / "hf"), str(tmp_path / "o")], "its config.json is not an aogpt model folder's"),
        ([str(tmp_path / "empty"), str(tmp_path / "o")], "is neither a model folder .* nor a checkpoint"),
        ([src, str(tmp_path / "o"), "--step", "3"], "--step applies to a checkpoint SRC"),
        ([src, str(tmp_path / "mine")], "already exists; pass --force"),
        ([src, str(tmp_path / "mine"), "--force"], "is not a model folder"),
    ]
    for argv, message in cases:
        code, _out, err = _run(capsys, ["export", *argv])
        assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
        assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "hf", "mine"]  # no output, lock or temporary


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_force_replaces_an_exported_folder_and_a_checkpoint_exports_too(folders, capsys, tmp_path):
    """--force replaces a folder holding the export's files (a GPT-2 one by a symbols one: none are left
    over); a DCP checkpoint exports as `aogpt convert` reads it."""
    import torch.distributed.checkpoint as dcp

    target = tmp_path / "out"
    shutil.copytree(folders["adaln"][2], target)
    code, _out, err = _run(capsys, ["export", folders["none"][1], str(target), "--force"])
    assert code == 0, err
    assert sorted(os.listdir(target)) == [
        "config.json",
        "configuration_aogpt.py",
        "model.safetensors",
        "modeling_aogpt.py",
    ]
    assert read_config(str(target)).model_args.conditioning == "none"

    model = tiny_model(vocab_size=50257, max_seq_len=16)
    dcp.save(
        {k: v.clone() for k, v in model.state_dict().items()},
        checkpoint_id=str(tmp_path / "ckpt" / "step-5"),
        no_dist=True,
    )
    code, stdout, err = _run(capsys, ["export", str(tmp_path / "ckpt"), str(tmp_path / "hf"), "--weights", "raw"])
    assert code == 0, err
    assert json.loads(stdout.splitlines()[-1]) == {"out_dir": str(tmp_path / "hf"), "step": 5, "weights": "raw"}
    loaded = load_model_dir(str(tmp_path / "hf")).model.state_dict()
    assert all(torch.equal(v, loaded[k]) for k, v in model.state_dict().items())
    assert (tmp_path / "hf" / "vocab.json").exists()


LOAD_QUIETLY = """
import sys, torch
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32)
ids = torch.zeros(1, 4, dtype=torch.long)
print("logits", tuple(model(ids).logits.shape), flush=True)
model(ids, attention_mask=torch.tensor([[1, 1, 0, 0]]))  # padding: the model's own error must still show
"""


def test_loading_an_exported_folder_prints_no_library_noise_and_still_its_own_errors(folders, tmp_path):
    """Reported: torchao's `Failed to load ..._C_mxfp8....so` and torch's `_pytree` Enum deprecations when
    transformers loaded an exported folder (its generated code now drops them before importing transformers)."""
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "hf_modules")  # the generated code as exported, not a cached copy
    proc = subprocess.run(
        [sys.executable, "-I", "-c", LOAD_QUIETLY, folders["adaln"][2]],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.stdout.startswith("logits (1, 4, "), proc.stderr[-3000:]
    assert proc.returncode == 1 and "ValueError: AOGPTModel reads no padding" in proc.stderr
    assert "Failed to load" not in proc.stderr and "is an Enum subclass" not in proc.stderr, proc.stderr[:3000]
