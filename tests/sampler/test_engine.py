"""The continuous-batching engine: a sample's tokens are those it gets drawn alone with the same seed, whatever
runs beside it and whenever it joins (dynamic step, static step, inductor-compiled on a CPU; CUDA graphs in
the gpu suite); samples leave when done and others take their slots; a cancelled job leaves at the next step
boundary; a failed step or non-finite logits fail only what they must; fixed batching waits for the batch."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin.sampler.engine import Engine
from aogpt_plugin.sampler.generation import generate
from aogpt_plugin.sampler.request import SampleRequest

# mixed requests: prompts, infill spans, lengths, orders, seeds, steps, counts, schedules and sampling options
REQUESTS = [
    dict(length=20, seed=11, infill=[{"start": 0, "tokens": [5, 6, 7]}]),
    dict(length=40, seed=5, order="l2r"),
    dict(length=16, seed=7, infill=[{"start": 2, "tokens": [9, 8]}, {"start": 10, "tokens": [7]}], steps=4),
    dict(length=12, seed=2, order=[11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6], infill=[{"start": 0, "tokens": [4]}]),
    dict(length=30, seed=3, steps=5, counts="binomial"),
    dict(length=25, seed=4, temperature=0.8, top_p=0.9, top_k=20),
    dict(length=18, seed=9, top_k=1),
    dict(length=22, seed=13, top_p=0.5, schedule="cosine", steps=7),
]


class Collect:
    """A listener keeping what the engine says: finished tokens, each step's drawn pairs, failures."""

    def __init__(self):
        self.tokens, self.pairs, self.failures = {}, {}, {}

    def drawn(self, job, sample, pairs):
        self.pairs.setdefault((job.name, sample), []).append(pairs)

    def finished(self, job, sample, output):
        self.tokens[(job.name, sample)] = output.tokens

    def failed(self, job, message):
        self.failures[job.name] = message


def plan_of(model, graphs: str, **request):
    return SampleRequest(backend="sdpa", graphs=graphs, **request).plan(model.model_args, None, "cpu", torch.float32)


def alone(model, plan) -> list[list[int]]:
    result = generate(model, plan.config, plan.prompts, order=plan.order, choices=plan.choices)
    return [result.sample_tokens(b) for b in range(plan.config.num_samples)]


def run_joining(engine: Engine, plans: list, first: int, every: int, listener: Collect) -> int:
    """Submit `first` plans, then one more every `every` steps while the others run; returns the steps run."""
    for i in range(first):
        engine.submit(plans[i], listener).name = i
    k, steps = first, 0
    while not engine.idle() or k < len(plans):
        engine.step()
        steps += 1
        if steps % every == 0 and k < len(plans):
            engine.submit(plans[k], listener).name = k
            k += 1
    return steps


@pytest.mark.parametrize("graphs", ["off", "static"])
def test_each_request_gets_its_lone_runs_tokens_whatever_runs_beside_it_and_whenever_it_joins(ao_model, graphs):
    plans = [plan_of(ao_model, graphs, **r) for r in REQUESTS]
    engine = Engine(ao_model, 3, plans[0].choices)
    got = Collect()
    run_joining(engine, plans, first=4, every=3, listener=got)
    for i, plan in enumerate(plans):
        assert got.tokens[(i, 0)] == alone(ao_model, plan)[0], i
    assert not got.failures and engine.busy == 0 and engine.queued == 0


def test_a_request_of_several_samples_gets_each_its_own_seed_and_tokens(ao_model):
    """`num_samples` 3: three rows, sample i seeded sample_seed(seed, i), as a batch of three alone."""
    plan = plan_of(ao_model, "off", num_samples=3, length=14, seed=21, steps=5)
    engine, got = Engine(ao_model, 2, plan.choices), Collect()
    run_joining(engine, [plan_of(ao_model, "off", length=30, seed=1), plan], first=2, every=1, listener=got)
    expected = alone(ao_model, plan)
    assert [got.tokens[(1, b)] for b in range(3)] == expected and len({tuple(t) for t in expected}) == 3


def test_the_check_can_fail_another_seed_gives_other_tokens(ao_model):  # the comparisons above can fail
    plan = plan_of(ao_model, "off", **REQUESTS[0])
    other = plan_of(ao_model, "off", **{**REQUESTS[0], "seed": 12})
    engine, got = Engine(ao_model, 2, plan.choices), Collect()
    run_joining(engine, [other], first=1, every=1, listener=got)
    assert got.tokens[(0, 0)] != alone(ao_model, plan)[0]


def test_the_drawn_pairs_rebuild_the_sample_and_keep_its_given_tokens(ao_model):
    """Each step's (position, token) pairs (what the server streams) cover every generated position once,
    in the sample's order, and with the given tokens make up its tokens."""
    request = REQUESTS[2]
    plan = plan_of(ao_model, "static", **request)
    engine, got = Engine(ao_model, 2, plan.choices), Collect()
    run_joining(engine, [plan], first=1, every=1, listener=got)
    tokens, steps = got.tokens[(0, 0)], got.pairs[(0, 0)]
    assert len(steps) == request["steps"]
    drawn = dict(pair for pairs in steps for pair in pairs)
    given = {s["start"] + i: t for s in request["infill"] for i, t in enumerate(s["tokens"])}
    assert sorted(drawn) == sorted(set(range(request["length"])) - set(given))
    assert [drawn.get(p, given.get(p)) for p in range(request["length"])] == tokens


def test_slots_are_reused_and_a_waiting_request_joins_as_soon_as_one_is_free(ao_model):
    short, long = (plan_of(ao_model, "off", length=n, seed=n) for n in (4, 30))
    engine, got = Engine(ao_model, 2, short.choices), Collect()
    for name, plan in enumerate([long, short, short]):
        engine.submit(plan, got).name = name
    busy = []
    while not engine.idle():
        engine.step()
        busy.append((engine.busy, engine.queued))
    assert busy[0] == (2, 1)  # two running, one waiting
    assert busy[4] == (2, 0)  # the short one left after its 4 steps and the third took its slot
    assert len(busy) == 30  # the long one alone sets the pace: 30 steps for all three


def test_fixed_batching_waits_for_the_whole_batch(ao_model):
    short, long = (plan_of(ao_model, "off", length=n, seed=n) for n in (4, 30))
    engine, got = Engine(ao_model, 2, short.choices, batching="fixed"), Collect()
    for name, plan in enumerate([long, short, short]):
        engine.submit(plan, got).name = name
    steps = 0
    while not engine.idle():
        engine.step()
        steps += 1
    assert steps == 30 + 4  # the third waited for the long one
    assert got.tokens[(2, 0)] == got.tokens[(1, 0)] == alone(ao_model, short)[0]


def test_a_cancelled_job_leaves_its_slot_at_the_next_step_boundary(ao_model):
    plans = [plan_of(ao_model, "static", length=30, seed=s) for s in (1, 2)]
    engine, got = Engine(ao_model, 1, plans[0].choices), Collect()
    first = engine.submit(plans[0], got)
    first.name = 0
    engine.submit(plans[1], got).name = 1
    engine.step()
    engine.step()
    engine.cancel(first)
    assert engine.step() == 1 and engine.rows[0].job is not first  # the next step runs the other one
    while not engine.idle():
        engine.step()
    assert (0, 0) not in got.tokens and got.tokens[(1, 0)] == alone(ao_model, plans[1])[0]


def nan_at_last_position(model) -> torch.nn.Module:
    """A copy of `model` whose target embedding of its last position is huge (finite weights): a sample that
    reaches that position gets non-finite logits, a shorter one does not."""
    import copy

    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.target_embeddings.weight[-1] = 1e20
    return broken


@pytest.mark.parametrize("graphs", ["off", "static"])
def test_non_finite_logits_fail_that_request_alone_and_the_slot_serves_again(ao_model, graphs):
    model = nan_at_last_position(ao_model)
    bad = plan_of(model, graphs, length=model.model_args.max_seq_len, seed=1)
    good = [plan_of(model, graphs, length=n, seed=n) for n in (18, 12)]
    engine, got = Engine(model, 2, bad.choices), Collect()
    run_joining(engine, [good[0], bad, good[1]], first=2, every=2, listener=got)
    assert got.failures == {1: "the model's logits were not finite"}
    assert got.tokens[(0, 0)] == alone(model, good[0])[0]
    assert got.tokens[(2, 0)] == alone(model, good[1])[0]  # it ran in the failed request's slot


def test_a_step_that_raises_fails_its_requests_and_the_engine_goes_on(ao_model, monkeypatch):
    plans = [plan_of(ao_model, "off", length=10, seed=s) for s in (1, 2, 3)]
    engine, got = Engine(ao_model, 2, plans[0].choices), Collect()
    for name, plan in enumerate(plans[:2]):
        engine.submit(plan, got).name = name
    engine.step()
    run = engine._slots.run
    monkeypatch.setattr(engine._slots, "run", lambda *a: (_ for _ in ()).throw(RuntimeError("device lost")))
    engine.step()
    assert got.failures == {
        0: "the step failed (RuntimeError: device lost)",
        1: "the step failed (RuntimeError: device lost)",
    }
    monkeypatch.setattr(engine._slots, "run", run)
    engine.submit(plans[2], got).name = 2
    while not engine.idle():
        engine.step()
    assert got.tokens[(2, 0)] == alone(ao_model, plans[2])[0]


def test_the_compiled_static_step_gives_the_lone_runs_tokens(ao_model):
    """Inductor on a CPU (`--graphs on` resolves to it): one step shape, rows joining at different steps."""
    plans = [plan_of(ao_model, "on", length=n, seed=n) for n in (20, 9, 14)]
    engine, got = Engine(ao_model, 2, plans[0].choices), Collect()
    run_joining(engine, plans, first=1, every=2, listener=got)
    for i, plan in enumerate(plans):
        assert got.tokens[(i, 0)] == alone(ao_model, plan)[0], i
    assert engine.compile_seconds() > 0


@pytest.mark.slow
def test_the_compiled_static_step_gives_the_lone_runs_tokens_for_mixed_requests(ao_model):
    plans = [plan_of(ao_model, "on", **r) for r in REQUESTS]
    engine, got = Engine(ao_model, 3, plans[0].choices), Collect()
    run_joining(engine, plans, first=4, every=3, listener=got)
    for i, plan in enumerate(plans):
        assert got.tokens[(i, 0)] == alone(ao_model, plan)[0], i


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_graphed_static_step_gives_the_lone_runs_tokens_on_cuda():
    model = tiny_model("adaln", preset="sampler").cuda()
    plans = [SampleRequest(graphs="on", **r).plan(model.model_args, None, "cuda", torch.float32) for r in REQUESTS]
    engine, got = Engine(model, 3, plans[0].choices), Collect()
    run_joining(engine, plans, first=4, every=3, listener=got)
    for i, plan in enumerate(plans):
        assert got.tokens[(i, 0)] == alone(model, plan)[0], i
    assert engine._slots.state.slots_runner.captured > 0


def test_fail_all_fails_every_job_in_a_slot_or_waiting_once(ao_model):
    plans = [plan_of(ao_model, "off", length=10, seed=s) for s in (1, 2, 3)]
    engine, got = Engine(ao_model, 2, plans[0].choices), Collect()
    for name, plan in enumerate(plans):
        engine.submit(plan, got).name = name
    engine.step()
    engine.fail_all("the engine failed (RuntimeError: x)")
    assert got.failures == {i: "the engine failed (RuntimeError: x)" for i in range(3)} and engine.idle()
