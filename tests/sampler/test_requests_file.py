"""sampler/requests_file.py: a requests file read and checked line by line before any sampling, batches of
requests that share their run options, and a results file written in input order that a re-run resumes."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest
import torch

from aogpt_plugin.errors import DiskFullError, UserError
from aogpt_plugin.sampler.request import SampleRequest, check_requests, sample_batches
from aogpt_plugin.sampler.requests_file import (
    PER_RUN,
    PER_SAMPLE,
    TYPES,
    OrderedResults,
    RequestLine,
    batches,
    made_from,
    read_requests,
)


def write_lines(path, lines) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_requests_are_read_in_order_with_their_line_numbers(tmp_path):
    path = write_lines(
        tmp_path / "r.jsonl",
        [{"prompt": "The", "seed": 1}, "", {"infill": {"0": "A"}, "length": 16, "top_p": 0.9}, {"order": [2, 0, 1]}],
    )
    requests = read_requests(path)
    assert [(r.index, r.line) for r in requests] == [(0, 1), (1, 3), (2, 4)]
    assert requests[1].fields == {"infill": {"0": "A"}, "length": 16, "top_p": 0.9}


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "r.jsonl line 2: not a JSON object"),
        ("[1, 2]", "r.jsonl line 2: a request is a JSON object (a dict), got list"),
        ('{"promt": "x"}', "r.jsonl line 2, field 'promt' is not a request field; allowed: prompt, infill, seed"),
        ('{"seed": "3"}', "r.jsonl line 2, field 'seed' must be an integer, got \"3\""),
        ('{"seed": true}', "r.jsonl line 2, field 'seed' must be an integer, got true"),
        ('{"top_p": "high"}', "r.jsonl line 2, field 'top_p' must be an integer or a number, got \"high\""),
        ('{"order": 5}', "r.jsonl line 2, field 'order' must be a string or a list, got 5"),
    ],
)
def test_a_bad_line_is_one_error_naming_its_line_and_field(tmp_path, line, message):
    path = write_lines(tmp_path / "r.jsonl", [{"seed": 0}, line, {"seed": 2}])
    with pytest.raises(UserError, match=f"^{re.escape(str(tmp_path))}/" + re.escape(message)):
        read_requests(path)


def test_a_missing_or_empty_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match="is not a file"):
        read_requests(str(tmp_path / "none.jsonl"))
    with pytest.raises(UserError, match="holds no request"):
        read_requests(write_lines(tmp_path / "e.jsonl", ["", "  "]))


def test_batches_share_their_run_options_and_keep_input_order(tmp_path):
    lines = [{"seed": i, **({"steps": 4} if i % 3 == 0 else {})} for i in range(7)]
    requests = read_requests(write_lines(tmp_path / "r.jsonl", lines))
    assert [[r.index for r in b] for b in batches(requests, 2)] == [[0, 3], [6], [1, 2], [4, 5]]


def _made_from(total: int, seed: int = 0) -> list[dict]:
    return [
        made_from(RequestLine(i, i + 1, {"length": 8 + i}), {"seed": seed + i, "steps": None}) for i in range(total)
    ]


def test_results_come_out_in_input_order_whatever_order_they_finish_in(tmp_path):
    out = tmp_path / "out.jsonl"
    results = OrderedResults(str(out), _made_from(4))
    results.add(2, {"text": "c"})
    results.add(1, {"text": "b"})
    assert out.read_text() == "" and results.written == 0
    results.add(0, {"text": "a"})
    assert [json.loads(x)["text"] for x in out.read_text().splitlines()] == ["a", "b", "c"]
    results.add(3, {"text": "d"})
    results.close()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["index"] for x in lines] == [0, 1, 2, 3]
    assert lines[3]["request"] == {"length": 11} and lines[3]["options"] == {"seed": 3, "steps": None}


def test_a_rerun_keeps_the_complete_lines_and_drops_one_cut_mid_write(tmp_path):
    out = tmp_path / "out.jsonl"
    first = OrderedResults(str(out), _made_from(4))
    first.add(0, {"text": "a"})
    first.add(1, {"text": "b"})
    first.close()
    out.write_text(out.read_text() + '{"index": 2, "te')
    results = OrderedResults(str(out), _made_from(4))
    assert results.done == {0, 1} and results.written == 2
    results.add(2, {"text": "c"})
    results.close()
    assert [json.loads(x)["text"] for x in out.read_text().splitlines()] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("hello\n", "line 1 is not a result of `aogpt sample --requests`"),
        ('{"index": 1}\n', "line 1 holds request 1, expected 0: it was written for other requests"),
        ('{"index": 0}\n{"index": 0}\n', "line 1 answers another request: its request is not recorded"),
        ('{"index": 0}\n{"index": 1}\n{"index": 2}\n', "line 1 answers another request"),
    ],
)
def test_a_results_file_of_other_requests_is_refused_and_left_as_it_was(tmp_path, content, message):
    out = tmp_path / "out.jsonl"
    out.write_text(content)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OrderedResults(str(out), _made_from(2))
    assert out.read_text() == content


@pytest.mark.parametrize(
    "other, message",
    [
        (
            [made_from(RequestLine(i, i + 1, {"length": 9 + i}), {"seed": i, "steps": None}) for i in range(2)],
            "line 1 answers another request: its request's 'length' is 9, this run's is 8",
        ),
        (_made_from(2, seed=5), "line 1 answers another request: its seed is 5, this run's is 0"),
        (
            [
                made_from(RequestLine(i, i + 1, {"length": 8 + i, "prompt": "x"}), {"seed": i, "steps": None})
                for i in range(2)
            ],
            "line 1 answers another request: its request's 'prompt' is \"x\", this run's is not given",
        ),
    ],
)
def test_lines_made_from_other_requests_or_options_are_refused_naming_the_first_difference(tmp_path, other, message):
    """The same number of lines is not enough: a line is kept only when it records this run's request (its own
    fields) and options; otherwise one error names the line, the field, the old and the new value, and the file
    is left as it was."""
    out = tmp_path / "out.jsonl"
    first = OrderedResults(str(out), other)
    first.add(0, {"text": "a"})
    first.close()
    content = out.read_text()
    with pytest.raises(UserError, match=re.escape(message) + ".*give another --out, or delete .* to start afresh"):
        OrderedResults(str(out), _made_from(2))
    assert out.read_text() == content


def test_a_second_writer_in_another_process_is_refused_naming_the_first(tmp_path):
    """One writer per results file: another process opening it while the first holds it gets one line with
    the first's pid; once the first closes (or dies: the kernel drops its lock) the file can be taken."""
    import subprocess
    import sys

    out = tmp_path / "out.jsonl"
    results = OrderedResults(str(out), _made_from(2))
    script = (
        "import sys; from aogpt_plugin.errors import DiskFullError, UserError; from aogpt_plugin.sampler.requests_file import "
        "OrderedResults\ntry:\n    OrderedResults(sys.argv[1], [])\nexcept UserError as e:\n    print(e)"
    )
    other = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=60)
    assert f"is being written by another aogpt process (pid {os.getpid()})" in other.stdout, other.stderr
    results.close()
    again = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=60)
    assert "being written" not in again.stdout and again.returncode == 0, again.stderr


def test_a_full_disk_at_a_write_keeps_the_complete_lines_and_says_so(tmp_path, monkeypatch):
    """The fault injected at the write (a real full disk: tests/sampler/test_cli.py, slow): the cut line is
    taken back, the lines before it are kept, and one DiskFullError says how many and how to go on."""
    import errno

    out = tmp_path / "out.jsonl"
    results = OrderedResults(str(out), _made_from(3))
    results.add(0, {"text": "a"})
    real_write = os.write

    def full(fd, data):
        real_write(fd, data[:10])  # part of the line lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(DiskFullError, match=r"writing --out .* failed \(No space left on device\); its 1 complete "):
        results.add(1, {"text": "b"})
    monkeypatch.undo()
    results.close()
    assert [json.loads(x)["text"] for x in out.read_text().splitlines()] == ["a"]
    assert out.read_text().endswith("\n")


def test_a_request_line_takes_the_fields_of_a_sample_request():
    """The file's fields are the request path's: per-sample ones and the batch's run options, each once."""
    assert set(TYPES) == set(PER_SAMPLE) | set(PER_RUN) and not set(PER_SAMPLE) & set(PER_RUN)
    fields = {f.name for f in dataclasses.fields(SampleRequest)}
    assert set(TYPES) <= fields


def _plan(model):
    from aogpt_plugin.errors import flag_name

    def plan(request, spell=flag_name):
        return request.plan(model.model_args, lambda text: [int(t) for t in text.split()], "cpu", torch.float32, spell)

    return plan


@pytest.mark.parametrize(
    "line, message",
    [
        ({"length": 41}, "line 2, field 'length': length=41 is outside the model's positions; allowed: 1..40"),
        ({"prompt": "5 6", "length": 2}, "line 2, field 'prompt': prompt has 2 tokens, and length=2 leaves no"),
        (
            {"infill": {"spans": [{"start": 50, "tokens": [1]}]}},
            "line 2, field 'infill': infill gives 1 token, up to position 50",
        ),
        ({"infill": [{"start": 0, "tokens": [61]}]}, "line 2, field 'infill': token id 61 is outside the vocabulary"),
        ({"steps": 30, "length": 10}, "line 2, field 'steps': steps=30 is outside the allowed range 1..10"),
        ({"order": [1, 2]}, r"line 2, field 'order': order has shape \(2,\); allowed: \(40,\)"),
        ({"order": "r2l"}, "line 2, field 'order': order='r2l' is not supported"),
        ({"top_p": 1.5}, r"line 2, field 'top_p': top_p=1.5 is outside the allowed range \(0, 1\]"),
        ({"prompt": ""}, "line 2, field 'prompt': prompt is empty"),
        ({"infill": "{bad"}, "line 2, field 'infill': infill is not valid JSON"),
    ],
)
def test_every_bad_value_is_one_error_naming_its_line_and_field(tmp_path, ao_model, line, message):
    path = write_lines(tmp_path / "r.jsonl", [{"seed": 0}, line, {"seed": 2}])
    base = SampleRequest()
    with pytest.raises(UserError, match=f"^{tmp_path}/r.jsonl " + message) as info:
        check_requests(read_requests(path), base, _plan(ao_model), path)
    assert info.value.field in line


def test_requests_that_differ_only_in_run_options_go_to_separate_batches_and_keep_their_tokens(ao_model):
    """sample_batches: row b of each batch is its request; a request's tokens are its own whatever the batch
    size, and a short batch that the static step pads to its fixed shape gives its requests the same tokens."""
    requests = [
        RequestLine(i, None, fields)
        for i, fields in enumerate(
            [{"prompt": "5 6", "length": 12}, {"length": 9, "seed": 40}, {"top_k": 5}, {"order": "l2r", "length": 7}]
        )
    ]

    def tokens_by_request(size, graphs="off"):
        out = {}
        base = SampleRequest(seed=3, graphs=graphs)
        for group, samples in sample_batches(ao_model, requests, base, _plan(ao_model), str, size):
            assert samples.tokens.shape[0] == (size if graphs == "static" else len(group))  # the static step: padded
            out.update({r.index: samples.result.sample_tokens(b) for b, r in enumerate(group)})
        return out

    one = tokens_by_request(1)
    assert one == tokens_by_request(3) == tokens_by_request(3, graphs="static")
    assert [len(one[i]) for i in range(4)] == [12, 9, 40, 7] and one[0][:2] == [5, 6]
    assert one[1] != one[0][: len(one[1])]


@pytest.mark.parametrize(
    "request_",
    [
        SampleRequest(num_samples=3, length=20, prompt="5 6 7"),
        SampleRequest(length=[20, 12, 30], prompt=["5 6 7", None, "1"]),
        SampleRequest(length=[20, 12], prompt="5 6 7"),
    ],
)
def test_the_fewest_tokens_to_fill_is_the_minimum_over_the_samples(ao_model, request_):
    """`aogpt sample`'s first-look steps come from it; a shared length and prompt take no loop over the
    samples (a billion samples is refused by the memory check at once, not after counting them)."""
    plan = _plan(ao_model)(request_)
    each = [n - len(plan.prompt_of(b)) for b, n in enumerate(plan.config.sample_lengths())]
    assert plan.fewest_to_fill() == min(each)
