"""The SEDD/RADD detokenizers, so zero-shot numbers are comparable with the papers (AO-GPT, SEDD, RADD, MDLM).

The benchmark files are tokenized text ("a @-@ b", "do n't", "( x )"); GPT-2 was trained on raw web
text, so these undo the tokenization before BPE. Each is a reimplementation of the function of the
same role in louaaron/Score-Entropy-Discrete-Diffusion `data.py` (copied unchanged by RADD and
AO-GPT), step for step and in the same order, since the steps interact. Quirks are kept on purpose:
numbers computed with them must match the published protocol, not an idealised one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_Step = tuple[str, str, bool]  # (pattern, replacement, is_regex)


def _apply(text: str, steps: list[_Step]) -> str:
    for pattern, replacement, is_regex in steps:
        text = re.sub(pattern, replacement, text) if is_regex else text.replace(pattern, replacement)
    return text


def _plain(*pairs: tuple[str, str]) -> list[_Step]:
    return [(old, new, False) for old, new in pairs]


def _regex(*pairs: tuple[str, str]) -> list[_Step]:
    return [(old, new, True) for old, new in pairs]


_WIKITEXT: list[_Step] = [
    *_plain(("s '", "s'")),
    # SEDD's "contraction" regex matches literal slashes, so on real text it never fires; kept for fidelity
    *_regex((r"/' [0-9]/", r"/'[0-9]/")),
    *_plain((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", ".")),
    *_plain((" : ", ": "), (" ; ", "; "), (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", ")),
    *_regex(
        (r"\(\s*([^\)]*?)\s*\)", r"(\1)"),
        (r"\[\s*([^\]]*?)\s*\]", r"[\1]"),
        (r"{\s*([^}]*?)\s*}", r"{\1}"),
        (r"\"\s*([^\"]*?)\s*\"", r'"\1"'),
        (r"'\s*([^']*?)\s*'", r"'\1'"),
    ),
    *_plain(("= = = =", "===="), ("= = =", "==="), ("= =", "==")),
    *_plain((" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"), (" \n", "\n"), ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s")),
]

_PTB_HEAD: list[_Step] = _plain((" 's", "'s"), ("s ' ", "s' "), (" n't", "n't"), (" \n ", "\n"), ("\\/", "/"))
# " N " -> " 1 " is applied 10 times: one pass cannot rewrite "N N N" (the matches overlap)
_PTB_NUMBERS: list[_Step] = _plain(*[(" N ", " 1 ")] * 10)
_PTB_TAIL: list[_Step] = _plain(("$ 1", "$1"), ("# 1", "#1"), ("<unk>", "?"))

_LM1B: list[_Step] = [
    *_plain(("http : / / ", "http://"), ("https : / / ", "https://")),
    *_regex((r" '(\w+)", r"'\1"), (r" (\w+) \. ", r" \1. "), (r" (\w+) \.$", r" \1.")),
    *_plain((" ? ", "? ")),
    *_regex((r" \?$", "?")),
    *_plain((" ! ", "! ")),
    *_regex((r" \!$", "!")),
    *_plain((" , ", ", "), (" : ", ": "), (" ; ", "; "), (" / ", "/")),
    *_regex(
        (r"\" ([^\"]+) \"", r'"\1"'),
        (r"' ([^']+) '", r"'\1'"),
        (r"\( ([^\(\)]+) \)", r"(\1)"),
        (r"\[ ([^\[\]]+) \]", r"[\1]"),
    ),
    *_plain(("$ ", "$"), ("\N{POUND SIGN} ", "\N{POUND SIGN}")),
]


def wikitext_detokenizer(text: str) -> str:
    return _apply(text, _WIKITEXT)


def ptb_detokenizer(text: str) -> str:
    return _apply(text, _PTB_HEAD + _PTB_NUMBERS + _PTB_TAIL)


def lm1b_detokenizer(text: str) -> str:
    return _apply(text, _LM1B)


def lambada_detokenizer(text: str) -> str:
    """Curly double quotes -> straight, and a leading newline (as the authors feed LAMBADA)."""
    text = text.replace("\N{LEFT DOUBLE QUOTATION MARK}", '"').replace("\N{RIGHT DOUBLE QUOTATION MARK}", '"')
    return "\n" + text.strip()


DETOKENIZERS: dict[str, Callable[[str], str]] = {
    "wikitext": wikitext_detokenizer,
    "ptb": ptb_detokenizer,
    "lm1b": lm1b_detokenizer,
    "lambada": lambada_detokenizer,
}
