"""`aogpt serve` through real clients: the official `openai` package against a server process on 127.0.0.1.
Every completion equals the same request sampled alone by the Python API with the same seed (suffix, lists of
prompts, n, streaming, greedy, the AO extensions, requests side by side); echo + logprobs are the model's
left-to-right log-probabilities; bad requests are OpenAI error objects naming the field."""

from __future__ import annotations

import concurrent.futures
import json

import pytest
import torch

from aogpt_plugin.likelihood import left_to_right_logp
from aogpt_plugin.seeding import sample_seed

from .conftest import Server

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server(symbols_dir):
    server = Server(symbols_dir, "--slots", "4", "--max-tokens", "40", "--max-n", "4")
    yield server
    code, err = server.stop()
    assert code == 0, err[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def words(tokens) -> str:
    return " ".join(str(t) for t in tokens)


def alone(offline, prompt: list[int], gap: int, suffix: list[int] = (), seed: int = 0, **options) -> list[int]:
    """The gap's tokens of the request sampled alone (the Python API, the same seed)."""
    spans = [{"start": 0, "tokens": list(prompt)}] if prompt else []
    if suffix:
        spans.append({"start": len(prompt) + gap, "tokens": list(suffix)})
    spans += options.pop("infill", [])
    length = len(prompt) + gap + len(suffix)
    out = offline.generate(length=length, infill=spans or None, seed=seed, **options)
    return out.tokens[0, len(prompt) : len(prompt) + gap].tolist()


def test_a_completion_with_a_suffix_fills_the_gap_as_the_request_sampled_alone(client, offline):
    answer = client.completions.create(model="tiny", prompt="5 6 7", suffix="9 9", max_tokens=6, seed=3)
    (choice,) = answer.choices
    assert choice.text == words(alone(offline, [5, 6, 7], 6, [9, 9], seed=3))
    assert choice.finish_reason == "length" and choice.model_extra["seed"] == 3
    assert answer.usage.prompt_tokens == 3 and answer.usage.completion_tokens == 6


def test_prompts_and_n_seed_choice_k_as_sample_k_of_the_seed(client, offline):
    """Two prompts (one as token ids) with n=2: choice k = prompt k // 2, seeded sample_seed(seed, k)."""
    answer = client.completions.create(model="tiny", prompt=[[1, 2], [3]], max_tokens=5, n=2, seed=10)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    for choice in answer.choices:
        prompt = [[1, 2], [3]][choice.index // 2]
        expected = alone(offline, prompt, 5, seed=sample_seed(10, choice.index))
        assert choice.text == words(expected) and choice.model_extra["seed"] == sample_seed(10, choice.index)
    assert answer.choices[0].text != answer.choices[1].text


def test_another_seed_gives_another_text(client, offline):  # the comparisons can fail
    answer = client.completions.create(model="tiny", prompt="5 6 7", max_tokens=8, seed=4)
    assert answer.choices[0].text != words(alone(offline, [5, 6, 7], 8, seed=5))


def test_the_ao_extensions_order_steps_top_k_and_infill_spans(client, offline):
    options = dict(order="l2r", steps=3, top_k=5, temperature=0.9, infill=[{"start": 5, "tokens": [40, 41]}])
    answer = client.completions.create(model="tiny", prompt="2", max_tokens=9, seed=1, extra_body=options)
    expected = alone(offline, [2], 9, seed=1, **options)
    assert answer.choices[0].text == words(expected) and expected[4:6] == [40, 41]


def test_temperature_0_is_greedy(client, offline):
    """Top-k 1: left to right, any seed gives the same text (in a random order the seed draws the order)."""
    answer = client.completions.create(
        model="tiny", prompt="4 4", max_tokens=7, temperature=0, seed=8, extra_body={"order": "l2r"}
    )
    assert answer.choices[0].text == words(alone(offline, [4, 4], 7, seed=99, top_k=1, order="l2r"))


def test_streaming_sends_the_left_to_right_prefix_as_it_completes_with_each_steps_draws(client, offline):
    stream = client.completions.create(model="tiny", prompt="1 2 3", max_tokens=12, seed=2, stream=True)
    chunks = [c for c in stream]
    texts = "".join(c.choices[0].text for c in chunks)
    expected = alone(offline, [1, 2, 3], 12, seed=2)
    assert texts == words(expected)
    drawn = [pair for c in chunks for pair in c.choices[0].model_extra.get("drawn", [])]
    assert sorted(p for p, _ in drawn) == list(range(3, 15))  # each gap position once
    assert {p: t for p, t in drawn} == {3 + i: t for i, t in enumerate(expected)}
    assert len([c for c in chunks if c.choices[0].text]) > 1  # the text came in parts
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_cuts_the_text_and_frees_the_slot(client, offline):
    expected = words(alone(offline, [1], 30, seed=6, order="l2r"))
    stop = expected.split(" ")[3]
    answer = client.completions.create(
        model="tiny", prompt="1", max_tokens=30, seed=6, stop=[" " + stop], extra_body={"order": "l2r"}
    )
    assert answer.choices[0].text == expected[: expected.index(" " + stop)]
    assert answer.choices[0].finish_reason == "stop"


def test_echo_with_logprobs_gives_every_prompt_tokens_left_to_right_logprob(server, offline):
    prompt = [7, 3, 9, 12, 5]
    status, answer, _ = server.post(
        "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": 2}
    )
    assert status == 200, answer
    logprobs = answer["choices"][0]["logprobs"]
    expected = left_to_right_logp(offline.module, prompt)
    assert logprobs["token_logprobs"][:5] == [float(expected[j, t]) for j, t in enumerate(prompt)]
    top = expected[1].topk(2)
    assert logprobs["top_logprobs"][1] == {str(int(i)): float(v) for v, i in zip(top.values, top.indices, strict=True)}
    generated = int(logprobs["tokens"][5])
    whole = left_to_right_logp(offline.module, prompt + [generated])
    assert logprobs["token_logprobs"][5] == float(whole[5, generated])
    assert answer["choices"][0]["text"].startswith("7 3 9 12 5 ")
    status, scored, _ = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0})
    assert status == 200 and scored["choices"][0]["logprobs"]["token_logprobs"] == logprobs["token_logprobs"][:5]


def test_requests_side_by_side_each_get_their_lone_tokens(server, offline):
    bodies = [
        {"prompt": [i % 7 + 1], "max_tokens": 6 + 3 * i, "seed": 100 + i, "suffix": "3" if i % 2 else None}
        for i in range(10)
    ]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda b: server.post("/v1/completions", b), bodies))
    for body, (status, answer, _) in zip(bodies, answers, strict=True):
        assert status == 200, answer
        suffix = [3] if body["suffix"] else []
        expected = alone(offline, body["prompt"], body["max_tokens"], suffix, seed=body["seed"])
        assert answer["choices"][0]["text"] == words(expected)


def test_models_health_metrics_and_the_tokenizer_routes(server):
    status, models, _ = server.get("/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["tiny"] and models["data"][0]["max_model_len"] == 48
    assert server.get("/health")[:2] == (200, {"status": "ok"})
    assert server.post("/tokenize", {"prompt": "4 5 6"})[1]["tokens"] == [4, 5, 6]
    assert server.post("/detokenize", {"tokens": [4, 5]})[1] == {"prompt": "4 5"}
    assert server.get("/tokenizer_info")[1]["eos_token"] is None
    _, text, _ = server.get("/metrics")
    for name in ("aogpt_requests_total", "aogpt_generated_tokens_total", "aogpt_queue_depth", "aogpt_slots_busy"):
        assert name in text
    assert server.metric("aogpt_slots") == 4 and server.metric('aogpt_requests_total{outcome="ok"}') >= 1
    assert server.metric("aogpt_steps_total") > 0 and server.metric("aogpt_step_seconds_count") > 0


BAD = [
    (b'{"prompt": "1 2", "max_tokens": ', 400, None, "not valid JSON"),
    ({"prompt": "1", "frequency_penalty": 0.5}, 400, "frequency_penalty", "is not a field of a completion request"),
    ({"prompt": "1", "max_tokens": "8"}, 400, "max_tokens", "max_tokens must be an integer"),
    ({"prompt": "1", "temperature": "hot"}, 400, "temperature", "must be a number"),
    ({"prompt": 5}, 400, "prompt", "prompt must be a string"),
    ({"prompt": " ".join(["1"] * 48)}, 400, "prompt", "prompt too long for the model: prompt 48"),
    ({"prompt": "1 2", "suffix": " ".join(["1"] * 47)}, 400, "suffix", "suffix too long for the model"),
    ({"prompt": "1", "max_tokens": 41}, 400, "max_tokens", "max_tokens=41 is outside 1..40 (--max-tokens)"),
    ({"prompt": "1 2", "max_tokens": 40, "suffix": "3 4 5 6 7 8 9"}, 400, "max_tokens", "exceed its 48 positions"),
    ({"prompt": "1", "n": 5}, 400, "n", "n=5 is outside 1..4"),
    ({"prompt": "1", "steps": 9, "max_tokens": 4}, 400, "steps", "steps=9 is outside the allowed range 1..4"),
    ({"prompt": "1", "order": "r2l"}, 400, "order", "order must be random, l2r or a list of positions"),
    ({"prompt": "1 x"}, 400, "prompt", "reads space-separated integers"),
    ({"prompt": "1", "infill": [{"start": 0, "tokens": [3]}]}, 400, "infill", "position 0 is given twice"),
    ({"prompt": "1", "model": "gpt-4"}, 404, "model", "The model 'gpt-4' does not exist; this server serves 'tiny'"),
    ({"prompt": "1", "stream": True, "logprobs": 1}, 400, "logprobs", "logprobs with stream is not supported"),
]


@pytest.mark.parametrize("body, status, param, message", BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)])
def test_a_bad_request_is_an_openai_error_naming_the_field(server, body, status, param, message):
    raw = body if isinstance(body, bytes) else None
    got, answer, _ = server.post("/v1/completions", body, raw=raw)
    assert got == status, answer
    error = answer["error"]
    assert error["param"] == param and message in error["message"], error
    assert error["type"] == "invalid_request_error"


def test_the_openai_client_raises_its_own_error_with_the_servers_message(client):
    with pytest.raises(openai.BadRequestError, match="max_tokens=41 is outside"):
        client.completions.create(model="tiny", prompt="1", max_tokens=41)


def test_a_streamed_choice_and_the_answer_agree_on_json_events(server):
    """The raw stream: `data: {json}` events, then `data: [DONE]`."""
    import urllib.request

    body = json.dumps({"prompt": "2 2", "max_tokens": 5, "seed": 1, "stream": True, "n": 2}).encode()
    request = urllib.request.Request(server.url + "/v1/completions", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.read().decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    texts = {0: "", 1: ""}
    for chunk in chunks:
        texts[chunk["choices"][0]["index"]] += chunk["choices"][0]["text"]
    _, answer, _ = server.post("/v1/completions", {"prompt": "2 2", "max_tokens": 5, "seed": 1, "n": 2})
    assert [texts[0], texts[1]] == [c["text"] for c in answer["choices"]]


def test_no_gradients_and_float_rows_are_what_the_model_gives(offline):
    """left_to_right_logp, the server's scoring, is token_nll's numbers (the likelihood every path shares)."""
    from aogpt_plugin.likelihood import token_nlls

    tokens = torch.tensor([[3, 9, 1, 4]])
    logp = left_to_right_logp(offline.module, tokens[0].tolist())
    nll = token_nlls(offline.module, tokens, None)[0]
    assert torch.equal(-logp.gather(1, tokens[0][:, None])[:, 0], nll)
