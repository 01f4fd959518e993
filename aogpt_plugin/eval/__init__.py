"""The paper's evaluations: zero-shot perplexity (left to right, any order, context-order ensembles) and
generation perplexity with unigram entropy; `aogpt eval {ppl,genppl,data}` (docs/evaluation.md).
Imports no torchtitan.

    ppl_command.py / perplexity.py / ensemble.py   zero-shot perplexity: the command, the estimators,
                                                   the context-order ensembles
    genppl_command.py / genppl.py / samples.py     generation perplexity, unigram entropy, samples files
    benchmarks.py / detokenizers.py                the five benchmarks as documents (and `eval data`)
    scorers.py                                     the scoring model: a model folder or hf:NAME
    lm_eval_model.py                               the lm-evaluation-harness model `aogpt`
    verdicts.py                                    the findings' verdict rule (2 standard errors)
"""

from __future__ import annotations

import importlib

EVAL_COMMANDS = (  # each module's add_to adds one `aogpt eval` sub-command; imported only when building it
    "aogpt_plugin.eval.ppl_command",
    "aogpt_plugin.eval.genppl_command",
    "aogpt_plugin.eval.benchmarks",
)


def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="zero-shot perplexity (ppl), generation perplexity (genppl), benchmark counts (data)"
    )
    sub = p.add_subparsers(dest="eval_command", required=True, metavar="{ppl,genppl,data}")
    for name in EVAL_COMMANDS:
        importlib.import_module(name).add_to(sub)
