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


def test_reports_rounds_and_the_median_of_per_round_ratios_with_their_range(capsys):
    args = parse(["--flavor", "debugmodel", "--seq-len", "16", "--batch", "2", "--steps", "2", "--rounds", "3"])
    args.json = True
    assert train_bench.run(args) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert set(out["median_step_ms"]) == {"ar", "ao"} and min(out["median_step_ms"].values()) > 0
    per_round = sorted(r["ao"] / r["ar"] for r in out["rounds"])
    assert len(per_round) == 3 and out["ao_vs_ar_step_time_ratio"] == pytest.approx(per_round[1], rel=1e-3)
    assert out["ratio_range"] == pytest.approx([per_round[0], per_round[2]], rel=1e-3)
    assert out["seq_len"] == 16 and out["device"].startswith("cpu (")
    assert "round 3/3" in captured.err  # progress while it runs
    assert out["mfu"] is None and out["peak_tflops"] is None  # no MFU on a CPU
    assert out["tflops"]["ao"] > 0


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
