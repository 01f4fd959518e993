"""The static decode step (sampler/static.py): the dynamic sampler's samples, at fixed shapes, with no host
reads, no graph breaks, no recompiles and no moving buffers -- what lets a GPU replay it from CUDA graphs."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.utils as dynamo_utils
from conftest import cache_sized_allocations, kernel_ops, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from aogpt_plugin.sampler import Prompt, SampleConfig, SamplingParams, generate
from aogpt_plugin.sampler.choices import parse_decode_attention
from aogpt_plugin.sampler.prompt import sample_orders
from aogpt_plugin.sampler.sampling import step_counts
from aogpt_plugin.sampler.static import decode_step, plan_steps, static_decoder, static_slots, width_bucket

from .test_generate import assert_cache_exact

N = 23
# The sampler test matrix: T = n, parallel deterministic and binomial (ragged) steps under both time grids,
# batch sizes 1 to 4, a scattered prompt, user orders, left to right, top-k/top-p/temperature.
MATRIX = {
    "T=n": dict(steps=N, num_samples=3),
    "deterministic-linear-B1": dict(steps=7, num_samples=1),
    "deterministic-cosine": dict(steps=7, schedule="cosine", num_samples=4),
    "binomial-linear": dict(steps=5, counts="binomial", num_samples=3),
    "binomial-cosine": dict(steps=11, counts="binomial", schedule="cosine", num_samples=3),
    "prompt-binomial": dict(
        steps=4, counts="binomial", num_samples=2, prompt=Prompt((0, 1, 9, 17, 18), (5, 6, 7, 8, 9))
    ),
    "user-order": dict(
        steps=N,
        num_samples=2,
        order=torch.stack([torch.randperm(N, generator=torch.Generator().manual_seed(1)), torch.arange(N - 1, -1, -1)]),
    ),
    "l2r": dict(steps=N, num_samples=2, order_name="l2r"),
    "filtered-T=n/2": dict(steps=11, num_samples=2, sampling=SamplingParams(temperature=0.8, top_k=20, top_p=0.9)),
}


def _run(model, case: dict, graphs: str, backend: str = "sdpa", seed: int = 3, length: int = N, **options):
    case = dict(case)
    prompt, order = case.pop("prompt", None), case.pop("order", None)
    order_name = case.pop("order_name", "random")
    config = SampleConfig(length=length, order=order_name, seed=seed, backend=backend, graphs=graphs, **case, **options)
    return generate(model, config, prompt, order=order, record=True)


# binomial-cosine compiled (26 s with a cold inductor cache) in make test-slow; binomial-linear covers it compiled
@pytest.mark.parametrize(
    ("graphs", "case"),
    [
        pytest.param(g, c, marks=pytest.mark.slow if (g, c) == ("on", "binomial-cosine") else (), id=f"{g}-{c}")
        for g in ("static", "on")
        for c in MATRIX
    ],
)
def test_the_static_step_samples_what_the_dynamic_sampler_samples(ao_model, case, graphs):
    """Same tokens, orders and forwards as graphs=off; cached logits equal recomputation.
    `on` is the inductor-compiled step on a CPU."""
    ref = _run(ao_model, MATRIX[case], "off")
    got = _run(ao_model, MATRIX[case], graphs)
    assert torch.equal(got.tokens, ref.tokens)
    assert torch.equal(got.orders, ref.orders)
    assert got.forward_passes == ref.forward_passes
    assert_cache_exact(ao_model, got)


@pytest.mark.parametrize("decode_attention", ["auto", "full"])
@pytest.mark.parametrize("case", ["T=n", "binomial-cosine", "prompt-binomial"])
def test_the_static_step_with_flex_attention(ao_model, case, decode_attention):
    """The kv-block lists built on the device (FlexAttention) give the dense mask's tokens, in either
    layout (auto: every touched block partial; full: full blocks listed)."""
    ref = _run(ao_model, MATRIX[case], "off", backend="sdpa")
    got = _run(ao_model, MATRIX[case], "static", backend="flex", decode_attention=decode_attention)
    assert torch.equal(got.tokens, ref.tokens)
    assert_cache_exact(ao_model, got)


@pytest.mark.parametrize("conditioning", ["none", "concat"])
def test_the_static_step_for_the_other_conditionings(conditioning):
    model = tiny_model(conditioning, preset="sampler")
    for case in ("T=n", "binomial-linear"):
        assert torch.equal(_run(model, MATRIX[case], "static").tokens, _run(model, MATRIX[case], "off").tokens)


def _state_and_plan(
    model, batch=3, steps=9, counts="binomial", backend="sdpa", mode="static", given=(), decode_attention=None
):
    state = static_decoder(model, batch, backend, "aten", mode, decode_attention)
    generators = [torch.Generator().manual_seed(4 + b) for b in range(batch)]
    counts = step_counts([N - len(given)] * batch, steps, "linear", counts, generators)
    given_counts = torch.full((batch,), len(given))
    plan = plan_steps(counts, given_counts)
    prompt = Prompt(tuple(range(len(given))), tuple(given))
    orders = sample_orders(N, (N,) * batch, (prompt,) * batch, ("random",) * batch, generators)
    given_table = torch.zeros(batch, N, dtype=torch.long)
    given_table[:, : len(given)] = torch.tensor(given, dtype=torch.long)
    state.start(orders, given_table, given_counts, torch.arange(batch) + 100, plan)
    return state, plan


def _step(state, plan, k, sampling=None):
    sampling = sampling or SamplingParams()
    width, rows = plan.shapes()[k]
    return decode_step(state, state.arange(width), state.arange(rows, "r"), sampling)


def test_the_host_plan_is_the_state_the_device_reaches(ao_model):
    """Before every step the device's known / cache_len / pending equal the plan the host made from the
    counts alone, and each step's width fits its bucket."""
    state, plan = _state_and_plan(ao_model, given=(4, 5))
    assert (plan.counts.max(dim=0).values > 0).all() and (plan.counts == 0).any()  # ragged, no empty step
    for k in range(plan.steps):
        for name in ("known", "cache_len", "pending"):
            assert torch.equal(getattr(state, name), getattr(plan, name)[:, k]), (name, k)
        _step(state, plan, k)
        assert torch.equal(state.width, plan.width[:, k])
        assert int(plan.width[:, k].max()) <= plan.shapes()[k][0] == width_bucket(int(plan.width[:, k].max()))
    assert torch.equal(state.known, torch.full((3,), N))


def test_a_step_keeps_every_buffer_where_it_was(ao_model):
    state, plan = _state_and_plan(ao_model)
    buffers = [state._flat, *state.decoder.cache.k, *state.decoder.cache.v, state.noise.flat, state.draw_keys]
    buffers += state._aranges.values()
    before = [b.data_ptr() for b in buffers]
    for k in range(plan.steps):
        _step(state, plan, k)
    assert [b.data_ptr() for b in buffers] == before
    for name in ("order", "in_order", "plan", "known", "cache_len", "pending", "width", "noise_keys", "step_index"):
        assert getattr(state, name).data_ptr() == state.view(name).data_ptr()  # views of the one flat buffer


def _kernels_of_a_step(layers: int, conditioning: str = "adaln") -> list[str]:
    model = tiny_model(conditioning, seed=4, preset="sampler", n_layers=layers)
    state, plan = _state_and_plan(model, batch=2, steps=N, counts="deterministic")
    for k in range(N // 2):
        _step(state, plan, k)
    width, rows = plan.shapes()[N // 2]
    q, r = state.arange(width), state.arange(rows, "r")
    with torch.inference_mode():  # as `generate` runs it
        return kernel_ops(lambda: decode_step(state, q, r, SamplingParams()))


def test_a_decode_step_launches_few_kernels_in_and_around_its_layers():
    """A decode step on a GPU is bound by its kernel launches (~2 us each, replayed from a CUDA graph;
    docs/benchmarks.md), so its kernels are pinned: at most 16 a layer (the modulation rows of every layer
    come from one gather, decoder.BlockModulation) and at most 106 outside the layers (the step's
    bookkeeping, its mask, the head and the draw). The draw hashes the vocabulary once (both lanes in one
    tensor, each lane two PCG rounds so that every bit depends on the whole key and the token: 11 kernels
    more than one round) and looks its rows' keys up in the run's table (noise.py: `parallel_draw_keys`);
    hashing them in the step cost ~250 kernels more, gathering each layer's rows 1 a layer more."""
    two, four = _kernels_of_a_step(2), _kernels_of_a_step(4)
    per_layer = (len(four) - len(two)) // 2
    outside = len(two) - 2 * per_layer
    print(f"kernels of a decode step: {per_layer} a layer, {outside} outside the layers")  # shown with -s
    assert per_layer <= 16 and outside <= 106, (per_layer, outside, two)
    assert sum(op.startswith(("bitwise", "__rshift__", "__and__")) for op in two) <= 18, two


def test_adaln_costs_a_decode_step_two_kernels_a_layer_over_ar():
    """AO(T=n)/AR <= 1.15 (issue 40): `--graphs on` runs AR as this same step on the conditioning-free
    backbone, so on a launch-bound GPU the ratio is about the ratio of their kernels. AdaLN's modulations
    and gates may add 2 kernels a layer (4 addcmuls where AR has 2 adds) and nothing outside the layers but
    the one gather of every block's rows and the head's table."""
    ao = [len(_kernels_of_a_step(layers)) for layers in (2, 4)]
    ar = [len(_kernels_of_a_step(layers, "none")) for layers in (2, 4)]
    (ao_layer, ao_outside), (ar_layer, ar_outside) = [((k4 - k2) // 2, 2 * k2 - k4) for k2, k4 in (ao, ar)]
    print(f"kernels: AO {ao_layer} a layer + {ao_outside}, AR {ar_layer} + {ar_outside}")  # shown with -s
    assert ao_layer - ar_layer <= 2 and ao_outside - ar_outside <= 4, (ao, ar)


class NoHostReads(TorchDispatchMode):
    """Fails on every operation that reads a device value on the host or moves data between devices."""

    FORBIDDEN = ("_local_scalar_dense", "item", "is_nonzero", "nonzero", "equal")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.FORBIDDEN:
            raise AssertionError(f"host read inside the step: {name}")
        if name == "_to_copy" and "device" in (kwargs or {}):
            raise AssertionError(f"device copy inside the step: {kwargs['device']}")
        return func(*args, **(kwargs or {}))


def test_no_host_read_inside_the_step(ao_model):
    state, plan = _state_and_plan(ao_model)
    with NoHostReads():
        for k in range(plan.steps):
            _step(state, plan, k, SamplingParams(temperature=0.9, top_k=30, top_p=0.95))


def test_no_host_read_in_the_flex_block_lists(ao_model):
    """FlexAttention's kernel cannot run under a dispatch mode; its BlockMask, built in the step, can."""
    state, plan = _state_and_plan(ao_model, backend="flex")
    for k in range(plan.steps):
        width = plan.width[:, k]
        with NoHostReads():
            block_mask = state.mask(state.arange(plan.shapes()[k][0]), width)
        assert block_mask.kv_num_blocks.shape == (3, 1, 1)
        _step(state, plan, k)


def test_the_mode_fails_when_the_step_reads_the_host():
    """The check above can fail: `.item()` on a tensor is caught."""
    with pytest.raises(AssertionError, match="host read"), NoHostReads():
        torch.ones(2).sum().item()


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_the_step_is_one_graph(ao_model, backend):
    state, plan = _state_and_plan(ao_model, backend=backend)
    width, rows = plan.shapes()[0]
    explained = torch._dynamo.explain(decode_step)(
        state, state.arange(width), state.arange(rows, "r"), SamplingParams(top_p=0.9)
    )
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def _flex_calls_of_the_traced_step(state, plan, k: int = 0) -> list:
    """The flex_attention calls of the graph Dynamo traces for step k (what inductor then lowers)."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    width, rows = plan.shapes()[k]
    with torch.inference_mode():
        step = torch.compile(decode_step, backend=record, fullgraph=True)
        step(state, state.arange(width), state.arange(rows, "r"), SamplingParams())
    torch._dynamo.reset()
    return [
        n
        for g in graphs
        for n in g.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.higher_order.flex_attention
    ]


def test_the_decode_attention_setting_reaches_the_compiled_steps_flex_attention(ao_model):
    """`--decode-attention` sets what inductor compiles: every layer's flex_attention call in the traced step
    carries the setting's kernel options (FlexDecoding's SPLIT_KV, num_stages, num_warps, BACKEND), and its
    BlockMask has the setting's layout (no full-block lists for `partial`); `full` passes torch's options and
    lists full blocks."""
    setting = parse_decode_attention("partial,split=8,stages=3,warps=4,backend=TRITON_DECODE")
    state, plan = _state_and_plan(ao_model, steps=N, counts="deterministic", backend="flex", decode_attention=setting)
    calls = _flex_calls_of_the_traced_step(state, plan, k=5)
    assert len(calls) == ao_model.model_args.n_layers
    for call in calls:
        block_mask, kernel_options = call.args[4], call.args[6]
        wanted = {"SPLIT_KV": 8, "num_stages": 3, "num_warps": 4, "BACKEND": "TRITON_DECODE"}
        assert {k: kernel_options.get(k) for k in wanted} == wanted
        assert block_mask[4] is None and block_mask[5] is None  # full_kv_num_blocks, full_kv_indices
    state, plan = _state_and_plan(
        ao_model, steps=N, counts="deterministic", backend="flex", decode_attention=parse_decode_attention("full")
    )
    for call in _flex_calls_of_the_traced_step(state, plan, k=5):
        block_mask, kernel_options = call.args[4], call.args[6]
        assert "SPLIT_KV" not in kernel_options and kernel_options["BACKEND"] == "AUTO"
        assert block_mask[4] is not None


def test_a_second_generation_with_new_seeds_and_lengths_compiles_nothing(ao_model):
    """T = n runs one step shape: after one run, runs of other lengths and seeds reuse its compiled step."""
    run = lambda length, seed: generate(
        ao_model, SampleConfig(length=length, steps=length, num_samples=2, seed=seed, graphs="on")
    )
    run(N, 0)
    graphs = dynamo_utils.counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        run(31, 1)
        run(12, 2)
    assert dynamo_utils.counters["stats"]["unique_graphs"] == graphs


def test_the_static_decoder_is_reused_and_rebuilt_when_it_must(ao_model):
    first = static_decoder(ao_model, 2, "sdpa", "aten", "static")
    assert static_decoder(ao_model, 2, "sdpa", "aten", "static") is first
    assert static_decoder(ao_model, 3, "sdpa", "aten", "static") is not first  # another batch
    assert first.slots == static_slots(ao_model.model_args.max_seq_len) and first.slots % 128 == 0
    model = type(ao_model)(ao_model.model_args)
    model.load_state_dict(ao_model.state_dict())
    rebuilt = static_decoder(model, 2, "sdpa", "aten", "static")
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # weights changed: a new decode view, a new static decoder
    assert static_decoder(model, 2, "sdpa", "aten", "static") is not rebuilt


def test_plan_matches_the_dynamic_samplers_bookkeeping():
    counts = torch.tensor([[2, 0, 0, 3, 1], [0, 0, 1, 4, 1], [1, 0, 1, 1, 2]])
    plan = plan_steps(counts, given=torch.full((3,), 2))
    assert plan.steps == 4  # step 1 is empty for everyone
    known, cache_len = torch.full((3,), 2), torch.zeros(3, dtype=torch.long)
    for k, step in enumerate([0, 2, 3, 4]):
        new = counts[:, step]
        assert torch.equal(plan.known[:, k], known) and torch.equal(plan.cache_len[:, k], cache_len)
        assert torch.equal(plan.width[:, k], torch.where(new > 0, known + 1 - cache_len + new - 1, 0))
        cache_len = torch.where(new > 0, known + 1, cache_len)
        known = known + new
    assert plan.step_of.tolist() == [0, 2, 3, 4]
    assert [width_bucket(w) for w in (1, 2, 3, 4, 5, 9)] == [1, 2, 4, 4, 8, 16]


def test_the_plan_is_step_geometry_iterated():
    """The plan, made in closed form over all steps, is the state `step_geometry` reaches step by step (as the
    device does) from (given, 0 encoded, given + 1 pending): ragged binomial counts with idle steps, prompts of
    different lengths, deterministic counts, one sample, no step."""
    from aogpt_plugin.sampler.step import step_geometry

    generators = [torch.Generator().manual_seed(s) for s in range(5)]
    cases = [
        (step_counts([30, 12, 20, 29, 16], 10, "cosine", "binomial", generators), torch.tensor([0, 18, 10, 1, 14])),
        (torch.tensor([[2, 0, 0, 3, 1], [0, 0, 1, 4, 1], [1, 0, 1, 1, 2]]), torch.tensor([2, 0, 5])),
        (step_counts([64] * 3, 16), torch.zeros(3, dtype=torch.long)),
        (step_counts([5], None), torch.tensor([3])),
        (torch.zeros(2, 0, dtype=torch.long), torch.tensor([4, 4])),
    ]
    for counts, given in cases:
        plan = plan_steps(counts, given)
        known, cache_len = given.clone(), torch.zeros_like(given)
        pending = known + 1
        for k, step in enumerate(plan.step_of.tolist()):
            for name, value in (("known", known), ("cache_len", cache_len), ("pending", pending)):
                assert torch.equal(getattr(plan, name)[:, k], value), (name, k)
            width, known, cache_len, pending = step_geometry(known, cache_len, pending, counts[:, step])
            assert torch.equal(plan.width[:, k], width) and torch.equal(plan.counts[:, k], counts[:, step])
        assert plan.steps == int((counts.sum(0) > 0).sum()) and torch.equal(known, given + counts.sum(1))


@pytest.mark.parametrize("mode", ["static", "on"])
def test_bad_combinations_are_one_line_errors(ao_model, mode):
    from aogpt_plugin.errors import UserError

    with pytest.raises(UserError, match="graphs='sometimes' is not supported; allowed: auto, on, off"):
        generate(ao_model, SampleConfig(length=8, steps=8, graphs="sometimes"))
    if mode == "on":  # inductor on a CPU
        with pytest.raises(UserError, match="backend='flex' cannot be compiled into the step on cpu"):
            generate(ao_model, SampleConfig(length=8, steps=8, graphs=mode, backend="flex"))
        with pytest.raises(UserError, match="linears='onednn' cannot be compiled"):
            generate(ao_model, SampleConfig(length=8, steps=8, graphs=mode, linears="onednn"))


def test_the_compiled_step_writes_the_kv_cache_in_place(ao_model):
    """Inductor's step (what `compile` captures on a GPU; `on` on a CPU) allocates nothing as large as one
    layer's K/V cache: a functionalised write that was not turned back into an in-place one would copy the
    cache every step (on an H200 the compiled step took 9x the eager one's time, 2026-11-27; the cache is one
    buffer per layer since). The checker finds such copies in the step with that run's cache layout restored
    (one (layers, ...) buffer, each layer's cache a view of it), and in a step that clones the cache."""
    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.sampler.decoder import KVCache

    def compiled_step_code(batch: int) -> str:
        torch._dynamo.reset()
        config = SampleConfig(length=24, steps=24, num_samples=batch, seed=0, graphs="on", backend="sdpa")
        _, code = run_and_get_code(generate, ao_model, config)
        return "\n".join(code)

    source = compiled_step_code(2)
    state = static_decoder(ao_model, 2, "sdpa", "aten", "on")  # the one generate ran (a compiled step's Linears)
    layer_cache = state.decoder.cache.k[0].numel()
    assert "empty_strided" in source  # the parse reads this code's allocations
    assert cache_sized_allocations(source, layer_cache) == []

    def one_buffer_cache(self, n_layers, batch, n_heads, slots, head_dim, dtype, device):
        shape = (n_layers, batch, n_heads, slots, head_dim)
        self.k, self.v = (torch.zeros(shape, dtype=dtype, device=device) for _ in "kv")
        self.batch_index = torch.arange(batch, device=device).unsqueeze(1)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KVCache, "__init__", one_buffer_cache)
        one_buffer_source = compiled_step_code(3)  # batch 3: a static decoder of its own, built patched
    assert static_decoder(ao_model, 2, "sdpa", "aten", "on").decoder.cache.k[0].dim() == 4  # rebuilt unpatched
    copies = cache_sized_allocations(one_buffer_source, layer_cache // 2 * 3)
    print(f"cache-sized buffers in inductor's step: {len(copies)} with one (layers, ...) buffer, 0 per layer")
    assert copies

    cache = state.decoder.cache.k[0]
    _, clone_code = run_and_get_code(
        torch.compile(lambda c, x: c.clone().index_fill_(0, x, 0)), cache, torch.zeros(1, dtype=torch.long)
    )
    assert cache_sized_allocations("\n".join(clone_code), layer_cache)


def _compiled_small_step(layers: int, batch: int = 2) -> tuple[str, list[str]]:
    """Inductor's output code for the T=n decode step of `small` cut to `layers` layers (every other shape
    kept: 768 wide, 12 heads, 1152 cache slots, the 50k vocabulary): its `call` function and its kernels."""
    import dataclasses
    import re

    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.model import AOGPT, FLAVORS

    with torch.device("meta"):
        model = AOGPT(dataclasses.replace(FLAVORS["small"], n_layers=layers))
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    model.eval().requires_grad_(False)
    torch._dynamo.reset()
    config = SampleConfig(length=4, steps=4, num_samples=batch, graphs="compile", backend="sdpa")
    with torch._inductor.config.patch(fx_graph_cache=False):
        _, code = run_and_get_code(generate, model, config)
    assert len(code) == 1, "the step is one compiled graph"
    source = code[0]
    call = source[source.index("def call(") :]
    kernels = re.findall(
        r"^ +(?:buf\w+ = )?((?:cpp_fused|triton)_\w+|extern_kernels\.\w+|torch\.ops\.\w+\.\w+)", call, re.M
    )
    return source, kernels


def _draw_reductions(source: str) -> list[int]:
    """The reduction loops of the draw (the kernels that take an argmax), each as the length it reduces over:
    a C++ kernel's reduction starts with its accumulator tmp_acc0, then its loop."""
    import re

    draw = [k for k in re.split(r"\n(?=\w+ = async_compile)", source) if "argmax" in k.split("=", 1)[0]]
    loops = re.findall(
        r"^ *[A-Za-z_][\w:]*(?:<[\w, ]*>)? tmp_acc0 = .*?for\(int64_t x\d+=.*?<static_cast<int64_t>\((\d+)L\)",
        "\n".join(draw),
        re.M | re.S,
    )
    return [int(n) for n in loops]


def test_the_compiled_small_step_launches_few_kernels():
    """The kernels of inductor's T=n step for `small`, read from its output code on this CPU (C++ kernels; a
    GPU cuts a C++ kernel's loops of other sizes into more Triton kernels: 154 on an H200, 2026-11-28), so a
    change that adds GEMMs or breaks a fusion fails here before a GPU sees it. A layer: 4 GEMMs (qkv, the
    attention's output, the MLP's two) and the attention, as extern calls, and at most 4 fused kernels; the
    rest of the step: the head's GEMM and at most 3 fused kernels (the step's inputs, mask and first norm; the
    noise's hash of the vocabulary; the final norm, head modulation, draw and bookkeeping); the draw's argmax
    in 2 reductions, neither over more
    than a 64th of the vocabulary (sampling.split_argmax). Shown with -s."""
    (one, kernels_1), (_, kernels_2) = _compiled_small_step(1), _compiled_small_step(2)

    def counts(kernels: list[str]) -> dict[str, int]:
        gemm = sum(k.startswith("extern_kernels.") and k.split(".")[1] in ("addmm", "mm", "bmm") for k in kernels)
        attention = sum("attention" in k for k in kernels if not k.startswith(("cpp_fused", "triton")))
        fused = sum(k.startswith(("cpp_fused", "triton")) for k in kernels)
        return {"gemm": gemm, "attention": attention, "fused": fused, "all": len(kernels)}

    c1, c2 = counts(kernels_1), counts(kernels_2)
    layer = {k: c2[k] - c1[k] for k in c1}
    outside = {k: c1[k] - layer[k] for k in c1}
    reductions = _draw_reductions(one)
    print(f"compiled small T=n step: a layer {layer}, outside {outside}, draw reductions over {reductions}")
    assert layer["gemm"] == 4 and layer["attention"] == 1 and layer["fused"] <= 4, layer
    assert layer["all"] == layer["gemm"] + layer["attention"] + layer["fused"], kernels_2  # nothing else a layer
    assert outside["gemm"] == 1 and outside["attention"] == 0 and outside["fused"] <= 3, outside
    assert len(reductions) == 2 and max(reductions) <= -(-50304 // 64), reductions
