"""sampler/requests_file.py: a requests file read and checked line by line before any sampling, batches of
requests that share their run options, and a results file written in input order that a re-run resumes."""

from __future__ import annotations

import json

import pytest

from aogpt_plugin.errors import UserError
from aogpt_plugin.sampler.requests_file import OrderedResults, batches, read_requests


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
        ("[1, 2]", "r.jsonl line 2: a request is a JSON object, got list"),
        ('{"promt": "x"}', "r.jsonl line 2, field 'promt' is not a request field; allowed: prompt, infill, seed"),
        ('{"seed": "3"}', "r.jsonl line 2, field 'seed' must be an integer, got \"3\""),
        ('{"seed": true}', "r.jsonl line 2, field 'seed' must be an integer, got true"),
        ('{"top_p": "high"}', "r.jsonl line 2, field 'top_p' must be an integer or a number, got \"high\""),
        ('{"order": 5}', "r.jsonl line 2, field 'order' must be a string or a list, got 5"),
    ],
)
def test_a_bad_line_is_one_error_naming_its_line_and_field(tmp_path, line, message):
    path = write_lines(tmp_path / "r.jsonl", [{"seed": 0}, line, {"seed": 2}])
    with pytest.raises(UserError, match=f"^{tmp_path}/" + message.replace("[", r"\[").replace("]", r"\]")):
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


def test_results_come_out_in_input_order_whatever_order_they_finish_in(tmp_path):
    out = tmp_path / "out.jsonl"
    results = OrderedResults(str(out), total=4)
    results.add(2, {"text": "c"})
    results.add(1, {"text": "b"})
    assert out.read_text() == "" and results.written == 0
    results.add(0, {"text": "a"})
    assert [json.loads(x)["text"] for x in out.read_text().splitlines()] == ["a", "b", "c"]
    results.add(3, {"text": "d"})
    results.close()
    assert [json.loads(x)["index"] for x in out.read_text().splitlines()] == [0, 1, 2, 3]


def test_a_rerun_keeps_the_complete_lines_and_drops_one_cut_mid_write(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"index": 0, "text": "a"}\n{"index": 1, "text": "b"}\n{"index": 2, "te')
    results = OrderedResults(str(out), total=4)
    assert results.done == {0, 1} and results.written == 2
    results.add(2, {"text": "c"})
    results.close()
    assert [json.loads(x)["text"] for x in out.read_text().splitlines()] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("hello\n", "line 1 is not a result of `aogpt sample --requests`"),
        ('{"index": 1}\n', "line 1 holds request 1, expected 0: it was written for other requests"),
        ('{"index": 0}\n{"index": 0}\n', "line 2 holds request 0, expected 1"),
        ('{"index": 0}\n{"index": 1}\n{"index": 2}\n', "line 3 holds request 2, of 2 requests"),
    ],
)
def test_a_results_file_of_other_requests_is_refused_and_left_as_it_was(tmp_path, content, message):
    out = tmp_path / "out.jsonl"
    out.write_text(content)
    total = 2
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OrderedResults(str(out), total=total)
    assert out.read_text() == content
