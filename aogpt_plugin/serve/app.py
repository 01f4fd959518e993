"""The HTTP side of `aogpt serve` (FastAPI): the routes, their limits and errors, and a completion driven from
its samples' events to its answer (JSON, or server-sent events as the text's left-to-right prefix completes).

    POST /v1/completions   OpenAI's completions (completions.py: fields, extensions, answers)
    GET  /v1/models        the one model served
    GET  /health           200 {"status": "ok"}; 503 while draining (no key needed)
    GET  /metrics          Prometheus text (metrics.py)
    GET  /tokenizer_info, POST /tokenize, POST /detokenize
                           the model's tokenizer, as vLLM serves it: lm-eval's `local-completions` tokenizes
                           through them (its remote tokenizer), so it needs no tokenizer files of its own

Errors are OpenAI's error object {"error": {"message", "type", "param", "code"}}: 400 a bad request (the
field named), 401 a missing or wrong key, 404 another model, 413 a body over --max-body-bytes, 429 a full
queue (Retry-After), 500 a step that failed for this request, 503 while draining (Retry-After).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .completions import Limits, RequestError, StreamText, cut_at_stop, logprobs_object, parse_completion, plan_choices
from .worker import Bridge

RETRY_AFTER_SECONDS = 1
DISCONNECT_POLL_SECONDS = 0.02


@dataclass
class ServerState:
    """What the routes share: the worker (engine thread), the model's facts, the limits and the key."""

    worker: object
    metrics: object
    model: object
    tokenizer: object
    model_name: str
    plan: object  # plan(SampleRequest, spell) -> SamplePlan
    limits: Limits
    max_body_bytes: int
    max_queue: int
    api_key: str | None = None
    draining: bool = False
    in_flight: int = 0
    cut: int = 0  # requests failed by a drain's deadline
    created: int = field(default_factory=lambda: int(time.time()))
    runs: set = field(default_factory=set)  # the completions in flight (a drain's deadline cuts them)

    @property
    def positions(self) -> int:
        return self.model.model_args.max_seq_len

    @property
    def vocab_size(self) -> int:
        return self.model.model_args.vocab_size


def error_response(error: RequestError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="aogpt", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.aogpt = state

    @app.middleware("http")
    async def require_key(request: Request, call_next):
        if state.api_key is not None and request.url.path != "/health":
            given = request.headers.get("authorization", "")
            scheme, _, key = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), state.api_key.encode()):
                why = "no API key given (Authorization: Bearer KEY)" if not given else "the API key is wrong"
                return error_response(RequestError(why, None, 401))
        return await call_next(request)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, error: RequestError):
        return error_response(error)

    @app.get("/health")
    async def health():
        if state.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": state.model_name,
                    "object": "model",
                    "created": state.created,
                    "owned_by": "aogpt",
                    "max_model_len": state.positions,
                }  # fmt: skip
            ],
        }

    @app.get("/metrics")
    async def metrics():
        return Response(state.metrics.text(), media_type="text/plain; version=0.0.4")

    @app.get("/tokenizer_info")
    async def tokenizer_info():
        eos = state.tokenizer.eos_id
        eos_token = None if eos is None else state.tokenizer.decode([eos])
        return {"tokenizer_class": state.tokenizer.name, "eos_token": eos_token, "bos_token": None,
                "pad_token": None, "model_max_length": state.positions}  # fmt: skip

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await _json_body(request, state)
        text = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise RequestError('POST /tokenize takes {"prompt": TEXT}', "prompt")
        tokens = _encode(state, text)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": state.positions}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        body = await _json_body(request, state)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and 0 <= t < state.vocab_size for t in tokens):
            raise RequestError(f'POST /detokenize takes {{"tokens": [ids in 0..{state.vocab_size - 1}]}}', "tokens")
        return {"prompt": state.tokenizer.decode(tokens)}

    @app.post("/v1/completions")
    async def completions(request: Request):
        if state.draining:
            state.metrics.requests.labels("rejected").inc()
            error = RequestError("the server is stopping; send the request to another", None, 503, "server_error")
            return error_response(error, {"Retry-After": str(RETRY_AFTER_SECONDS)})
        try:
            body = await _json_body(request, state)
            completion = parse_completion(
                body, model_name=state.model_name, positions=state.positions, vocab_size=state.vocab_size,
                encode=state.tokenizer.encode, limits=state.limits,
            )  # fmt: skip
            plan_choices(completion, state.plan)
        except RequestError as e:
            state.metrics.requests.labels("client_error").inc()
            return error_response(e)
        samples = sum(c.plan is not None for c in completion.choices)
        if samples and state.worker.waiting() + samples > state.max_queue:
            state.metrics.requests.labels("rejected").inc()
            error = RequestError(
                f"the queue is full ({state.max_queue} samples wait for a slot: --max-queue); retry later",
                None, 429, "rate_limit_error",
            )  # fmt: skip
            return error_response(error, {"Retry-After": str(RETRY_AFTER_SECONDS)})
        state.metrics.prompt_tokens.inc(completion.prompt_tokens)
        run = CompletionRun(state, completion)
        state.in_flight += 1
        state.runs.add(run)
        if completion.stream:
            return StreamingResponse(run.sse(), media_type="text/event-stream")
        try:
            return await run.answer(request)
        finally:
            run.close()

    return app


async def _json_body(request: Request, state: ServerState):
    """The body parsed as JSON; over --max-body-bytes: 413, read no further; not JSON: 400."""
    limit = state.max_body_bytes
    declared = request.headers.get("content-length")
    too_large = RequestError(f"the request body is over {limit} bytes (--max-body-bytes)", None, 413)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_large
    try:
        return json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the request body is not valid JSON ({e})") from None


def _encode(state: ServerState, text: str) -> list[int]:
    from ..errors import UserError

    try:
        return list(state.tokenizer.encode(text))
    except UserError as e:
        raise RequestError(str(e), "prompt") from None


class CompletionRun:
    """One completion in flight: its choices' samples submitted to the worker, their events turned into the
    answer. `close` (on any end: done, failed, the client gone, a drain's deadline) cancels what still runs."""

    def __init__(self, state: ServerState, completion):
        self.state, self.completion = state, completion
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.jobs: dict = {}  # choice index -> its Job
        self.rests: dict = {}  # choice index -> the text of its gap not streamed yet
        self.closed = False
        self.events: asyncio.Queue | None = None
        self.outcome = "cancelled"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for job in self.jobs.values():
            self.state.worker.call(lambda job=job: self.state.worker.engine.cancel(job))
        self.state.in_flight -= 1
        self.state.runs.discard(self)
        self.state.metrics.requests.labels(self.outcome).inc()

    def cut(self) -> None:
        """A drain's deadline: this run ends with 503 (its samples are cancelled)."""
        if self.events is not None:
            self.events.put_nowait((None, "failed", "the server stopped before the request finished (--drain-seconds)"))
            self.state.cut += 1

    def _chunk(self, index: int, text: str, finish: str | None, drawn: list | None = None) -> dict:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        if drawn is not None:
            choice["drawn"] = drawn
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.completion.model, "choices": [choice]}  # fmt: skip

    async def _events(self):
        """Submit every choice's sample; yield ("chunk", dict) as the texts grow, then ("done", answer) or
        ("error", RequestError)."""
        loop = asyncio.get_running_loop()
        self.events = events = asyncio.Queue()
        completion, decode = self.completion, self.state.tokenizer.decode
        gaps, texts, outputs = {}, {}, {}
        for choice in completion.choices:
            gap = [None] * choice.gap
            if choice.plan is not None:
                prompt = choice.plan.prompt_of(0)
                start = len(choice.prompt)
                for position, token in zip(prompt.positions, prompt.tokens, strict=True):
                    if start <= position < start + choice.gap:
                        gap[position - start] = token
                job = await asyncio.wrap_future(
                    self.state.worker.submit(choice.plan, Bridge(loop, events, choice.index))
                )
                self.jobs[choice.index] = job
            gaps[choice.index] = gap
            texts[choice.index] = StreamText(decode, completion.stop, choice.gap)
            if completion.echo and completion.stream:
                yield "chunk", self._chunk(choice.index, decode(choice.prompt), None)
        running = {c.index for c in completion.choices if c.plan is not None}
        for choice in completion.choices:
            if choice.plan is None:
                outputs[choice.index] = []
        by_index = {c.index: c for c in completion.choices}
        while running:
            index, kind, value = await events.get()
            if kind == "failed":
                status = 503 if index is None else 500
                yield "error", RequestError(value, None, status, "server_error")
                return
            if index not in running:
                continue
            start = len(by_index[index].prompt)
            if kind == "drawn":
                gap = gaps[index]
                for position, token in value:
                    if start <= position < start + len(gap):
                        gap[position - start] = token
                delta = texts[index].update(gap)
                if delta or completion.stream:
                    yield "chunk", self._chunk(index, delta, None, [list(p) for p in value])
                if texts[index].stopped:  # the rest of the gap cannot change the text: its slot is freed
                    running.discard(index)
                    job = self.jobs[index]
                    self.state.worker.call(lambda job=job: self.state.worker.engine.cancel(job))
            elif kind == "done":
                gaps[index] = value.tokens[start : start + by_index[index].gap]
                texts[index].update(gaps[index])
                running.discard(index)
        yield "done", await self._answer(gaps, texts)

    async def _answer(self, gaps: dict, texts: dict) -> dict:
        """The answer's choices (text, finish reason, logprobs, seed) and usage."""
        completion, decode = self.completion, self.state.tokenizer.decode
        choices, generated = [], 0
        for choice in completion.choices:
            stream = texts[choice.index]
            gap = gaps[choice.index]
            known = next((i for i, t in enumerate(gap) if t is None), len(gap))
            text, stopped = cut_at_stop(decode(gap[:known]) if known else "", completion.stop)
            kept = _tokens_covering(gap[:known], text, decode) if stopped else gap
            generated += len(kept)
            prefix = _prompt_text(decode, choice.prompt, kept) if completion.echo else ""
            logprobs = None
            if completion.logprobs is not None:
                logprobs = await self._logprobs(choice, kept, len(prefix))
            choices.append(
                {
                    "index": choice.index,
                    "text": prefix + text,
                    "logprobs": logprobs,
                    "finish_reason": "stop" if stopped else "length",
                    "seed": choice.seed,
                }  # fmt: skip
            )
            self.rests[choice.index] = text[len(stream.sent) :] if text.startswith(stream.sent) else ""
        self.state.metrics.generated_tokens.inc(generated)
        usage = {"prompt_tokens": completion.prompt_tokens, "completion_tokens": generated}
        usage["total_tokens"] = usage["prompt_tokens"] + generated
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": completion.model,
                "choices": choices, "usage": usage}  # fmt: skip

    async def _logprobs(self, choice, kept: list[int], prefix_chars: int) -> dict:
        """Left-to-right log-probabilities of the prompt (with echo: a forward over the prompt alone) and of the
        kept completion tokens given the prompt (a forward over both), on the engine's thread."""
        from ..likelihood import left_to_right_logp

        worker, top = self.state.worker, self.completion.logprobs
        parts = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        decode = self.state.tokenizer.decode
        if self.completion.echo and choice.prompt:
            logp = await asyncio.wrap_future(
                worker.call(lambda: left_to_right_logp(worker.engine.model, choice.prompt))
            )
            for key, values in logprobs_object(choice.prompt, logp, top, decode).items():
                parts[key] += values
        if kept:
            whole = choice.prompt + kept
            logp = await asyncio.wrap_future(worker.call(lambda: left_to_right_logp(worker.engine.model, whole)))
            rows = logp[len(choice.prompt) :]
            for key, values in logprobs_object(kept, rows, top, decode, prefix_chars).items():
                parts[key] += values
        return parts

    async def answer(self, request: Request):
        """The JSON answer, or an error; the client's leaving cancels the samples (checked every 20 ms)."""
        result = {}

        async def drive():
            async for kind, value in self._events():
                if kind in ("done", "error"):
                    result[kind] = value

        task = asyncio.ensure_future(drive())
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                self.outcome = "cancelled"
                return Response(status_code=499)
        task.result()
        if "error" in result:
            self.outcome = "server_error"
            return error_response(result["error"])
        self.outcome = "ok"
        return result["done"]

    async def sse(self):
        """Server-sent events: each step's chunk per choice (its new text and the (position, token) pairs drawn),
        a last chunk per choice with its finish reason (and the usage when asked), then [DONE]."""
        try:
            async for kind, value in self._events():
                if kind == "chunk":
                    yield _event(value)
                elif kind == "error":
                    self.outcome = "server_error"
                    yield _event(value.body())
                    yield "data: [DONE]\n\n"
                    return
                else:
                    for choice in value["choices"]:
                        chunk = self._chunk(choice["index"], self.rests[choice["index"]], choice["finish_reason"], [])
                        chunk["choices"][0]["seed"] = choice["seed"]
                        yield _event(chunk)
                    if self.completion.include_usage:
                        usage = {**self._chunk(0, "", None), "choices": [], "usage": value["usage"]}
                        yield _event(usage)
                    self.outcome = "ok"
            yield "data: [DONE]\n\n"
        finally:
            self.close()


def _event(data: dict) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _prompt_text(decode, prompt: list[int], completion: list[int]) -> str:
    """The prompt's part of the text of prompt + completion (a tokenizer may join tokens with a separator)."""
    whole, rest = decode(prompt + completion), decode(completion) if completion else ""
    return whole[: len(whole) - len(rest)] if whole.endswith(rest) else decode(prompt)


def _tokens_covering(tokens: list[int], text: str, decode) -> list[int]:
    """The fewest leading tokens whose text covers `text` (a stop cut it inside the gap)."""
    for k in range(len(tokens) + 1):
        if len(decode(tokens[:k])) >= len(text):
            return tokens[:k]
    return tokens
