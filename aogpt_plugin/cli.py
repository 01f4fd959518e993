"""The `aogpt` command: convert, tokenizer, sample, eval, bench.

Each sub-command lives next to the code it drives and adds itself with `add_to(subparsers)`.
Bad input prints one `error:` line and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import UserError

COMMAND_MODULES = (
    "aogpt_plugin.convert",
    "aogpt_plugin.data.tokenizer",
    "aogpt_plugin.sampler.cli",
    "aogpt_plugin.eval.cli",
    "aogpt_plugin.bench",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single `error:` line (exit 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="aogpt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_to(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # text a terminal's encoding cannot show is escaped, not a crash after the work is done
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        return int(args.run(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `aogpt sample | head -1`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
