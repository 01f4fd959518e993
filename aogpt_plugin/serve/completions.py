"""`POST /v1/completions` as the OpenAI API defines it, for an any-order model: a request body checked into
one sample request per choice, and the text, logprobs and stream chunks made from what was drawn.

A choice is one sample: the prompt's tokens at positions 0.., a gap of `max_tokens` positions, then the
suffix's tokens (OpenAI's insert mode: the completion fills the gap, in any order), `length` = prompt +
max_tokens + suffix. The completion is the gap's text, exactly max_tokens tokens (an any-order sample fills
a gap of a fixed size; there is no end-of-text stop), cut at the first `stop` string. Choice k of the
request (prompts in turn, `n` each) is seeded `sample_seed(seed, k)` (seeding.py), so a choice is what
`aogpt sample --seed SEED` draws as sample k, and is said back in the choice's `seed`. No `seed`: one drawn
for the request. `temperature` 0 is greedy (top-k 1).

AO extensions (documented in docs/usage.md): `top_k`, `steps` (denoising steps, 1..the positions to
generate), `order` (random, l2r, or the positions to generate in the order to generate them), `schedule`,
`counts`, and `infill`: given spans anywhere in the sample ([{"start": POS, "text" | "tokens": ...}]).
`logprobs` are each returned token's exact left-to-right log-probability under the model (the prompt's
first token read after the start slot), whatever order the sample was drawn in: with `echo`, every prompt
token's, which is what lm-eval's loglikelihood reads.

Every field is checked here before anything is queued: a bad one is a RequestError naming it (HTTP 400, the
OpenAI error object; `model` of another name: 404).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ..errors import UserError, is_int, is_number, keyword_name

OPENAI_FIELDS = (
    "model", "prompt", "suffix", "max_tokens", "temperature", "top_p", "n", "seed", "stream", "stream_options",
    "stop", "echo", "logprobs", "user",
)  # fmt: skip
EXTENSIONS = ("top_k", "steps", "order", "schedule", "counts", "infill")
MAX_LOGPROBS = 5  # OpenAI's limit for completions
MAX_STOPS = 16  # (OpenAI takes 4; lm-eval sends a task's stops and the end-of-text one)
DEFAULT_MAX_TOKENS = 16  # OpenAI's default


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with OpenAI's error object naming `param`."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind

    def body(self) -> dict:
        code = {401: "invalid_api_key", 404: "model_not_found", 413: "request_too_large", 429: "queue_full"}.get(
            self.status
        )
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": code}}


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (each a flag of `aogpt serve`)."""

    max_tokens: int
    max_n: int


@dataclass
class Choice:
    """One sample of a request: where its prompt, gap and suffix lie, its seed and its checked plan."""

    index: int
    prompt: list[int]
    suffix: list[int]
    gap: int
    seed: int
    plan: object = None  # a SamplePlan (None: nothing to sample, max_tokens 0 with echo)


@dataclass
class Completion:
    """A checked request: its choices and how to answer (echo, logprobs, stop strings, stream)."""

    choices: list[Choice]
    echo: bool
    logprobs: int | None
    stop: list[str]
    stream: bool
    include_usage: bool
    model: str
    seed: int
    prompt_tokens: int = 0  # of the prompts, each counted once (OpenAI's usage)
    extensions: dict = field(default_factory=dict)


def _type(name: str, value, check, words: str) -> None:
    if not check(value):
        shown = repr(value) if not isinstance(value, str) else f'"{value[:40]}"'
        raise RequestError(f"{name} must be {words}; got {shown} ({type(value).__name__})", name)


def _is_token_list(value) -> bool:
    return isinstance(value, list) and all(is_int(t) for t in value)


def parse_completion(body, *, model_name: str, positions: int, vocab_size: int, encode, limits: Limits) -> Completion:
    """The checked request of a parsed JSON `body`. `encode(text) -> ids`; `positions`, `vocab_size`: the
    model's. Raises RequestError naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object; got {type(body).__name__}")
    for name in body:
        if name not in OPENAI_FIELDS + EXTENSIONS:
            raise RequestError(
                f"{name!r} is not a field of a completion request here; allowed: "
                f"{', '.join(OPENAI_FIELDS)} and the AO extensions {', '.join(EXTENSIONS)}",
                name,
            )
    get = body.get
    model = get("model", model_name)
    _type("model", model, lambda v: isinstance(v, str), "a string")
    if model != model_name:
        raise RequestError(f"The model {model!r} does not exist; this server serves {model_name!r}", "model", 404)
    if "prompt" not in body:
        raise RequestError("prompt is required: a string, a list of strings, a token list or a list of them", "prompt")
    prompts = _prompts(get("prompt"), encode, vocab_size)
    suffix = get("suffix")
    _type("suffix", suffix, lambda v: v is None or isinstance(v, str), "a string")
    suffix_tokens = _encoded("suffix", suffix, encode, vocab_size) if suffix else []
    checks = {
        "max_tokens": (lambda v: is_int(v), "an integer"),
        "temperature": (is_number, "a number"),
        "top_p": (is_number, "a number"),
        "n": (is_int, "an integer"),
        "seed": (is_int, "an integer"),
        "stream": (lambda v: isinstance(v, bool), "true or false"),
        "echo": (lambda v: isinstance(v, bool), "true or false"),
        "logprobs": (is_int, "an integer"),
        "user": (lambda v: isinstance(v, str), "a string"),
        "top_k": (is_int, "an integer"),
        "steps": (is_int, "an integer"),
        "schedule": (lambda v: isinstance(v, str), "a string"),
        "counts": (lambda v: isinstance(v, str), "a string"),
        "stream_options": (lambda v: isinstance(v, dict) and set(v) <= {"include_usage"}, '{"include_usage": BOOL}'),
        "stop": (
            lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)),
            "a string or a list of strings",
        ),
        "order": (lambda v: v in ("random", "l2r") or _is_token_list(v), "random, l2r or a list of positions"),
        "infill": (lambda v: isinstance(v, list), 'a list of spans [{"start": POS, "text" | "tokens": ...}]'),
    }
    for name, (check, words) in checks.items():
        if get(name) is not None:
            _type(name, get(name), check, words)
    max_tokens = DEFAULT_MAX_TOKENS if get("max_tokens") is None else get("max_tokens")
    echo, logprobs = bool(get("echo", False)), get("logprobs")
    n = 1 if get("n") is None else get("n")
    if not 1 <= n <= limits.max_n:
        raise RequestError(f"n={n} is outside 1..{limits.max_n} (the server's --max-n)", "n")
    if not (0 if echo else 1) <= max_tokens <= limits.max_tokens:
        low = "0 (with echo: the prompt scored only)" if echo else "1"
        raise RequestError(
            f"max_tokens={max_tokens} is outside {low}..{limits.max_tokens} (--max-tokens)", "max_tokens"
        )
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise RequestError(f"logprobs={logprobs} is outside 0..{MAX_LOGPROBS}", "logprobs")
    if get("stream") and logprobs is not None:
        raise RequestError("logprobs with stream is not supported here; ask without stream", "logprobs")
    if echo and suffix:
        raise RequestError("echo does not apply with suffix (the completion fills a gap)", "echo")
    if max_tokens == 0 and (suffix or get("infill")):
        raise RequestError("max_tokens=0 scores the prompt only: no suffix or infill", "max_tokens")
    stop = [get("stop")] if isinstance(get("stop"), str) else list(get("stop") or [])
    if len(stop) > MAX_STOPS or any(not s for s in stop):
        raise RequestError(f"stop takes up to {MAX_STOPS} non-empty strings; got {stop!r:.80}", "stop")
    for p, tokens in enumerate(prompts):
        of = f" (prompt {p})" if len(prompts) > 1 else ""
        if len(tokens) + (max_tokens or 0) + len(suffix_tokens) > positions or not (
            tokens or suffix_tokens or max_tokens
        ):
            name = (
                "prompt"
                if len(tokens) >= positions
                else "suffix"
                if len(tokens) + len(suffix_tokens) >= positions
                else "max_tokens"
            )
            raise RequestError(
                f"{name} too long for the model: prompt {len(tokens)} + max_tokens {max_tokens} + suffix "
                f"{len(suffix_tokens)} tokens{of} exceed its {positions} positions",
                name,
            )
    seed = secrets.randbits(63) if get("seed") is None else get("seed")
    if not 0 <= seed < 2**64:
        raise RequestError(f"seed={seed} is outside 0..2**64-1", "seed")
    temperature = 1.0 if get("temperature") is None else float(get("temperature"))
    if temperature < 0:
        raise RequestError(f"temperature={temperature} must be >= 0 (0: greedy)", "temperature")
    options = {
        "temperature": temperature if temperature > 0 else 1.0,
        "top_p": 1.0 if get("top_p") is None else float(get("top_p")),
        "top_k": 1 if temperature == 0 else get("top_k"),
        **{k: get(k) for k in ("steps", "schedule", "counts") if get(k) is not None},
    }
    if get("order") is not None:
        options["order"] = get("order")
    completion = Completion(
        [], echo, logprobs, stop, bool(get("stream")), bool((get("stream_options") or {}).get("include_usage")),
        model_name, seed, sum(len(t) for t in prompts), options,
    )  # fmt: skip
    from ..seeding import sample_seed

    for p, tokens in enumerate(prompts):
        for i in range(n):
            k = p * n + i
            completion.choices.append(Choice(k, tokens, suffix_tokens, max_tokens, sample_seed(seed, k)))
    completion.extensions["infill"] = get("infill")
    return completion


def _prompts(prompt, encode, vocab_size: int) -> list[list[int]]:
    """The prompts' token ids: a string, a list of strings, a token list or a list of token lists."""
    if isinstance(prompt, str):
        return [_encoded("prompt", prompt, encode, vocab_size)]
    if _is_token_list(prompt) and prompt:
        return [_checked_ids("prompt", prompt, vocab_size)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return [_encoded(f"prompt[{i}]", p, encode, vocab_size) for i, p in enumerate(prompt)]
    if isinstance(prompt, list) and prompt and all(_is_token_list(p) for p in prompt):
        return [_checked_ids(f"prompt[{i}]", p, vocab_size) for i, p in enumerate(prompt)]
    raise RequestError(
        f"prompt must be a string, a list of strings, a token list or a list of token lists (none empty); got {prompt!r:.60}",
        "prompt",
    )


def _encoded(name: str, text: str, encode, vocab_size: int) -> list[int]:
    try:
        return _checked_ids(name, list(encode(text)) if text else [], vocab_size)
    except UserError as e:
        raise RequestError(f"{name}: {e}", name.split("[")[0]) from None


def _checked_ids(name: str, ids: list[int], vocab_size: int) -> list[int]:
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise RequestError(f"{name} has token id {bad}, outside the vocabulary 0..{vocab_size - 1}", name.split("[")[0])
    return ids


def plan_choices(completion: Completion, plan) -> None:
    """Each choice's checked plan (`plan(SampleRequest, spell)`): given prompt, infill spans and suffix,
    length, seed and the request's options. A value the sampler refuses is a RequestError naming its field."""
    from ..sampler import SampleRequest

    options = dict(completion.extensions)
    infill = options.pop("infill")
    for choice in completion.choices:
        if choice.gap == 0:
            continue
        spans = [{"start": 0, "tokens": choice.prompt}] if choice.prompt else []
        if choice.suffix:
            spans.append({"start": len(choice.prompt) + choice.gap, "tokens": choice.suffix})
        spans += list(infill or [])
        length = len(choice.prompt) + choice.gap + len(choice.suffix)
        request = SampleRequest(length=length, seed=choice.seed, infill=spans or None, **options)
        try:
            choice.plan = plan(request, keyword_name)
        except UserError as e:
            raise RequestError(str(e), _field_of(e.field)) from None


def _field_of(name: str | None) -> str | None:
    """A sampler option as the request names it (its length is the prompt's, the gap's and the suffix's)."""
    return {"length": "max_tokens", "num_samples": "n"}.get(name, name)


# ---- answers ---------------------------------------------------------------------------------------
def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """`text` up to the first stop string, and whether one was found."""
    cut = min((text.find(s) for s in stop if s in text), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)


class StreamText:
    """A choice's text as its left-to-right prefix completes: `update(tokens)` (the gap's tokens so far, None
    where not drawn yet) returns the text that is final now (held back: the last partly decoded character,
    and what could still begin a stop string), and whether a stop string ended it."""

    def __init__(self, decode, stop: list[str], gap: int):
        self.decode, self.stop, self.gap = decode, stop, gap
        self.sent, self.stopped = "", False
        self.hold = max((len(s) for s in stop), default=1) - 1

    def update(self, tokens: list[int | None]) -> str:
        known = next((i for i, t in enumerate(tokens) if t is None), len(tokens))
        text = self.decode(tokens[:known]) if known else ""
        done = known == self.gap
        text, self.stopped = cut_at_stop(text, self.stop)
        if not done and not self.stopped:
            text = text.rstrip("\ufffd")
            text = text[: max(len(self.sent), len(text) - self.hold)]
        delta = text[len(self.sent) :] if text.startswith(self.sent) else ""
        self.sent += delta
        return delta


def logprobs_object(tokens: list[int], logp, top: int, decode, text_start: int = 0) -> dict:
    """OpenAI's logprobs object for `tokens`: each token's string, its left-to-right log-probability (`logp`:
    (len(tokens), vocab) log-softmax rows, row j the distribution of tokens[j]), the `top` most likely tokens
    at each position and where each token's text starts (offset by `text_start`)."""
    strings, offsets, position = [], [], text_start
    for t in tokens:
        s = decode([t])
        strings.append(s)
        offsets.append(position)
        position += len(s)
    rows = range(len(tokens))
    token_logprobs = [float(logp[j, t]) for j, t in zip(rows, tokens, strict=True)]
    top_logprobs = []
    for j in rows:
        values, ids = logp[j].topk(top) if top else (logp[j][:0], logp[j][:0].long())
        top_logprobs.append({decode([int(i)]): float(v) for v, i in zip(values.tolist(), ids.tolist(), strict=True)})
    return {"tokens": strings, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}
