"""`aogpt eval ppl ...`, `aogpt eval genppl ...` and `aogpt eval data ...` (see docs/evaluation.md)."""

from __future__ import annotations

from . import data_command, genppl_command, ppl_command


def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="zero-shot perplexity (ppl), generation perplexity (genppl), benchmark counts (data)"
    )
    sub = p.add_subparsers(dest="eval_command", required=True, metavar="{ppl,genppl,data}")
    ppl_command.add_to(sub)
    genppl_command.add_to(sub)
    data_command.add_to(sub)
