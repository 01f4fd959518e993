"""The step profile's categories: the name rules on real kernel names, the arithmetic of a device
timeline (overlap, idle, steps' windows), and a real CPU training step whose categories cover it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from aogpt_plugin.bench.step_profile import (
    CATEGORIES,
    LOSS_RANGE,
    OPTIMIZER_RANGE,
    STEP_RANGE,
    Work,
    category_of,
    cpu_works,
    device_works,
    profile_steps,
    step_windows,
    summarise,
)
from aogpt_plugin.bench.train_step import Variant
from aogpt_plugin.cross_entropy import ao_cross_entropy

# kernel names as the CUDA profiler prints them on an H100 (cuBLAS, flash / cuDNN / CUTLASS attention,
# Triton kernels of inductor, fused AdamW, NCCL)
KERNELS = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "matmul",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT": "matmul",
    "triton_tem_fused_addmm_0": "matmul",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0": "attention",
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80": "attention",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": "elementwise/norm",
    "triton_poi_fused_add_mul_silu_1": "elementwise/norm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>": "elementwise/norm",
    "Memcpy DtoD (Device -> Device)": "elementwise/norm",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
}


@pytest.mark.parametrize("name, category", KERNELS.items())
def test_kernel_names_get_their_category(name, category):
    assert category_of(name) == category


def test_the_enclosing_ranges_decide_before_the_name():
    gemm = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT"
    assert category_of(gemm, ["aten::mm", OPTIMIZER_RANGE, STEP_RANGE]) == "optimizer"
    assert category_of("triton_red_fused_exp_sub_0", ["CompiledFunctionBackward", LOSS_RANGE]) == "loss"
    assert category_of("triton_red_fused_exp_sub_0", ["CompiledFunctionBackward"]) == "elementwise/norm"
    assert category_of("multi_tensor_apply_kernel", ["aten::_fused_adamw_", "Optimizer.step#AdamW.step"]) == "optimizer"
    assert category_of("aten::copy_", ["aten::_scaled_dot_product_flash_attention_for_cpu"]) == "attention"
    assert category_of("aten::copy_", ["aten::addmm"]) == "elementwise/norm"  # matmul by its own name only


def test_a_device_timeline_counts_overlap_once_and_the_rest_of_the_wall_as_idle():
    """Two steps of 100 us; kernels: a GEMM 10-50, attention 40-60 overlapping it by 10, a kernel of
    step 2 that starts before its window (clipped), and one outside every step (ignored)."""
    windows = [(0.0, 100.0), (200.0, 300.0)]
    works = [
        Work("gemm", "matmul", 40, 10, 50),
        Work("flash", "attention", 20, 40, 60),
        Work("adamw", "optimizer", 30, 190, 220),  # 20 us inside step 2
        Work("late", "elementwise/norm", 10, 120, 130),  # between the steps
    ]
    s = summarise(works, windows, device_timeline=True)
    cats = s["categories"]
    assert s["steps"] == 2 and s["wall_ms_per_step"] == pytest.approx(0.1)
    assert cats["matmul"]["ms_per_step"] == pytest.approx(0.02) and cats["attention"]["ms_per_step"] == pytest.approx(
        0.01
    )
    assert cats["optimizer"]["ms_per_step"] == pytest.approx(0.01) and cats["elementwise/norm"]["ms_per_step"] == 0
    assert s["busy_ms_per_step"] == pytest.approx(0.035) and s["overlap_ms_per_step"] == pytest.approx(0.005)
    assert cats["idle"]["ms_per_step"] == pytest.approx(0.065)
    fractions = sum(c["fraction"] for c in cats.values())
    assert fractions - s["overlap_ms_per_step"] / s["wall_ms_per_step"] == pytest.approx(1.0)


def _profiled_cpu_step(step) -> list:
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(STEP_RANGE):
            step()
    return prof.events()


@pytest.mark.parametrize("compiled", [False, True])
def test_the_loss_backward_is_loss_eager_or_compiled(compiled):
    """A step of a Linear head + the training loss: the loss's backward ops (exp; the scatter, or
    compiled the one-hot's eq) are `loss` although they run outside `aogpt.loss`, found by their
    autograd sequence numbers; the head's matmuls stay matmul. Compiled, the backward runs as `CompiledFunctionBackward`, like every
    compiled block's: without that link its ops would fall into elementwise/norm."""
    head = torch.nn.Linear(16, 64)
    x, labels = torch.randn(40, 16), torch.randint(0, 50, (40,))
    loss_fn = lambda p, y: ao_cross_entropy(p, y, 50, chunk_rows=8)  # noqa: E731
    if compiled:
        torch._dynamo.reset()
        loss_fn = torch.compile(loss_fn, backend="aot_eager")

    def step():
        logits = head(x)
        with record_function(LOSS_RANGE):
            loss = loss_fn(logits, labels)
        loss.backward()

    by_category: dict[str, set[str]] = {}
    for w in cpu_works(_profiled_cpu_step(step)):
        by_category.setdefault(w.category, set()).add(w.name)
    backward = {"aten::exp", "aten::eq"} if compiled else {"aten::exp_", "aten::scatter_add_"}
    assert {"aten::logsumexp", *backward} <= by_category["loss"]
    assert not backward & by_category.get("elementwise/norm", set())
    assert {"aten::addmm", "aten::mm"} <= by_category["matmul"]


def test_a_cpu_training_step_is_covered_by_its_categories():
    """The bench's own step (debugmodel, AO): every category but communication holds work, the
    fractions add up to the step's wall time, and no work is counted twice (busy <= wall)."""
    variant = Variant("debugmodel", "adaln", "uniform", 16, 2, torch.device("cpu"), torch.float32, None, 8)
    variant.step()
    s = profile_steps(variant.step, torch.device("cpu"), steps=2)
    cats = s["categories"]
    assert list(cats) == list(CATEGORIES) and s["steps"] == 2
    for c in ("matmul", "attention", "loss", "elementwise/norm", "optimizer"):
        assert cats[c]["ms_per_step"] > 0, c
    assert cats["communication"]["ms_per_step"] == 0 and s["overlap_ms_per_step"] == 0
    assert s["busy_ms_per_step"] <= s["wall_ms_per_step"]
    assert sum(c["fraction"] for c in cats.values()) == pytest.approx(1.0, abs=2e-3)
    assert sum(c["ms_per_step"] for c in cats.values()) == pytest.approx(s["wall_ms_per_step"], rel=1e-3)
    assert any("flash_attention" in name for name, _ in cats["attention"]["top"])
    assert any(name in ("aten::mm", "aten::addmm") for name, _ in cats["matmul"]["top"])


def _host(name, id_, parent=None, seq=-1, fwd_thread=0, annotation=False):
    return SimpleNamespace(
        name=name, id=id_, cpu_parent=parent, sequence_nr=seq, fwd_thread=fwd_thread, thread=1,
        device_type=SimpleNamespace(name="CPU"), is_async=False, is_user_annotation=annotation,
    )  # fmt: skip


def _raw(name, corr, linked, start_ns, end_ns, device="CUDA", kind="kernel"):
    methods = dict(
        name=lambda: name, correlation_id=lambda: corr, linked_correlation_id=lambda: linked,
        device_type=lambda: SimpleNamespace(name=device), start_ns=lambda: start_ns, end_ns=lambda: end_ns,
    )  # fmt: skip
    if kind is not None:
        methods["activity_type"] = lambda: kind
    return SimpleNamespace(**methods)


@pytest.mark.parametrize("with_activity_type", [True, False])
def test_device_kernels_get_the_ranges_of_the_host_op_that_launched_them(with_activity_type):
    """Fake profiler records shaped as torch's: a kernel's linked_correlation_id names its launching op;
    the loss's backward node shares (forward thread, sequence number) with the op under `aogpt.loss`;
    a range mirrored on the device is no work (by activity type, or by name on torch < 2.13); a runtime
    call whose id collides with an op's does not take its place."""
    step = _host(STEP_RANGE, 1, annotation=True)
    loss = _host(LOSS_RANGE, 2, step, annotation=True)
    loss_fn = _host("_RealVocabCrossEntropy", 3, loss, seq=40)
    optimizer = _host(OPTIMIZER_RANGE, 4, step, annotation=True)
    adamw = _host("aten::_fused_adamw_", 5, optimizer)
    bwd_node = _host("CompiledFunctionBackward", 6, None, seq=40, fwd_thread=1)
    bwd_op = _host("triton_poi_fused_exp_sub_0", 7, bwd_node)
    block_mm = _host("aten::mm", 8, _host("AddmmBackward0", 9, None, seq=12, fwd_thread=1))
    runtime = _host("cudaLaunchKernel", 8, adamw)  # same id as block_mm: must not replace it
    events = [step, loss, loss_fn, optimizer, adamw, bwd_node, bwd_op, block_mm, runtime]
    kind = lambda k: k if with_activity_type else None  # noqa: E731
    raw = [_raw(e.name, e.id, 0, 0, 0, device="CPU", kind=None) for e in events[:-1]]
    raw += [
        _raw("triton_red_fused_logsumexp_0", 101, 3, 1000, 3000, kind=kind("kernel")),
        _raw("multi_tensor_apply_kernel", 102, 5, 3000, 4000, kind=kind("kernel")),
        _raw("triton_poi_fused_exp_sub_0", 103, 7, 4000, 6000, kind=kind("kernel")),
        _raw("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", 104, 8, 6000, 9000, kind=kind("kernel")),
        _raw(STEP_RANGE, 105, 1, 0, 10000, kind=kind("gpu_user_annotation")),
    ]
    works = device_works(events, raw, trace_start_ns=0)
    assert [(w.name[:12], w.category, w.start_us, w.end_us) for w in works] == [
        ("triton_red_f", "loss", 1.0, 3.0),
        ("multi_tensor", "optimizer", 3.0, 4.0),
        ("triton_poi_f", "loss", 4.0, 6.0),
        ("nvjet_tst_12", "matmul", 6.0, 9.0),
    ]


def test_the_steps_windows_are_their_host_ranges_not_their_device_mirrors():
    """A CUDA profile holds each `aogpt.step` twice: the host range and its mirror on the device
    timeline (shorter: first kernel to last). Only the host ranges are steps; counting both gave 10
    windows for 5 steps, each step's wall the mean of the two."""

    def event(start, end, device):
        return SimpleNamespace(name=STEP_RANGE, time_range=SimpleNamespace(start=start, end=end),
                               device_type=SimpleNamespace(name=device))  # fmt: skip

    events = [
        event(0.0, 100.0, "CPU"),
        event(40.0, 90.0, "CUDA"),
        event(200.0, 300.0, "CPU"),
        event(230.0, 290.0, "CUDA"),
    ]
    events.append(SimpleNamespace(name="aten::mm", time_range=SimpleNamespace(start=1.0, end=2.0),
                                  device_type=SimpleNamespace(name="CPU")))  # fmt: skip
    assert step_windows(events) == [(0.0, 100.0), (200.0, 300.0)]


def test_device_works_reads_a_real_profile_without_device_events():
    """The raw-event methods device_works calls exist on this torch (a CPU profile has no kernels)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(STEP_RANGE):
            torch.ones(4).sum()
    raw = prof.profiler.kineto_results
    assert device_works(prof.events(), raw.events(), raw.trace_start_ns()) == []
