"""The `aogpt` command: train, convert, export, tokenizer, data, sample, eval, bench, lm-eval.

Each sub-command lives next to the code it drives and adds itself with `add_to(subparsers)`; only
the module of the command being run is imported, so `aogpt` and `aogpt --help` list the commands
without importing torch. Bad input prints one `error:` line and exits with status 2, no traceback.
"""

from __future__ import annotations

import argparse
import atexit
import difflib
import importlib
import os
import re
import sys
import threading
from typing import NoReturn

from .errors import (
    UserError,
    exit_status,
    interrupted_line,
    restore_signals,
    stop_at_once_on_signals,
    stop_quietly_on_signals,
)

COMMANDS = {  # name: (module whose add_to defines it, one-line help); train, lm-eval: their own parsers
    "train": (None, "train with torchtitan: `python -m aogpt_plugin.train ARGS` (torchrun -m ... for several)"),
    "convert": (
        "aogpt_plugin.convert",
        "torchtitan DCP checkpoint or Hugging Face GPT-2 folder -> model folder (safetensors + config.json)",
    ),
    "export": ("aogpt_plugin.hf_export", "model folder or checkpoint -> Hugging Face folder (trust_remote_code)"),
    "tokenizer": ("aogpt_plugin.data.tokenizer_training", "train a byte-level BPE tokenizer.json on a corpus"),
    "data": ("aogpt_plugin.data.prepare", "fetch a corpus once into jsonl shards + manifest, to train offline"),
    "sample": ("aogpt_plugin.sampler.cli", "generate text from a converted model (any order, KV cache)"),
    "serve": (
        "aogpt_plugin.serve",
        "an OpenAI-compatible completions server: continuous batching, infilling through `suffix`",
    ),
    "eval": ("aogpt_plugin.eval", "zero-shot perplexity, generation perplexity, benchmark counts"),
    "bench": ("aogpt_plugin.bench", "measure training step time (AO vs AR) or sampler speed"),
    "lm-eval": (None, "lm-evaluation-harness with the `aogpt` model registered (ARGS go to lm_eval)"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single `error:` line (exit 2), and an unknown option is named
    with the closest option the command has."""

    argv: list[str] = []  # the command line being parsed, for the unknown-option hint below

    def error(self, message: str):
        if message.startswith("the following arguments are required"):  # often a misspelt option
            options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            unknown = [
                a
                for a in OneLineParser.argv
                if a.startswith("--") and not any(o.startswith(a.split("=", 1)[0]) for o in options)
            ]
            if unknown:
                message = f"{unrecognized_message(unknown[:1], options)} ({message})"
        self.exit(2, f"error: {self.prog}: {message}\n")

    def parse_args(self, args=None, namespace=None):
        OneLineParser.argv = list(sys.argv[1:] if args is None else args)
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            chain = command_chain(self, args)
            options = [o for p in chain for a in p._actions for o in a.option_strings if o.startswith("--")]
            chain[-1].error(unrecognized_message(extras, options))
        return args


def command_chain(parser: argparse.ArgumentParser, namespace) -> list[argparse.ArgumentParser]:
    """The parser and the sub-command parsers `namespace` was parsed with (aogpt, eval, ppl)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(namespace, action.dest, None) or "")
            if sub is not None:
                return [parser, *command_chain(sub, namespace)]
    return [parser]


def unrecognized_message(extras: list[str], options: list[str]) -> str:
    """`unrecognized argument --num-smaples; did you mean --num-samples?` (difflib's closest option)."""
    bad = next((a for a in extras if a.startswith("-")), extras[0])
    name = bad.split("=", 1)[0]
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    rest = len(extras) - 1
    more = f" (and {rest} more: {' '.join(a for a in extras if a != bad)})" if rest and not close else ""
    return f"unrecognized argument {bad}{hint}{more}"


def version_line() -> str:
    """`aogpt 0.1.0 (torch 2.13.0+cpu, torchtitan 0.2.2, Python 3.11.7)`: the installed packages' versions,
    read from their metadata (nothing imported: it answers at once)."""
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    python = ".".join(map(str, sys.version_info[:3]))
    return f"aogpt {version('aogpt')} (torch {version('torch')}, torchtitan {version('torchtitan')}, Python {python})"


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser; `command` gets its full sub-parser, the rest a stub that only names it (enough for
    the command list, which `build_parser("")` prints)."""
    parser = OneLineParser(prog="aogpt", description=__doc__.splitlines()[0])
    parser.add_argument(
        "-V", "--version", action="store_true", help="print the versions of aogpt, torch and torchtitan"
    )
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
    sys.argv = ["lm_eval", *lm_eval_argv(argv)]
    try:
        cli_evaluate()
    except TypeError as e:  # lm_eval passes batch_size/device itself: the same key in model_args clashes
        clash = re.search(r"got multiple values for keyword argument '(\w+)'", str(e))
        if clash is None:
            raise
        key = clash.group(1)
        raise UserError(f"model_args {key}= is also set by lm_eval's own --{key}; give it once, as --{key}") from None
    except ValueError as e:  # lm_eval's own check of --tasks
        missing = re.match(r"Tasks not found: (.*)", str(e))
        if missing is None:
            raise
        raise UserError(
            f"--tasks: lm_eval has no task {missing.group(1)}; list them with `aogpt lm-eval ls tasks` (a task of "
            "your own: --include_path FOLDER, e.g. lambada_local with --include_path lm_eval_tasks)"
        ) from None
    except ConnectionError as e:  # a task's data set is fetched from the Hugging Face hub
        raise UserError(
            f"lm_eval could not fetch a task's data: {e}; run where the hub can be reached once (the data is then "
            "cached), or use a local task: --tasks lambada_local --include_path lm_eval_tasks (docs/evaluation.md)"
        ) from None
    finally:
        sys.argv = saved
    return 0


def lm_eval_argv(argv: list[str]) -> list[str]:
    """lm_eval's command line for the aogpt model. lm_eval's device defaults to cuda:0 even where there is
    none; no --device means the machine's (`auto`: cuda if available, else cpu), as in every aogpt command.
    lm_eval hands the model its own --batch_size and --device, so the same key in --model_args would clash:
    given there alone, it moves to lm_eval's flag; given in both, one UserError names both values."""
    models = [b for a, b in zip(argv, argv[1:], strict=False) if a == "--model"]
    models += [a.split("=", 1)[1] for a in argv if a.startswith("--model=")]
    if "aogpt" not in models or "-h" in argv or "--help" in argv:
        return argv
    argv = list(argv)
    for key in ("batch_size", "device"):
        flag = _flag_value(argv, f"--{key}")
        where = next((i for i, a in enumerate(argv[:-1]) if a == "--model_args"), None)
        if where is None:
            continue
        items = argv[where + 1].split(",")
        given = [item for item in items if item.split("=", 1)[0].strip() == key]
        if not given:
            continue
        value = given[-1].split("=", 1)[1] if "=" in given[-1] else ""
        if flag is not None:
            raise UserError(
                f"model_args {key}={value} and lm_eval's --{key} {flag} both set the {key.replace('_', ' ')}; "
                f"give it once, as --{key}"
            )
        argv[where + 1] = ",".join(item for item in items if item not in given)
        argv += [f"--{key}", value]
    if _flag_value(argv, "--device") is None:
        argv += ["--device", "auto"]
    return argv


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `flag` on lm_eval's command line (`--flag V` or `--flag=V`), or None."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


class OutputError(Exception):
    """Writing a command's results to stdout failed (a full disk, /dev/full, an I/O error)."""


class _GuardedStdout:
    """sys.stdout, but a failed write or flush is an OutputError, told apart from every other OSError
    (a closed pipe stays a BrokenPipeError: the reader left, nothing went wrong)."""

    def __init__(self, stream):
        self._stream = stream

    def _guard(self, method, *args):
        try:
            return method(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(e.strerror or str(e)) from None

    def write(self, text):
        return self._guard(self._stream.write, text)

    def flush(self):
        return self._guard(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """After a failed or refused write, what is still buffered goes nowhere instead of failing again
    (with a traceback) when the interpreter exits."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def close_progress_bars() -> None:
    """Every tqdm bar still drawn (a library's, left open by a stop) closed, so the next line is a line of its
    own and no bar is redrawn below it."""
    tqdm_module = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm_module, "tqdm", None), "_instances", ())):
        try:
            bar.close()
        except Exception:  # noqa: BLE001 - a bar that cannot redraw is left as it is
            pass


def main(argv: list[str] | None = None) -> int:
    """`aogpt ARGS`. As the installed command (argv None) a Ctrl-C or SIGTERM at any moment ends it in one line
    and 128 + the signal: during the work the command stops (its writers clean up), after it the process ends
    without raising into the clean-up (errors.stop_quietly_on_signals). Called with argv (tests, scripts), the
    caller's signal handlers are put back when it returns."""
    entry = argv is None
    previous: dict = {}
    try:  # from the handlers' first moment: a signal anywhere after them is answered below, in one line
        previous = stop_at_once_on_signals()  # Ctrl-C, SIGTERM: writers remove their temporaries, then one line
        code = _main(sys.argv[1:] if entry else list(argv))
    except KeyboardInterrupt as e:  # landed in _main's own clean-up, after its work
        code = _finish(interrupted_line(e), exit_status(e))
    finally:
        if not entry:
            restore_signals(previous)
    if entry:
        _exit_process(code)
    return code


def _exit_process(code: int) -> NoReturn:
    """The installed command's end: Python's shutdown (other threads joined, atexit callbacks, streams
    flushed) without its last stage, which puts the default signal handlers back, so that a Ctrl-C landing
    there killed the process with no line (status -2); our quiet handlers stay until the exit."""
    threading._shutdown()  # Python's own first stage: the thread-exit hooks (which stop idle executor workers,
    # e.g. inductor's compile pool), then the joins
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe or a full disk: the command has reported already
            pass
    os._exit(code)


def _finish(line: str | None, code: int) -> int:
    """The command's last line (None: its output is all there is) and status; signals end it quietly from here."""
    stop_quietly_on_signals(line_out=line is not None)
    if line is not None:
        close_progress_bars()
        print(line, file=sys.stderr, flush=True)
    return code


def _main(argv: list[str]) -> int:
    if not argv:  # the command list, not a usage error
        build_parser("").print_help()
        return 0
    if argv[0] in ("--version", "-V"):
        print(version_line())
        return 0
    command = argv[0] if argv[0] in COMMANDS else ""
    # text a terminal's encoding cannot show is escaped, not a crash after the work is done
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        if command == "lm-eval":  # lm_eval parses its own arguments
            return _finish(None, run_lm_eval(argv[1:]))
        if command == "train" and argv[1:] in (["--help"], ["-h"]):  # aogpt's page, not torchtitan's 900 lines
            from .training.help_page import help_page

            print(help_page())
            return 0
        if command == "train":  # the launcher parses its own (torchtitan's) arguments
            from .train import TRAIN_COMMAND_ENV

            os.environ[TRAIN_COMMAND_ENV] = "aogpt train"  # the resume commands it prints say what the user ran
            os.execv(sys.executable, [sys.executable, "-m", "aogpt_plugin.train", *argv[1:]])
        args = build_parser(command).parse_args(argv)
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a write error shows here, not as a traceback at exit
        return _finish(None, code)
    except UserError as e:
        return _finish(f"error: {e}", 2)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (errors.Interrupted)
        return _finish(interrupted_line(e), exit_status(e))
    except OutputError as e:  # `aogpt sample > /dev/full`
        sys.stdout = stdout
        _silence_stdout()
        return _finish(f"error: cannot write the output to stdout: {e}", 1)
    except BrokenPipeError:  # `aogpt sample | head -1`: the reader has all it wanted
        sys.stdout = stdout
        _silence_stdout()
        return _finish(None, 0)
    finally:
        if isinstance(sys.stdout, _GuardedStdout):
            sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
