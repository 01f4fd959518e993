"""`aogpt sample --requests FILE.jsonl --out RESULTS.jsonl`: many sampling requests, one JSON object a line,
their results one JSON line each, in input order, resumable.

A request line holds the options of one sample: what it is given (`prompt`, `infill`), its `seed`, `length`
and `order`, and the options of its run (`steps`, `schedule`, `counts`, `temperature`, `top_p`, `top_k`),
which only requests that agree on them can share a batch. Every line is read and checked before any
sampling: a bad one is one error naming the file, its line number and the field.

The requests are sampled in batches of a fixed size (request.sample_batches): a batch mixes prompts, infill
spans, lengths, orders and seeds freely, and a request's tokens depend on its own fields and seed only
(a request without a seed is seeded `--seed` + its index), so they do not depend on the batch size.
The harnesses (`aogpt lm-eval`'s generate_until, genppl) sample through the same batches.

The results file is written a line at a time, flushed, in the order of the requests (a result that
finishes early waits for the ones before it), each line with the request's `index` (its line among the
requests, from 0). A line is written whole or not at all (Ctrl-C and SIGTERM wait for it); a run
stopped any other way leaves a prefix of complete lines (a last line cut mid-write is dropped on the
next open). Run again with the same `--out`: it keeps them and samples the rest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import UserError, signals_deferred

PER_SAMPLE = ("prompt", "infill", "seed", "length", "order")  # may differ between the samples of one batch
PER_RUN = ("steps", "schedule", "counts", "temperature", "top_p", "top_k")  # one value per batch
TYPES = {  # a request's fields (a SampleRequest's PER_SAMPLE and PER_RUN ones) and the JSON types each takes
    "prompt": (str,),
    "infill": (str, dict, list),
    "seed": (int,),
    "length": (int,),
    "order": (str, list),
    "steps": (int,),
    "schedule": (str,),
    "counts": (str,),
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": (int,),
}
_TYPE_WORDS = {str: "a string", dict: "an object", int: "an integer", float: "a number", list: "a list"}


@dataclass
class RequestLine:
    """One request: its `index` among the requests (0-based), its line number in the file (None: a request
    made in memory, a harness's), and its fields."""

    index: int
    line: int | None
    fields: dict = field(default_factory=dict)

    def run_key(self) -> tuple:
        """What a batch must share: the request's per-run options (None where it gives none)."""
        return tuple(self.fields.get(k) for k in PER_RUN)

    def where(self, path: str, name: str | None = None) -> str:
        place = f"{path} line {self.line}" if self.line is not None else f"{path} {self.index}"
        return place + (f", field {name!r}" if name else "")

    def seeded(self, base_seed: int) -> dict:
        """Its fields with its seed: its own, else base_seed + its index (whatever batch it lands in)."""
        return {**self.fields, "seed": self.fields.get("seed", base_seed + self.index)}


def read_requests(path: str) -> list[RequestLine]:
    """The requests of a .jsonl file, each checked for unknown fields and types (values against the model are
    checked by the sampler's plan, with the same line named). Blank lines are skipped."""
    if not os.path.isfile(path):
        raise UserError(f"--requests {path!r} is not a file; give a .jsonl file with one request object a line")
    requests = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if not text.strip():
                continue
            request = RequestLine(len(requests), number)
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise UserError(f"{request.where(path)}: not a JSON object ({e.msg})") from None
            if not isinstance(raw, dict):
                raise UserError(f"{request.where(path)}: a request is a JSON object, got {type(raw).__name__}")
            for name, value in raw.items():
                if name not in TYPES:
                    raise UserError(f"{request.where(path, name)} is not a request field; allowed: {', '.join(TYPES)}")
                allowed = TYPES[name]
                if value is not None and (isinstance(value, bool) or not isinstance(value, allowed)):
                    words = " or ".join(_TYPE_WORDS[t] for t in allowed)
                    raise UserError(f"{request.where(path, name)} must be {words}, got {json.dumps(value)}")
            request.fields = {k: v for k, v in raw.items() if v is not None}
            requests.append(request)
    if not requests:
        raise UserError(f"--requests {path!r} holds no request; give one JSON object a line")
    return requests


def batches(requests: list[RequestLine], size: int) -> list[list[RequestLine]]:
    """Requests grouped by their per-run options, in input order within a group, cut into batches of at most
    `size`; groups in the order of their first request."""
    groups: dict[tuple, list[RequestLine]] = {}
    for request in requests:
        groups.setdefault(request.run_key(), []).append(request)
    return [group[i : i + size] for group in groups.values() for i in range(0, len(group), size)]


class OrderedResults:
    """The results file: `done` holds the indices already written (a re-run skips them); `add(index, record)`
    writes every result whose turn has come, in input order, each line flushed and synced."""

    def __init__(self, path: str, total: int):
        self.path, self.total = path, total
        self.done = self._complete_prefix()
        self._next = len(self.done)
        self._waiting: dict[int, dict] = {}
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def _complete_prefix(self) -> set[int]:
        """The indices of the complete lines already there (0, 1, ..., k-1), the file cut after them (a line a
        stop left half written, or a file of other content, is refused rather than guessed at)."""
        if not os.path.exists(self.path):
            return set()
        keep, done = 0, set()
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # cut mid-write: dropped
                try:
                    index = json.loads(raw)["index"]
                except (ValueError, KeyError, TypeError):
                    raise UserError(
                        f"--out {self.path!r} line {len(done) + 1} is not a result of `aogpt sample --requests`; "
                        "give a new file, or the one an earlier run of these requests wrote"
                    ) from None
                if index != len(done) or index >= self.total:
                    expected = f"expected {len(done)}" if index != len(done) else f"of {self.total} requests"
                    raise UserError(
                        f"--out {self.path!r} line {len(done) + 1} holds request {index}, {expected}: "
                        "it was written for other requests; give a new file"
                    )
                done.add(index)
                keep += len(raw)
        with open(self.path, "r+b") as f:
            f.truncate(keep)
        return done

    def add(self, index: int, record: dict) -> None:
        """Record request `index`'s result; every line whose turn has come is written whole (a Ctrl-C or
        SIGTERM waits for it, then stops the command: Interrupted)."""
        self._waiting[index] = record
        with signals_deferred(f"{self.path!r} holds complete results; the same command goes on from there"):
            while self._next in self._waiting:
                line = json.dumps({"index": self._next, **self._waiting.pop(self._next)})
                self._file.write(line + "\n")
                self._file.flush()
                os.fsync(self._file.fileno())
                self.done.add(self._next)
                self._next += 1

    @property
    def written(self) -> int:
        return self._next

    def close(self) -> None:
        self._file.close()
