"""`aogpt sample --requests FILE.jsonl --out RESULTS.jsonl`: many sampling requests, one JSON object a line,
their results one JSON line each, in input order, resumable.

A request line holds the options of one sample: what it is given (`prompt`, `infill`), its `seed`, `length`
and `order`, and the options of its run (`steps`, `schedule`, `counts`, `temperature`, `top_p`, `top_k`),
which only requests that agree on them can share a batch. Every line is read and checked before any
sampling: a bad one is one error naming the file, its line number and the field.

The requests are sampled in batches of a fixed size (request.sample_batches): a batch mixes prompts, infill
spans, lengths, orders and seeds freely, and a request's tokens depend on its own fields and seed only
(a request without a seed is seeded with sample `index` of `--seed`: seeding.sample_seed), so they do not
depend on the batch size.
The harnesses (`aogpt lm-eval`'s generate_until, genppl) sample through the same batches.

The results file is written a line at a time, synced, in the order of the requests (a result that
finishes early waits for the ones before it), each line with the request's `index` (its line among the
requests, from 0) and what it was made from (its request's own fields and the options that shape its
tokens: `made_from`). A line is written whole or not at all (Ctrl-C and SIGTERM wait for it; a full
disk takes a cut line back); a run stopped any other way leaves a prefix of complete lines (a last line
cut mid-write is dropped on the next open). Run again with the same `--out`: it keeps the lines that
answer the same requests under the same options and samples the rest; a line made from anything else
stops the run before the model loads, naming the first difference. One run writes a file at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field

from ..errors import DiskFullError, UserError, disk_full_reason, signals_deferred, space_note
from ..seeding import sample_seed
from ..temporaries import acquire_writer_lock, release_writer_lock

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
        """`FILE line 3, field 'length'`, or for a request made in memory `requests[2], field 'length'`."""
        place = f"{path} line {self.line}" if self.line is not None else f"{path}[{self.index}]"
        return place + (f", field {name!r}" if name else "")

    def seeded(self, base_seed: int) -> dict:
        """Its fields with its seed: its own, else sample `index` of base_seed's (whatever batch it lands in)."""
        return {**self.fields, "seed": self.fields.get("seed", sample_seed(base_seed, self.index))}


def checked_request(request: RequestLine, raw, path: str) -> RequestLine:
    """`request` holding `raw`'s fields (None values dropped), once each is a field of a request and of a type
    it takes; else one UserError naming `path`, the request and the field."""
    if not isinstance(raw, dict):
        raise UserError(f"{request.where(path)}: a request is a JSON object (a dict), got {type(raw).__name__}")
    for name, value in raw.items():
        if name not in TYPES:
            raise UserError(f"{request.where(path, name)} is not a request field; allowed: {', '.join(TYPES)}", name)
        allowed = TYPES[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, allowed)):
            words = " or ".join(_TYPE_WORDS[t] for t in allowed)
            shown = json.dumps(value) if isinstance(value, (str, int, float, list, dict)) else repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise UserError(f"{request.where(path, name)} must be {words}, got {shown}", name)
    request.fields = {k: v for k, v in raw.items() if v is not None}
    return request


def request_lines(items: list, path: str = "requests") -> list[RequestLine]:
    """Requests made in memory (the Python API's `requests`, one dict each), checked as a file's lines are."""
    if not isinstance(items, list) or not items:
        raise UserError(f"{path} must be a non-empty list of dicts, one per sample; got {items!r:.80}", path)
    return [checked_request(RequestLine(i, None), raw, path) for i, raw in enumerate(items)]


def read_requests(path: str) -> list[RequestLine]:
    """The requests of a .jsonl file, each checked for unknown fields and types (values against the model are
    checked by the sampler's plan, with the same line named). Blank lines are skipped."""
    if not os.path.isfile(path):
        raise UserError(f"--requests {path!r} is not a file; give a .jsonl file with one request object a line")
    requests = []
    with open(path, "rb") as f:
        for number, raw_line in enumerate(f, start=1):
            request = RequestLine(len(requests), number)
            try:
                text = raw_line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{request.where(path)}: byte {e.start + 1} (0x{raw_line[e.start]:02x}) is not UTF-8; "
                    "save the file as UTF-8"
                ) from None
            if not text.strip():
                continue
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise UserError(f"{request.where(path)}: not a JSON object ({e.msg})") from None
            requests.append(checked_request(request, raw, path))
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


def made_from(request: RequestLine, options: dict) -> dict:
    """What a result line records of what it was made from: the request's own fields as its line gives them
    (`request`) and every option that shapes its tokens (`options`: the model's weights, dtype, seed, length,
    order, steps, ...), so a re-run knows whether the line answers its own request."""
    return {"request": request.fields, "options": options}


class OrderedResults:
    """The results file: `done` holds the indices already written (a re-run skips them); `add(index, record)`
    writes every result whose turn has come, in input order, each line flushed and synced.

    `made_from[i]` (`made_from`) is written into line i and checked against a line already there: a re-run
    keeps a line only when it answers the same request under the same options. The file has one writer at a
    time (its writer lock, taken here, released by `close`)."""

    def __init__(self, path: str, made_from: list[dict]):
        self.path, self.made_from, self.total = path, made_from, len(made_from)
        acquire_writer_lock(
            path,
            f"--out {path!r}",
            "two runs would interleave their lines: wait for it to finish, or give another --out",
        )
        try:
            self.done, self._size = self._complete_prefix()
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        except BaseException:
            release_writer_lock(path)
            raise
        self._next = len(self.done)
        self._waiting: dict[int, dict] = {}

    def _complete_prefix(self) -> tuple[set[int], int]:
        """The indices of the complete lines already there (0, 1, ..., k-1) and their bytes, the file cut after
        them (a line a stop left half written). A line of other content, of another request or of other
        options is refused (one line naming the first difference) rather than guessed at; nothing is cut then."""
        if not os.path.exists(self.path):
            return set(), 0
        keep, done = 0, set()
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # cut mid-write: dropped
                where = f"--out {self.path!r} line {len(done) + 1}"
                try:
                    line = json.loads(raw)
                    index = line["index"]
                except (ValueError, KeyError, TypeError):
                    raise UserError(
                        f"{where} is not a result of `aogpt sample --requests`; "
                        "give a new file, or the one an earlier run of these requests wrote"
                    ) from None
                if index != len(done) or index >= self.total:
                    expected = f"expected {len(done)}" if index != len(done) else f"of {self.total} requests"
                    raise UserError(
                        f"{where} holds request {index}, {expected}: it was written for other requests; "
                        f"give another --out, or delete {self.path!r} to start afresh"
                    )
                difference = _first_difference(line, self.made_from[index])
                if difference is not None:
                    field, old, new = difference
                    raise UserError(
                        f"{where} answers another request: its {field} is {old}, this run's is {new}; give "
                        f"another --out, or delete {self.path!r} to start afresh"
                    )
                done.add(index)
                keep += len(raw)
        with open(self.path, "r+b") as f:
            f.truncate(keep)
        return done, keep

    def add(self, index: int, record: dict) -> None:
        """Record request `index`'s result; every line whose turn has come is written whole (a Ctrl-C or
        SIGTERM waits for it, then stops the command: Interrupted). A full disk leaves the lines written before
        (a line it cut is taken back) and is one DiskFullError saying how many are kept."""
        self._waiting[index] = record
        with signals_deferred(f"{self.path!r} holds complete results; the same command goes on from there"):
            while self._next in self._waiting:
                line = {"index": self._next, **self._waiting.pop(self._next), **self.made_from[self._next]}
                data = (json.dumps(line) + "\n").encode("utf-8")
                try:
                    written = 0
                    while written < len(data):
                        written += os.write(self._fd, data[written:])
                    os.fsync(self._fd)
                except OSError as e:
                    self._take_back(e, len(data))
                self._size += len(data)
                self.done.add(self._next)
                self._next += 1

    def _take_back(self, error: OSError, needed: int) -> None:
        """A write that failed: the file cut back to its complete lines, and a full disk named in one line."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)
        folder = os.path.dirname(os.path.abspath(self.path))
        reason = disk_full_reason(error, folder, needed)
        if reason is None:
            raise error
        raise DiskFullError(
            f"the disk is full: writing --out {self.path!r} failed ({reason}); its {self._next} complete results "
            f"of {self.total} are kept ({space_note(folder, None)}): free some space, then the same command goes "
            "on from there"
        ) from None

    @property
    def written(self) -> int:
        return self._next

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            release_writer_lock(self.path)


def _first_difference(line: dict, made_from: dict) -> tuple[str, str, str] | None:
    """(field, what the line holds, what this run asks) of the first way `line` was made from something else
    than `made_from` says, or None."""
    for part in ("request", "options"):
        old = line.get(part)
        if not isinstance(old, dict):
            return part, "not recorded (an older aogpt's file)", "recorded"
        new = made_from[part]
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                name = f"request's {key!r}" if part == "request" else key
                shown = [
                    json.dumps(v) if key in d else "not given" for d, v in ((old, old.get(key)), (new, new.get(key)))
                ]
                return name, shown[0], shown[1]
    return None
