"""`aogpt bench train` measures both variants in one run and rejects bad arguments in one line."""

from __future__ import annotations

import argparse
import json

import pytest

from aogpt_plugin.bench import train_step as train_bench
from aogpt_plugin.errors import UserError


def parse(argv):
    parser = argparse.ArgumentParser()
    train_bench.add_to(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_reports_ao_and_ar_step_times_and_their_ratio(capsys):
    args = parse(["--flavor", "debugmodel", "--seq-len", "16", "--batch", "2", "--steps", "1", "--rounds", "1"])
    args.json = True
    assert train_bench.run(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["median_step_ms"]) == {"ar", "ao"} and min(out["median_step_ms"].values()) > 0
    assert out["ao_vs_ar_step_time_ratio"] == pytest.approx(
        out["median_step_ms"]["ao"] / out["median_step_ms"]["ar"], rel=1e-2
    )
    assert out["seq_len"] == 16 and out["device"].startswith("cpu (")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--flavor", "huge"], "--flavor 'huge' is unknown"),
        (["--seq-len", "9999"], "--seq-len 9999 is outside 2..256"),
        (["--variants", "ar,xl"], "--variants 'ar,xl' is not a comma list"),
        (["--batch", "0"], "--batch 0 must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train_bench.check_args(parse(argv))
