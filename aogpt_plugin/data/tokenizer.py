"""GPT-2 BPE through tiktoken, shaped like torchtitan's BaseTokenizer (duck-typed, no import).

As in the paper (and GPT-2), there is no BOS: `add_bos` is ignored and `add_eos` appends
<|endoftext|> (50256) to every document. Offline use: point TIKTOKEN_CACHE_DIR at a cache that
holds the gpt2 files (../shared/data/tiktoken_cache here).
"""

from __future__ import annotations

import os

from ..errors import ConfigError

TOKENIZERS = ("gpt2",)


class TiktokenTokenizer:
    def __init__(self, name: str = "gpt2"):
        if name not in TOKENIZERS:
            raise ConfigError(f"aogpt.tokenizer={name!r} is not supported; allowed: {', '.join(TOKENIZERS)}")
        try:
            import tiktoken

            self._enc = tiktoken.get_encoding(name)
        except Exception as e:  # network or cache problems surface here, before any real work
            cache = os.environ.get("TIKTOKEN_CACHE_DIR", "<unset>")
            raise ConfigError(
                f"aogpt.tokenizer={name!r} cannot load ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                f"set TIKTOKEN_CACHE_DIR to a tiktoken cache holding it (now {cache}) or go online"
            ) from None
        self.name = name
        self.eos_id = self._enc.eot_token
        self.bos_id = None

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
