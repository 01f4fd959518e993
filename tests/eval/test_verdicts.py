"""The findings' verdict rule on hand-made numbers: 2 SE either way, else inconclusive."""

import math

import pytest

from aogpt_plugin.eval.verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    REPRODUCED,
    Measurement,
    difference,
    measure,
    verdict,
    verdict_text,
)


def test_one_run_keeps_its_evaluation_error():
    assert measure([5.0], [0.1]) == Measurement(5.0, 0.1, 1)


def test_seed_spread_counts_when_it_exceeds_the_evaluation_noise():
    m = measure([5.0, 5.4], [0.01, 0.01])  # seeds disagree far more than the evaluation noise
    assert m.mean == pytest.approx(5.2) and m.se == pytest.approx(math.sqrt(0.08 / 2))
    quiet = measure([5.0, 5.001], [0.1, 0.1])  # never below the evaluation noise
    assert quiet.se == pytest.approx(math.sqrt(0.01 / 2))


def test_difference_adds_errors_in_quadrature():
    d = difference(Measurement(4.0, 0.03), Measurement(4.1, 0.04))
    assert d.mean == pytest.approx(-0.1) and d.se == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("mean", "se", "expect", "result"),
    [
        (-0.30, 0.10, "negative", REPRODUCED),  # 3 SE the claimed way
        (0.30, 0.10, "negative", CONTRADICTED),  # 3 SE the other way
        (-0.15, 0.10, "negative", INCONCLUSIVE),  # 1.5 SE: must not be called reproduced
        (0.15, 0.10, "negative", INCONCLUSIVE),
        (0.25, 0.10, "positive", REPRODUCED),
        (-0.199, 0.10, "positive", INCONCLUSIVE),  # just under 2 SE
        (0.0, 0.0, "positive", INCONCLUSIVE),
        (0.3, 0.0, "positive", INCONCLUSIVE),  # no standard error (one chunk): no claim
    ],
)
def test_the_two_standard_error_rule(mean, se, expect, result):
    assert verdict(Measurement(mean, se), expect) == result


def test_two_noisy_seeds_make_a_real_looking_gap_inconclusive():
    a = measure([4.00, 4.20], [0.005, 0.005])
    b = measure([4.15, 4.35], [0.005, 0.005])
    d = difference(a, b)  # -0.15 looks large, but seeds spread by 0.2
    assert verdict(d, "negative") == INCONCLUSIVE
    assert "**inconclusive** (difference -0.1500 ± 0.1414 SE" in verdict_text(d, "negative")
