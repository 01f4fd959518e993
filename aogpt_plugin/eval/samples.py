"""Reading generated samples for generation perplexity, in the layouts samplers write.

Accepted, recognised by content rather than by file name (a redirected `--json` may be called
anything):
  - the `aogpt sample --json` object: `tokens` a list of id lists (one per sample) and `text` a
    list of strings (or one string for one sample); other top-level keys (sampling settings,
    `tokenizer`) are kept as metadata
  - a JSON object with a `samples` list (the sampler writes it next to the columns; it wins, and
    the `tokens`/`text` columns are not copied into the metadata); other keys are kept as metadata
  - a JSON list of samples, or JSON lines with one sample per line
  - plain text: one sample per blank-line-separated block
A sample is an object with `tokens` (token ids) and/or `text`, a bare list of ids, or a string.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import UserError

TOKEN_MODES = ("auto", "direct", "retokenize")  # how `aogpt eval genppl --tokens` reads a sample's ids


@dataclass
class Sample:
    tokens: list[int] | None = None
    text: str | None = None


@dataclass
class SampleSet:
    samples: list[Sample]
    path: str
    tokenizer: str = "gpt2"  # whose ids `tokens` are: the file's `tokenizer` key, else GPT-2
    meta: dict = field(default_factory=dict)


def read_samples(path: str) -> SampleSet:
    if not os.path.isfile(path):
        raise UserError(
            f"--samples {path!r} " + ("is a folder, not a file" if os.path.isdir(path) else "does not exist")
        )
    try:
        with open(path, encoding="utf-8") as f:
            content = f.read()
    except UnicodeDecodeError as e:
        raise UserError(f"--samples {path!r} is not UTF-8 text (byte {e.start} cannot be decoded)") from None
    head = content.lstrip()[:1]
    if head in ("{", "["):
        items, meta = _json_items(content, path)
        samples = [_sample(item, path, i) for i, item in enumerate(items)]
    else:
        samples = [Sample(text=block) for block in _text_blocks(content)]
        meta = {}
    if not samples:
        raise UserError(f"--samples {path!r} holds no samples")
    tokenizer = meta.pop("tokenizer", None) or "gpt2"
    return SampleSet(samples, path, str(tokenizer), meta)


def _json_items(content: str, path: str) -> tuple[list, dict]:
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in content.splitlines() if line.strip()], {}
        except json.JSONDecodeError as e:
            raise UserError(f"--samples {path!r} is neither JSON nor JSON lines (line {e.lineno}: {e.msg})") from None
    if isinstance(data, list):
        return data, {}
    if isinstance(data, dict) and isinstance(data.get("samples"), list):
        return data["samples"], {k: v for k, v in data.items() if k not in ("samples", "tokens", "text")}
    if isinstance(data, dict) and _is_list_of_id_lists(data.get("tokens")):
        return _columns(data, path), {k: v for k, v in data.items() if k not in ("tokens", "text")}
    if isinstance(data, dict) and ("tokens" in data or "text" in data):
        return [data], {}  # JSON lines holding a single sample
    raise UserError(f"--samples {path!r}: a JSON object needs a 'samples' list (or 'tokens'/'text' for one sample)")


def _is_list_of_id_lists(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(row, list) for row in value)


def _columns(data: dict, path: str) -> list[dict]:
    """The sampler's column layout, {"tokens": [[...], ...], "text": [...]}, as one record per sample."""
    tokens, text = data["tokens"], data.get("text")
    if isinstance(text, str):
        text = [text]
    if text is not None and (not isinstance(text, list) or len(text) != len(tokens)):
        count = len(text) if isinstance(text, list) else type(text).__name__
        raise UserError(f"--samples {path!r}: 'text' ({count}) does not match 'tokens' ({len(tokens)} samples)")
    return [{"tokens": ids, "text": None if text is None else text[i]} for i, ids in enumerate(tokens)]


def _sample(item, path: str, index: int) -> Sample:
    if isinstance(item, str):
        return Sample(text=item)
    if isinstance(item, list) and all(isinstance(t, int) for t in item):
        return Sample(tokens=item)
    if isinstance(item, dict) and ("tokens" in item or "text" in item):
        tokens, text = item.get("tokens"), item.get("text")
        if tokens is not None and not (isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)):
            raise UserError(f"--samples {path!r}: sample {index} has 'tokens' that are not a list of integers")
        if text is not None and not isinstance(text, str):
            raise UserError(f"--samples {path!r}: sample {index} has a 'text' that is not a string")
        return Sample(tokens=tokens, text=text)
    raise UserError(
        f"--samples {path!r}: sample {index} is not text, a list of token ids, or an object with tokens/text"
    )


def _text_blocks(content: str) -> list[str]:
    blocks, current = [], []
    for line in content.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks
