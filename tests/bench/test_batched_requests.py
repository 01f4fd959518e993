"""`aogpt bench requests`: its mixed requests, every batch size giving every request the same tokens, the
JSON a docs row is made from, and one-line errors."""

from __future__ import annotations

import argparse
import json

import pytest

from aogpt_plugin.bench import batched_requests as bench_command
from aogpt_plugin.bench.batched_requests import mixed_requests, parse_sizes
from aogpt_plugin.errors import UserError


def parse(argv):
    parser = argparse.ArgumentParser()
    bench_command.add_to(parser.add_subparsers())
    return parser.parse_args(["requests", *argv])


def test_the_requests_mix_prompts_infill_spans_and_nothing():
    requests = mixed_requests(60, 64, 1000)
    assert requests == mixed_requests(60, 64, 1000)  # deterministic
    assert [r["seed"] for r in requests] == list(range(60))
    assert all(32 <= r["length"] <= 64 for r in requests)
    kinds = [len(r.get("infill", [])) for r in requests]
    assert kinds.count(0) >= 15 and kinds.count(1) == 20 and kinds.count(2) >= 15
    for r in requests:
        spans = r.get("infill", [])
        covered = [s["start"] + k for s in spans for k in range(len(s["tokens"]))]
        assert len(covered) == len(set(covered)) and all(0 <= p < r["length"] for p in covered)
        assert len(covered) < r["length"]
        if len(spans) == 1:
            assert spans[0]["start"] == 0 and 4 <= len(spans[0]["tokens"]) <= 16  # a prompt


def test_every_batch_size_gives_every_request_its_tokens(capsys):
    argv = ["--flavor", "debugmodel", "--requests", "7", "--n", "16", "--batch-sizes", "1,3", "--json"]
    assert bench_command.run(parse(argv)) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["same_tokens_at_every_batch_size"] is True
    assert set(result["tokens_per_second"]) == {"1", "3"} and all(v > 0 for v in result["tokens_per_second"].values())
    assert result["command"] == "aogpt bench requests " + " ".join(argv[:-1]) + " --repeats 1 --json"
    assert (result["model"], result["n"], result["graphs"], result["requests"]) == ("debugmodel", 16, "off", 7)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch-sizes", "1,0"], "--batch-sizes '1,0' is not allowed; allowed: distinct integers >= 1"),
        (["--batch-sizes", "8,8"], "--batch-sizes '8,8' is not allowed"),
        (["--n", "300"], "--n 300 is outside 16..256"),
        (["--requests", "0"], "--requests 0 must be >= 1"),
        (["--flavor", "huge"], "--flavor 'huge' is unknown"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        bench_command.run(parse(argv))


def test_parse_sizes_keeps_the_order():
    assert parse_sizes("1,8,32") == [1, 8, 32] and parse_sizes("4") == [4]
