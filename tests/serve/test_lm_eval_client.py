"""lm-eval's own `local-completions` model against `aogpt serve`: the local LAMBADA tasks (loglikelihood and the
cloze generate_until) give the results and per-document answers of `aogpt lm-eval`'s in-process `aogpt` model.
lm-eval tokenizes through the server (/tokenizer_info, /tokenize: its remote tokenizer; nothing from a hub)
and reads echo + logprobs for loglikelihood. Its max_length keeps one position for the token it asks to
generate, so the in-process model reads max_length one shorter: both cut the same contexts."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import ROOT, SHARED_DATA, tiny_model

from aogpt_plugin.cli import main
from aogpt_plugin.model_dir import save_model

from .conftest import Server

pytest.importorskip("lm_eval")
LAMBADA = SHARED_DATA / "lambada" / "lambada_test.jsonl"
SEQ = 24


@pytest.fixture(autouse=True)
def _lm_eval_logs_to_this_tests_stderr():
    """lm_eval's log handler keeps the stderr of the moment it first ran (tests/eval/test_lm_eval_model.py)."""
    import logging

    for handler in logging.getLogger("lm_eval").handlers:
        if type(handler) is logging.StreamHandler:
            handler.stream = sys.stderr
    yield


def _results(out) -> tuple[dict, dict]:
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    (results,) = [json.loads(open(f).read())["results"] for f in files if "results_" in f]
    answers = {}
    for f in files:
        if "samples_" in f:
            task = os.path.basename(f).split("samples_")[1].rsplit("_", 1)[0]
            answers[task] = [s["resps"] for s in sorted(map(json.loads, open(f)), key=lambda s: s["doc_id"])]
    return results, answers


@pytest.mark.skipif(not LAMBADA.exists(), reason="needs ../shared/data")
def test_local_completions_through_the_server_gives_aogpt_lm_evals_results(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    model_dir = tmp_path / "tiny"
    save_model(tiny_model(vocab_size=50257, max_seq_len=SEQ, dim=32, scale=5.0, preset="eval"), str(model_dir))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("lambada_local", "lambada_local_cloze"):
        text = (ROOT / "lm_eval_tasks" / f"{name}.yaml").read_text()
        (tasks / f"{name}.yaml").write_text(text.replace("../shared/data/lambada", str(LAMBADA.parent)))
    common = ["--tasks", "lambada_local,lambada_local_cloze", "--include_path", str(tasks), "--limit", "6"]
    common += ["--batch_size", "1", "--log_samples", "--gen_kwargs", "order=l2r"]
    inside = tmp_path / "inside"
    argv = ["lm-eval", "--model", "aogpt", "--model_args", f"pretrained={model_dir},max_length={SEQ - 1}"]
    assert main([*argv, *common, "--output_path", str(inside)]) == 0
    server = Server(str(model_dir), "--slots", "4")
    try:
        through = tmp_path / "through"
        url = f"{server.url}/v1/completions"
        argv = [
            "lm-eval",
            "--model",
            "local-completions",
            "--model_args",
            f"model=tiny,base_url={url},max_length={SEQ}",
        ]
        assert main([*argv, *common, "--output_path", str(through)]) == 0
        assert server.metric('aogpt_requests_total{outcome="ok"}') == 6 + 6  # a loglikelihood and a cloze request each
    finally:
        assert server.stop()[0] == 0
    (inside_results, inside_answers), (through_results, through_answers) = _results(inside), _results(through)
    assert through_answers == inside_answers
    for task in ("lambada_local", "lambada_local_cloze"):
        metrics = {k: v for k, v in inside_results[task].items() if k != "alias" and "stderr" not in k}
        assert {k: through_results[task][k] for k in metrics} == metrics
    assert any(r[0][0].strip() for r in inside_answers["lambada_local_cloze"])  # texts were generated
