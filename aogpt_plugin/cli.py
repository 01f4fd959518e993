"""The `aogpt` command: convert, tokenizer, sample, eval, bench, lm-eval.

Each sub-command lives next to the code it drives and adds itself with `add_to(subparsers)`; only
the module of the command being run is imported, so `aogpt` and `aogpt --help` list the commands
without importing torch. Bad input prints one `error:` line and exits with status 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import UserError

COMMANDS = {  # name: (module whose add_to defines it, one-line help); lm-eval: run_lm_eval, lm_eval parses
    "convert": ("aogpt_plugin.convert", "torchtitan DCP checkpoint -> model folder (safetensors + config.json)"),
    "tokenizer": ("aogpt_plugin.data.tokenizer_training", "train a byte-level BPE tokenizer.json on a corpus"),
    "sample": ("aogpt_plugin.sampler.cli", "generate text from a converted model (any order, KV cache)"),
    "eval": ("aogpt_plugin.eval", "zero-shot perplexity, generation perplexity, benchmark counts"),
    "bench": ("aogpt_plugin.bench", "measure training step time (AO vs AR) or sampler speed"),
    "lm-eval": (None, "lm-evaluation-harness with the `aogpt` model registered (ARGS go to lm_eval)"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single `error:` line (exit 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}\n")


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser; `command` gets its full sub-parser, the rest a stub that only names it (enough for
    the command list, which `build_parser("")` prints)."""
    parser = OneLineParser(prog="aogpt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if module and name == command:
            importlib.import_module(module).add_to(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def run_lm_eval(argv: list[str]) -> int:
    """`aogpt lm-eval ARGS`: lm-evaluation-harness's own command line with the `aogpt` model registered.

        aogpt lm-eval --model aogpt --model_args pretrained=OUT_DIR --tasks lambada_openai --device cpu

    ARGS go to lm_eval unchanged (`aogpt lm-eval --help` shows lm_eval's help). lm_eval finds models
    only in its registry and has no plugin entry points, so this imports aogpt_plugin.eval.lm_eval_model
    (which registers "aogpt") and then runs lm_eval's main.
    """
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise UserError("`aogpt lm-eval` needs the lm-eval package: pip install -e '.[eval]'") from None
    from lm_eval.__main__ import cli_evaluate

    from .eval import lm_eval_model  # noqa: F401  (registers "aogpt")

    saved = sys.argv
    sys.argv = ["lm_eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:  # the command list, not a usage error
        build_parser("").print_help()
        return 0
    command = argv[0] if argv[0] in COMMANDS else ""
    # text a terminal's encoding cannot show is escaped, not a crash after the work is done
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        if command == "lm-eval":  # lm_eval parses its own arguments
            return run_lm_eval(argv[1:])
        args = build_parser(command).parse_args(argv)
        return int(args.run(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `aogpt sample | head -1`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
