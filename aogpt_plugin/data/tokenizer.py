"""Tokenizers, named by one spec string everywhere (`[aogpt] tokenizer`, config.json, `--tokenizer`).

    "gpt2"                 GPT-2 BPE through tiktoken, the paper's (offline: TIKTOKEN_CACHE_DIR)
    a path to a .json      any Hugging Face `tokenizers` tokenizer.json (e.g. a byte-level BPE of
                           512-4k tokens trained by `aogpt tokenizer train`, data/tokenizer_training.py); its end-of-text token
                           is `<|endoftext|>`, `</s>` or `<eos>`
    "symbols:V"            V bare symbols written as integers, for synthetic token sources

All are shaped like torchtitan's BaseTokenizer (duck-typed, no import). As in the paper there is no
BOS: `add_bos` is ignored and `add_eos` appends the end-of-text token to every document.
`byte_lengths()` gives the UTF-8 bytes each id stands for (0 for special tokens), so perplexities of
models with different tokenizers compare as bits per byte.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import ConfigError, UserError
from .shared_folder import missing_folder_note, use_shared_tiktoken_cache

if TYPE_CHECKING:
    import torch

TIKTOKEN_NAMES = ("gpt2",)
EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>")
SYMBOLS = "symbols:"


def check_tokenizer_spec(spec: str, key: str = "aogpt.tokenizer", must_exist: bool = True) -> None:
    """A cheap check of the spec (no file is parsed): a known name, a symbol count, or a .json file
    (that exists, unless `must_exist` is false: a TOML value a CLI override may still replace)."""
    if spec in TIKTOKEN_NAMES:
        return
    if spec.startswith(SYMBOLS):
        if not spec[len(SYMBOLS) :].isdigit() or int(spec[len(SYMBOLS) :]) < 2:
            raise ConfigError(f"{key}={spec!r}: give the number of symbols, e.g. 'symbols:32'")
        return
    if not spec.endswith(".json"):
        raise ConfigError(
            f"{key}={spec!r} is not a tokenizer; allowed: {', '.join(TIKTOKEN_NAMES)}, a tokenizer.json path, symbols:V"
        )
    if must_exist and not os.path.isfile(spec):
        raise ConfigError(f"{key}={spec!r}: no such tokenizer.json (make one with `aogpt tokenizer train`)")


def same_tokenizer(a: str, b: str) -> bool:
    """Two specs give the same ids: equal names, or two tokenizer.json files with equal contents."""
    if a == b:
        return True
    files = [s for s in (a, b) if s.endswith(".json") and os.path.isfile(s)]
    if len(files) < 2:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def load_tokenizer(spec: str, key: str = "aogpt.tokenizer"):
    check_tokenizer_spec(spec, key)
    if spec in TIKTOKEN_NAMES:
        return TiktokenTokenizer(spec)
    if spec.startswith(SYMBOLS):
        return SymbolTokenizer(int(spec[len(SYMBOLS) :]))
    return JsonTokenizer(spec, key)


class TiktokenTokenizer:
    def __init__(self, name: str = "gpt2"):
        if name not in TIKTOKEN_NAMES:
            raise ConfigError(f"aogpt.tokenizer={name!r} is not supported; allowed: {', '.join(TIKTOKEN_NAMES)}")
        use_shared_tiktoken_cache()
        try:
            import tiktoken

            self._enc = tiktoken.get_encoding(name)
        except Exception as e:  # network or cache problems surface here, before any real work
            cache = os.environ.get("TIKTOKEN_CACHE_DIR", "<unset>")
            missing = missing_folder_note() if cache == "<unset>" else None
            if missing:  # the likely cause: GPT-2's offline cache is in that folder
                raise ConfigError(
                    f"aogpt.tokenizer={name!r} cannot load: {missing} (it holds GPT-2's tiktoken cache), or set "
                    "TIKTOKEN_CACHE_DIR to a tiktoken cache, or go online"
                ) from None
            raise ConfigError(
                f"aogpt.tokenizer={name!r} cannot load ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                f"set TIKTOKEN_CACHE_DIR to a tiktoken cache holding it (now {cache}) or go online"
            ) from None
        self.name = name
        self.eos_id = self._enc.eot_token
        self.bos_id = None
        self._byte_lengths = None

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = self._enc.encode_ordinary(text)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def encode_batch(self, texts: list[str], add_eos: bool = False) -> list[list[int]]:
        out = self._enc.encode_ordinary_batch(texts)
        if add_eos:
            for ids in out:
                ids.append(self.eos_id)
        return out

    def decode(self, ids) -> str:
        return self._enc.decode([int(i) for i in ids])

    def get_vocab_size(self) -> int:
        return self._enc.n_vocab

    def byte_lengths(self) -> torch.Tensor:
        import torch

        if self._byte_lengths is None:
            sizes = [len(self._enc.decode_single_token_bytes(i)) for i in range(self._enc.n_vocab)]
            sizes[self.eos_id] = 0  # <|endoftext|>, the encoding's only special token, spells no text
            self._byte_lengths = torch.tensor(sizes, dtype=torch.long)
        return self._byte_lengths


class JsonTokenizer:
    """A Hugging Face `tokenizers` tokenizer.json."""

    def __init__(self, path: str, key: str = "aogpt.tokenizer"):
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(path)
        except Exception as e:
            raise ConfigError(f"{key}={path!r} is not a tokenizer.json ({type(e).__name__})") from None
        eos = next((self._tok.token_to_id(t) for t in EOS_NAMES if self._tok.token_to_id(t) is not None), None)
        if eos is None:
            raise ConfigError(f"{key}={path!r} has no end-of-text token; allowed: one of {', '.join(EOS_NAMES)}")
        self.name = path
        self.eos_id = eos
        self.bos_id = None
        self._byte_lengths = None

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ids + [self.eos_id] if add_eos else ids

    def encode_batch(self, texts: list[str], add_eos: bool = False) -> list[list[int]]:
        out = [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        return [ids + [self.eos_id] for ids in out] if add_eos else out

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def get_vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def byte_lengths(self) -> torch.Tensor:
        import torch

        """Exact for byte-level BPE (every token string spells its bytes in the byte alphabet)."""
        if self._byte_lengths is not None:
            return self._byte_lengths
        from tokenizers import pre_tokenizers

        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        special = {t.content for t in self._tok.get_added_tokens_decoder().values() if t.special}
        sizes = []
        for i in range(self.get_vocab_size()):
            token = self._tok.id_to_token(i) or ""
            if token in special:
                sizes.append(0)
            elif token and all(c in alphabet for c in token):
                sizes.append(len(token))
            else:
                sizes.append(len(self._tok.decode([i]).encode("utf-8")))
        self._byte_lengths = torch.tensor(sizes, dtype=torch.long)
        return self._byte_lengths


class SymbolTokenizer:
    """V symbols with no text: ids are written as space-separated integers (synthetic sources)."""

    def __init__(self, vocab: int):
        self.name = f"{SYMBOLS}{vocab}"
        self._vocab = vocab
        self.eos_id = None
        self.bos_id = None

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        try:
            ids = [int(w) for w in text.split()]
        except ValueError:
            raise UserError(f"tokenizer {self.name!r} reads space-separated integers, not {text[:40]!r}") from None
        if any(not 0 <= i < self._vocab for i in ids):
            raise UserError(f"tokenizer {self.name!r} has symbols 0..{self._vocab - 1}")
        return ids

    def encode_batch(self, texts: list[str], add_eos: bool = False) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)

    def get_vocab_size(self) -> int:
        return self._vocab

    def byte_lengths(self) -> torch.Tensor:
        import torch

        return torch.ones(self._vocab, dtype=torch.long)
