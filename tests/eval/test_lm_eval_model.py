"""The lm-evaluation-harness model: loglikelihood_rolling equals `aogpt eval ppl` on the same text, the
conditional loglikelihood is the sum of the continuation's slots, generation honours stop sequences,
and a local LAMBADA task runs offline through `aogpt lm-eval`; an unknown task and a task whose data
cannot be fetched are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, SHARED_DATA, tiny_model

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from aogpt_plugin.cli import lm_eval_argv, main  # noqa: E402
from aogpt_plugin.errors import UserError  # noqa: E402
from aogpt_plugin.eval.lm_eval_model import AOGPTLM  # noqa: E402
from aogpt_plugin.likelihood import token_nlls  # noqa: E402
from aogpt_plugin.model_dir import save_model  # noqa: E402

SEQ = 24


@pytest.fixture(autouse=True)
def _lm_eval_logs_to_this_tests_stderr():
    """lm_eval binds its one log handler to the sys.stderr of the moment it first runs in a process; under
    pytest that may be an earlier test's capture, closed since ("--- Logging error ---" and a traceback in
    the next test's output). Each test points the handler at its own stderr."""
    import logging

    for handler in logging.getLogger("lm_eval").handlers:
        if type(handler) is logging.StreamHandler:  # lm_eval's own (pytest's capture handlers subclass it)
            handler.stream = sys.stderr  # not setStream: it would flush the closed one
    yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm_eval") / "tiny"
    save_model(tiny_model(vocab_size=50257, max_seq_len=SEQ, dim=32, scale=5.0, preset="eval"), str(path))
    return str(path)


def request(kind, *args, idx=0):
    return Instance(request_type=kind, doc={}, arguments=args, idx=idx)


def text_of(tokens: int, lm: AOGPTLM) -> str:
    """A text whose GPT-2 encoding has exactly `tokens` tokens."""
    words = " ".join(f"w{i}" for i in range(200))
    ids = lm.tok.encode(words)[:tokens]
    text = lm.tok.decode(ids)
    assert len(lm.tok.encode(text)) == tokens
    return text


@pytest.mark.parametrize("order,orders", [("l2r", 1), ("random", 2)])
def test_rolling_loglikelihood_is_the_eval_ppl_estimate_on_the_same_text(capsys, tmp_path, model_dir, order, orders):
    lm = AOGPTLM(pretrained=model_dir, order=order, orders=orders, batch_size=3)
    text = text_of(2 * SEQ - 1, lm)  # + EOS = two windows, as `aogpt eval ppl` packs one document
    (rolling,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", text)], disable_tqdm=True)
    data = tmp_path / "doc.jsonl"
    data.write_text(json.dumps({"text": text}) + "\n")
    argv = ["eval", "ppl", "--model", model_dir, "--dataset", str(data), "--order", order, "--seq-len", str(SEQ)]
    argv += ["--orders", str(orders), "--json", "--no-progress"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["tokens"] == 2 * SEQ and record["dropped_tokens"] == 0
    assert -rolling / (2 * SEQ) == pytest.approx(record["nll"], rel=1e-6)


def test_loglikelihood_is_the_sum_over_the_continuation_given_the_context(model_dir):
    lm = AOGPTLM(pretrained=model_dir, batch_size=2)
    pairs = [("The cat sat on the", " mat"), ("A", " long way to go"), ("", " Hello")]
    results = lm.loglikelihood([request("loglikelihood", c, k, idx=i) for i, (c, k) in enumerate(pairs)], True)
    for (context, continuation), (logp, _greedy) in zip(pairs, results, strict=True):
        ctx, cont = lm.tok.encode(context) if context else [], lm.tok.encode(continuation)
        nll = token_nlls(lm.model, torch.tensor([ctx + cont]), None)[0]
        assert logp == pytest.approx(-float(nll[len(ctx) :].sum()), rel=1e-5)
    # trailing spaces of the context move to the continuation (lm_eval's rule)
    assert lm._encode_pair("The cat ", "sat") == lm._encode_pair("The cat", " sat")
    # any order: the context's positions first (shuffled), then the continuation's; the mean over orders
    ao = AOGPTLM(pretrained=model_dir, order="random", orders=3)
    ((logp, _),) = ao.loglikelihood([request("loglikelihood", "A", " long way to go")], True)
    ctx, cont = ao._encode_pair("A", " long way to go")
    c, k = len(ctx), len(cont)
    tokens, per_order = torch.tensor([ctx + cont]), []
    for draw in range(3):
        order = ao._orders([(c, k)], c + k, draw, 0)
        assert sorted(order[0, :c].tolist()) == list(range(c))
        per_order.append(-float(token_nlls(ao.model, tokens, order)[0, c:].sum()))
    assert logp == pytest.approx(sum(per_order) / 3, rel=1e-5)
    assert len(set(round(v, 4) for v in per_order)) == 3 and logp != pytest.approx(results[1][0], rel=1e-4)


def test_generate_until_stops_at_the_stop_sequence_and_is_greedy_by_default(model_dir):
    lm = AOGPTLM(pretrained=model_dir, max_gen_toks=12)
    free = lm.generate_until([request("generate_until", "The cat", {"until": []})], True)[0]
    again = lm.generate_until([request("generate_until", "The cat", {"until": []})], True)[0]
    assert free == again and len(lm.tok.encode(free)) >= 6  # greedy: deterministic
    stop = free[len(free) // 2 : len(free) // 2 + 2]
    cut = lm.generate_until([request("generate_until", "The cat", {"until": [stop]})], True)[0]
    assert cut == free[: free.find(stop)]
    ao = AOGPTLM(pretrained=model_dir, order="random", max_gen_toks=8)
    assert isinstance(ao.generate_until([request("generate_until", "The cat", {"until": ["\n"]})], True)[0], str)


def test_bad_model_args_are_one_line_errors(model_dir):
    with pytest.raises(UserError, match="order='r2l' is not allowed; allowed: random, l2r"):
        AOGPTLM(pretrained=model_dir, order="r2l")
    with pytest.raises(UserError, match="orders=2 is not allowed"):
        AOGPTLM(pretrained=model_dir, order="l2r", orders=2)
    with pytest.raises(UserError, match="max_length=25 is not allowed; allowed: 1..24"):
        AOGPTLM(pretrained=model_dir, max_length=25)
    short = AOGPTLM(pretrained=model_dir, max_length=8)
    ((logp, _),) = short.loglikelihood([request("loglikelihood", "The cat sat on the mat and the dog", " ran")], True)
    ctx, cont = short._encode_pair("The cat sat on the mat and the dog", " ran")
    nll = token_nlls(short.model, torch.tensor([(ctx + cont)[-8:]]), None)[0]
    assert logp == pytest.approx(-float(nll[-len(cont) :].sum()), rel=1e-5)  # the context cut to 8 positions


@pytest.mark.skipif(not (SHARED_DATA / "lambada" / "lambada_test.jsonl").exists(), reason="needs ../shared/data")
def test_local_lambada_task_runs_offline_through_aogpt_lm_eval(tmp_path, model_dir):
    """The whole command in its own process, as a user runs it: the results, exit 0, and nothing on stderr
    that looks like a traceback (lm_eval's pool workers inherit the command's signal handlers and are
    ended by SIGTERM at shutdown: they must die quietly, errors.stop_at_once_on_signals)."""
    task = (ROOT / "lm_eval_tasks" / "lambada_local.yaml").read_text()
    task = task.replace("../shared/data/lambada", str(SHARED_DATA / "lambada"))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "lambada_local.yaml").write_text(task)
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = tmp_path / "results"
    argv = [
        "lm-eval",
        "--model",
        "aogpt",
        "--model_args",
        f"pretrained={model_dir}",
        "--batch_size",
        "4",
    ]  # no --device: aogpt's default (the machine's) replaces lm_eval's cuda:0, which a CPU machine lacks
    argv += ["--tasks", "lambada_local", "--include_path", str(tmp_path / "tasks"), "--limit", "6"]
    argv += ["--output_path", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", *argv], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Interrupted" not in proc.stderr, proc.stderr[-3000:]
    (found,) = [os.path.join(d, f) for d, _, files in os.walk(out) for f in files if f.startswith("results")]
    results = json.loads(open(found).read())["results"]["lambada_local"]
    assert 0.0 <= results["acc,none"] <= 1.0 and results["perplexity,none"] > 1.0


def _lm_eval_process(tmp_path, model_dir, task: str, name: str):
    """`aogpt lm-eval` on 2 documents of a local LAMBADA task as its own process (stdout a pipe read line by
    line, unbuffered; stderr a file)."""
    task_text = (ROOT / "lm_eval_tasks" / f"{task}.yaml").read_text()
    (tmp_path / "tasks").mkdir(exist_ok=True)
    (tmp_path / "tasks" / f"{task}.yaml").write_text(
        task_text.replace("../shared/data/lambada", str(SHARED_DATA / "lambada"))
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONUNBUFFERED": "1"}
    argv = ["lm-eval", "--model", "aogpt", "--model_args", f"pretrained={model_dir}", "--tasks", task]
    argv += ["--include_path", str(tmp_path / "tasks"), "--limit", "2", "--output_path", str(tmp_path / name)]
    err = open(tmp_path / f"{name}.err", "w")  # noqa: SIM115 - closed by the caller's read
    proc = subprocess.Popen(
        [sys.executable, "-m", "aogpt_plugin.cli", *argv], stdout=subprocess.PIPE, stderr=err, text=True, env=env
    )
    return proc, tmp_path / f"{name}.err"


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "lambada" / "lambada_test.jsonl").exists(), reason="needs ../shared/data")
def test_ctrl_c_right_after_the_table_is_one_line_and_exit_130_every_time(tmp_path, model_dir):
    """Reported: a Ctrl-C within ~0.1 s after `aogpt lm-eval` printed its table raised inside the CLI's
    clean-up (a traceback), or, a little later, killed it by Python's default handler (exit -2, no line).
    SIGINT is sent 0-0.21 s after the table's row arrives, until it has landed (the command had not ended
    yet) 5 times: each time exit 130, one stop line, no traceback."""
    import signal
    import time

    landed = 0
    for trial in range(16):
        proc, err_file = _lm_eval_process(tmp_path, model_dir, "lambada_local", f"t{trial}")
        for line in proc.stdout:
            if line.startswith("|lambada_local"):
                time.sleep(0.03 * (trial % 8))  # into the table, after it, and into the shutdown
                proc.send_signal(signal.SIGINT)
                break
        proc.stdout.read()
        code = proc.wait(timeout=300)
        err = err_file.read_text()
        assert "Traceback" not in err, err[-3000:]
        if code == 0:  # ended before the signal came
            continue
        lines = [x for x in err.split("\n") if x.strip()]
        assert code == 130 and lines[-1].startswith("stopped by Ctrl-C (SIGINT)"), err[-3000:]
        assert sum(x.startswith(("error:", "stopped by")) for x in lines) == 1
        landed += 1
        if landed == 5:
            break
    assert landed == 5


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "lambada" / "lambada_test.jsonl").exists(), reason="needs ../shared/data")
def test_ctrl_c_during_generation_closes_the_bar_before_its_line(tmp_path, model_dir):
    """Reported: a Ctrl-C during generate_until printed the stop line inside lm_eval's progress bar, which
    was then redrawn below it. The bar is closed first: the stop is the last line, a line of its own."""
    import signal
    import time

    proc, err_file = _lm_eval_process(tmp_path, model_dir, "lambada_local_cloze", "gen")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and "generate_until" not in err_file.read_text():
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    code = proc.wait(timeout=300)
    err = err_file.read_text()
    lines = [x for x in err.split("\n") if x.strip()]
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert lines[-1].startswith("stopped by Ctrl-C (SIGINT)"), err[-3000:]


def _cloze_responses(tmp_path, model_dir, name: str, *extra: str) -> tuple[dict, list]:
    """`aogpt lm-eval` on 8 documents of the local LAMBADA cloze task (generate_until): its results and each
    document's generated responses (--log_samples)."""
    task = (ROOT / "lm_eval_tasks" / "lambada_local_cloze.yaml").read_text()
    (tmp_path / "tasks").mkdir(exist_ok=True)
    task_file = tmp_path / "tasks" / "lambada_local_cloze.yaml"
    task_file.write_text(task.replace("../shared/data/lambada", str(SHARED_DATA / "lambada")))
    out = tmp_path / name
    argv = ["lm-eval", "--model", "aogpt", "--model_args", f"pretrained={model_dir}", "--tasks", "lambada_local_cloze"]
    argv += ["--include_path", str(task_file.parent), "--limit", "8", "--output_path", str(out), "--log_samples"]
    assert main([*argv, *extra]) == 0
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    (results,) = [json.loads(open(f).read())["results"]["lambada_local_cloze"] for f in files if "results_" in f]
    (samples,) = [[json.loads(line) for line in open(f)] for f in files if "samples_" in f]
    return results, [sample["resps"] for sample in sorted(samples, key=lambda x: x["doc_id"])]


@pytest.mark.skipif(not (SHARED_DATA / "lambada" / "lambada_test.jsonl").exists(), reason="needs ../shared/data")
@pytest.mark.slow
def test_generate_until_batched_gives_the_scores_and_texts_of_batch_1(tmp_path, model_dir, monkeypatch):
    """The cloze task through `aogpt lm-eval`, sampled (--gen_kwargs): at --batch_size 4 every document gets
    the text it gets at --batch_size 1, so the scores are equal; another seed samples other texts (the
    comparison can fail)."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    sampled = ["--gen_kwargs", "do_sample=True,temperature=1.0"]
    one = _cloze_responses(tmp_path, model_dir, "b1", "--batch_size", "1", *sampled)
    four = _cloze_responses(tmp_path, model_dir, "b4", "--batch_size", "4", *sampled)
    assert one == four
    responses = one[1]
    assert len(responses) == 8 and all(r[0][0].strip() for r in responses)  # every document generated text
    _, reseeded = _cloze_responses(tmp_path, f"{model_dir},seed=1", "reseeded", "--batch_size", "4", *sampled)
    assert reseeded != responses


@pytest.mark.parametrize(
    ("model_args", "message"),
    [
        ("pretrained={dir},bogus_key=1", "model_args bogus_key=1 is not an aogpt model argument; allowed: pretrained,"),
        pytest.param("order=l2r", "model_args has no pretrained=OUT_DIR", marks=pytest.mark.slow),
        ("pretrained={missing}", "model directory '{missing}' does not exist"),  # not blamed on the device
        pytest.param(
            "pretrained={dir},verify=maybe",
            "model_args verify='maybe' is not allowed; allowed: true, false",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_bad_model_args_through_aogpt_lm_eval_are_one_line(capsys, tmp_path, model_dir, model_args, message):
    missing = str(tmp_path / "no-such-model")
    model_args = model_args.format(dir=model_dir, missing=missing)
    code = main(["lm-eval", "--model", "aogpt", "--model_args", model_args, "--tasks", "lambada_openai"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err[-2000:]
    assert message.format(missing=missing) in errors[0]


def test_batch_size_in_model_args_moves_to_lm_evals_flag_or_is_refused_with_both_values(capsys, model_dir):
    """lm_eval hands the model its own --batch_size: given in model_args alone it becomes that flag; given in
    both, one line names both values (it was refused whatever lm_eval's flag said, with an empty value)."""
    args = ["--model", "aogpt", "--model_args", "pretrained=D,batch_size=4,order=l2r", "--tasks", "t"]
    assert lm_eval_argv(args) == [
        *["--model", "aogpt", "--model_args", "pretrained=D,order=l2r", "--tasks", "t"],
        *["--batch_size", "4", "--device", "auto"],
    ]
    code = main(["lm-eval", *args[:2], "--model_args", f"pretrained={model_dir},batch_size=4", "--batch_size", "8"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "Traceback"))]
    assert code == 2 and errors == [
        "error: model_args batch_size=4 and lm_eval's --batch_size 8 both set the batch size; give it once, as "
        "--batch_size"
    ]


def test_verify_false_loads_a_changed_folder_that_verify_refuses(tmp_path, model_dir):
    import shutil

    changed = tmp_path / "changed"
    shutil.copytree(model_dir, changed)
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match="does not match the sha256 recorded in its config.json"):
        AOGPTLM(pretrained=str(changed))
    AOGPTLM(pretrained=str(changed), verify=False)


def test_an_unknown_task_is_one_line_naming_it(capsys, model_dir):
    """Reported: `aogpt lm-eval --tasks lambada_nosuch` ended in lm_eval's ValueError traceback."""
    code = main(["lm-eval", "--model", "aogpt", "--model_args", f"pretrained={model_dir}", "--tasks", "lambada_nosuch"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "Traceback"))]
    assert code == 2 and errors == [
        "error: --tasks: lm_eval has no task lambada_nosuch; list them with `aogpt lm-eval ls tasks` (a task of your "
        "own: --include_path FOLDER, e.g. lambada_local with --include_path lm_eval_tasks)"
    ]


def test_lm_evals_connection_error_is_one_line(capsys, monkeypatch, model_dir):
    import lm_eval.__main__

    def offline():
        raise ConnectionError("Couldn't reach 'EleutherAI/lambada_openai' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", offline)
    assert main(["lm-eval", "--model", "aogpt", "--model_args", f"pretrained={model_dir}"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: lm_eval could not fetch a task's data: Couldn't reach 'EleutherAI/lambada_openai' on the Hub"
    )


@pytest.mark.slow
def test_a_documented_task_whose_data_cannot_be_fetched_is_one_line(tmp_path, model_dir):
    """Reported: `--tasks lambada_openai` offline ended in lm_eval's ConnectionError traceback."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [sys.executable, "-m", "aogpt_plugin.cli", "lm-eval", "--model", "aogpt"]
        + ["--model_args", f"pretrained={model_dir}", "--tasks", "lambada_openai", "--limit", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "Traceback"))]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(
        "error: lm_eval could not fetch a task's data: Couldn't reach 'EleutherAI/lambada_openai'"
    )
    assert errors[0].endswith(
        "or use a local task: --tasks lambada_local --include_path lm_eval_tasks (docs/evaluation.md)"
    )
