"""`aogpt tokenizer train CORPUS OUT --vocab-size N`: a byte-level BPE tokenizer.json, in seconds.

It reads the corpus as training reads it (data/text_files.py) and writes a file that `[aogpt]
tokenizer`, config.json and `--tokenizer` accept (data/tokenizer.py). OUT is checked before the
corpus is read (an existing file is replaced only with `--force`) and written whole or not at all
(temporaries.write_file): a full disk, Ctrl-C or SIGTERM leave no partial tokenizer.json.
"""

from __future__ import annotations

import contextlib
import os
import time

from ..errors import UserError, check_writable, interruption
from ..temporaries import write_file
from .text_files import iter_documents, list_text_files
from .tokenizer import EOS_NAMES


def train_tokenizer(corpus: str, vocab_size: int, out: str, max_bytes: int = 20_000_000, force: bool = False) -> dict:
    """A byte-level BPE (GPT-2's pre-tokenization) with `<|endoftext|>`, from the first `max_bytes`
    of text of CORPUS (a .jsonl/.json/.txt file, folder or glob, read as the training data is).
    An existing OUT is replaced only with `force`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 258:
        raise UserError(f"--vocab-size {vocab_size} must be >= 258 (256 bytes, <|endoftext|> and a merge)")
    if not out.endswith(".json"):
        raise UserError(f"OUT {out!r} must be a path ending in .json (the tokenizer.json to write)")
    files = list_text_files(corpus, key="CORPUS")
    with contextlib.suppress(OSError):  # OUT may name a new folder; a file in its way is refused just below
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    check_writable(out, "OUT", force)

    def texts():
        seen = 0
        for path in files:
            for doc in iter_documents(path):
                yield doc
                seen += len(doc.encode("utf-8"))
                if seen >= max_bytes:
                    return

    started = time.perf_counter()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_NAMES[0]],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    try:
        tok.train_from_iterator(texts(), trainer)
    except BaseException as e:  # a Ctrl-C or SIGTERM raised in the corpus reader may come back through Rust
        stop = interruption(e)
        if stop is None:
            raise
        stop.detail = f"OUT {out!r} was not written"
        raise stop from None
    check_writable(out, "OUT", force)  # again: it may have appeared while training
    write_file(out, tok.to_str(pretty=True).encode("utf-8"), f"OUT {out!r}")
    return {"out": out, "vocab_size": tok.get_vocab_size(), "seconds": round(time.perf_counter() - started, 2)}


def add_to(subparsers) -> None:
    p = subparsers.add_parser("tokenizer", help="train a byte-level BPE tokenizer.json on a corpus")
    sub = p.add_subparsers(dest="tokenizer_command", required=True, metavar="{train}")
    t = sub.add_parser("train", help="byte-level BPE with <|endoftext|>, from the corpus's first bytes")
    t.add_argument("corpus", help="a .jsonl/.json/.txt file, folder or glob (training text only)")
    t.add_argument("out", help="the tokenizer.json to write")
    t.add_argument("--vocab-size", type=int, required=True, help="tokens, e.g. 512-4096")
    t.add_argument("--max-bytes", type=int, default=20_000_000, help="text read from the corpus (default 20 MB)")
    t.add_argument("--force", action="store_true", help="replace OUT if it exists")
    t.set_defaults(run=run)


def run(args) -> int:
    result = train_tokenizer(args.corpus, args.vocab_size, args.out, args.max_bytes, args.force)
    print(f"trained a {result['vocab_size']}-token byte-level BPE in {result['seconds']} s -> {result['out']}")
    return 0
