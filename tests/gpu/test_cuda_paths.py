"""The CUDA paths, on a GPU only (`pytest -m gpu`; scripts/gpu_check.sh runs them on the lent machine).

bf16 training of the `small` flavor on real text through the launcher with FSDP2 (NCCL), per-block
compile and activation checkpointing: finite falling loss, exact resume, convert; float8 on H100;
the sampler on CUDA (flex == SDPA == recomputation, no recompiles across widths, seeded); `eval ppl`
on CUDA equals the CPU."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import ROOT, debug_train_args, run_torchrun, tiny_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run on the GPU machine)"),
]
HELPER = str(ROOT / "tests" / "helpers" / "train_and_dump.py")
SMALL = {
    "model.flavor": "small",
    "training.seq_len": 256,
    "validation.seq_len": 256,
    "training.local_batch_size": 8,
    "training.mixed_precision_param": "bfloat16",
    "compile.enable": True,
    "activation_checkpoint.mode": "selective",
    "parallelism.data_parallel_shard_degree": -1,
}


def _train(tmp_path, name, steps, dump, extra=None):
    out = tmp_path / f"{name}.pt"
    args = [HELPER, str(out), "--", *debug_train_args(dump, steps, **{**SMALL, **(extra or {})})]
    proc = run_torchrun(args, nproc=1, module=False, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc, torch.load(out)


def test_bf16_fsdp_compile_ac_training_learns_resumes_exactly_and_converts(tmp_path):
    from aogpt_plugin.convert import convert
    from aogpt_plugin.model_dir import load_model_dir

    steps, dump = 24, tmp_path / "run"
    _, full = _train(tmp_path, "full", steps, dump)
    losses = [full["losses"][s] for s in range(1, steps + 1)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] - 0.3, losses
    shutil.rmtree(dump / "checkpoint" / f"step-{steps}")
    proc, resumed = _train(tmp_path, "resumed", steps, dump)
    assert f"Training starts at step {steps // 2 + 1}" in proc.stdout + proc.stderr
    for s in range(steps // 2 + 1, steps + 1):
        assert resumed["losses"][s] == full["losses"][s], s
    cfg = convert(str(dump / "checkpoint"), str(tmp_path / "model"), weights="ema")
    assert cfg.step == steps
    model = load_model_dir(str(tmp_path / "model"), device="cuda").model
    with torch.no_grad():
        logits = model(full["tokens"].cuda(), order=full["order"].cuda()).float().cpu()
    torch.testing.assert_close(logits, full["logits_ema"].float(), rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9), reason="float8 needs sm_89+"
)
def test_float8_converter_trains_finite(tmp_path):
    _, out = _train(tmp_path, "fp8", 8, tmp_path / "fp8", {"model.converters": "quantize.linear.float8"})
    assert all(torch.isfinite(torch.tensor(list(out["losses"].values()))))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_flex_equals_sdpa_equals_recomputation_on_cuda(dtype, tol):
    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda().to(dtype)
    results = {}
    for backend in ("sdpa", "flex"):
        config = SampleConfig(length=23, steps=7, num_samples=3, counts="binomial", seed=3, backend=backend)
        results[backend] = generate(model, config, record=True)
    assert torch.equal(results["sdpa"].tokens, results["flex"].tokens)
    tokens, orders = results["sdpa"].tokens.cuda(), results["sdpa"].orders.cuda()
    with torch.no_grad():
        full = model(tokens, order=orders).float()
    for backend, result in results.items():
        known = result.trace[0].known  # the first step's logits: the slots right after the prompt (none)
        step = result.trace[0].logits.float().cuda()
        rows = known.cuda()
        ref = full[torch.arange(3, device="cuda"), rows]
        torch.testing.assert_close(step[:, 0], ref, rtol=tol, atol=tol, msg=backend)


def test_flex_steps_of_different_widths_do_not_recompile():
    import torch._dynamo.utils as dynamo_utils

    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    config = dict(length=23, num_samples=2, counts="binomial", backend="flex", graphs="off")  # the dynamic sampler
    generate(model, SampleConfig(steps=5, seed=0, **config))
    before = dict(dynamo_utils.counters["stats"])
    generate(model, SampleConfig(steps=9, seed=1, **config))
    assert dynamo_utils.counters["stats"].get("unique_graphs", 0) == before.get("unique_graphs", 0)


def test_same_seed_same_samples_on_cuda():
    from aogpt_plugin.sampler import SampleConfig, generate

    model = tiny_model("adaln", preset="sampler").cuda()
    config = SampleConfig(length=20, steps=6, num_samples=4, seed=11)
    assert torch.equal(generate(model, config).tokens, generate(model, config).tokens)


def test_eval_ppl_on_cuda_equals_cpu(tmp_path, capsys):
    from aogpt_plugin.cli import main
    from aogpt_plugin.model_dir import save_model

    save_model(tiny_model(vocab_size=50257, max_seq_len=32, dim=32, preset="eval"), str(tmp_path / "m"))
    records = {}
    for device in ("cpu", "cuda"):
        argv = ["eval", "ppl", "--model", str(tmp_path / "m"), "--dataset", "wikitext2", "--order", "random"]
        argv += ["--orders", "2", "--seq-len", "32", "--max-chunks", "4", "--device", device, "--json", "--no-progress"]
        assert main(argv) == 0
        records[device] = json.loads(capsys.readouterr().out)
    assert records["cuda"]["nll"] == pytest.approx(records["cpu"]["nll"], rel=1e-4)
