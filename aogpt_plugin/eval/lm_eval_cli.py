"""`aogpt lm-eval ARGS`: lm-evaluation-harness's own command line, with the `aogpt` model registered.

    aogpt lm-eval --model aogpt --model_args pretrained=OUT_DIR --tasks lambada_openai --device cpu

ARGS go to lm_eval unchanged (`aogpt lm-eval --help` shows lm_eval's help). lm_eval finds models
only in its registry and has no plugin entry points, so this command imports
aogpt_plugin.eval.lm_eval_model (which registers "aogpt") and then runs lm_eval's main.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import UserError


def add_to(subparsers) -> None:
    p = subparsers.add_parser("lm-eval", help="lm-evaluation-harness with the `aogpt` model registered", add_help=False)
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, help="arguments for lm_eval")


def run(argv: list[str]) -> int:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise UserError("`aogpt lm-eval` needs the lm-eval package: pip install -e '.[eval]'") from None
    from lm_eval.__main__ import cli_evaluate

    from . import lm_eval_model  # noqa: F401  (registers "aogpt")

    saved = sys.argv
    sys.argv = ["lm_eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0
