"""torchtitan runs on CPU after the patches (the shared cpu.py, applied by the installed version's glue;
these tests run the 0.2.2 one): device type, device module, no triton needed, honest memory
(resident set size) and no MFU (a CPU has no stable peak to divide by)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from conftest import ROOT

from aogpt_plugin.training import cpu


def test_patches_make_torchtitan_importable_and_cpu_bound():
    code = """
import importlib.util, sys
from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu
enable_torchtitan_on_cpu()
import torchtitan.train
from torchtitan.tools import utils
from torchtitan.components import metrics
from torchtitan.distributed import utils as dist_utils
assert utils.device_type == metrics.device_type == dist_utils.device_type == "cpu"
m = metrics.build_device_memory_monitor()
stats = m.get_peak_stats()  # the process's resident set: real, never a negative placeholder
assert 0.01 < stats.max_active_gib == stats.max_reserved_gib < 1000 and stats.num_ooms == 0 == stats.num_alloc_retries
assert utils.get_peak_flops("cpu") != utils.get_peak_flops("cpu")  # NaN: no MFU on CPU, not an A100's peak
print("triton", importlib.util.find_spec("triton") is not None)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the CPU wheel (2.13) has no triton, and the stub stood in without posing as one; the CUDA builds that
    # also run on a CPU (2.11, the GPU image's; 2.14.1) ship the real one
    assert f"triton {importlib.util.find_spec('triton') is not None}" in proc.stdout


def test_importing_the_package_outside_torchtitan_imports_no_torchtitan():
    code = "import sys, aogpt_plugin, aogpt_plugin.model, aogpt_plugin.model_dir, aogpt_plugin.convert\n"
    code += "assert 'torchtitan' not in sys.modules, 'torchtitan imported'\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_a_cpu_run_shows_no_mfu_in_the_metrics_line_or_the_metric_loggers():
    """A start-up timed CPU peak varied 17x between runs and gave MFU > 100%: there is none now."""
    code = """
import logging
from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu
enable_torchtitan_on_cpu()
import torchtitan.train
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.config import JobConfig
from torchtitan.distributed import ParallelDims
from torchtitan.tools.logging import init_logger

init_logger()
job = JobConfig()
job.metrics.disable_color_printing = False  # the colour codes around the field go too
dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)
mp = MetricsProcessor(job, dims)
written, lines = [], []
mp.logger.inner = type("Capture", (), {"log": lambda self, m, s: written.append(m)})()
handler = logging.Handler()
handler.emit = lambda r: lines.append(r.getMessage())
logging.getLogger().addHandler(handler)
mp.num_flops_per_token, mp.ntokens_since_last_log = 1000, 512
mp.data_loading_times.append(0.0)
mp.log(step=1, global_avg_loss=1.0, global_max_loss=1.0, grad_norm=1.0)
logging.getLogger().info("Peak FLOPS used for computing MFU: %.3e", float("nan"))
assert "mfu(%)" not in written[0] and written[0]["tflops"] > 0, written  # TensorBoard / WandB
assert "tflops: " in lines[0] and "mfu" not in lines[0], lines  # the metrics line
assert lines[1].startswith("CPU run: no MFU"), lines
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_triton_module_stands_in_only_without_triton(monkeypatch):
    """torch's CPU wheels have no triton: the module that imports it (for MoE only) is a stub whose
    kernels raise when called; with triton installed nothing is replaced."""
    name = "aogpt_test_fake.kernels"
    monkeypatch.delitem(sys.modules, name, raising=False)
    real_find_spec = cpu.importlib.util.find_spec
    monkeypatch.setattr(cpu.importlib.util, "find_spec", lambda n: object() if n == "triton" else real_find_spec(n))
    cpu.stub_triton_module(name, "MoE only")
    assert name not in sys.modules  # triton there: the real module will be imported
    monkeypatch.setattr(cpu.importlib.util, "find_spec", lambda n: None if n == "triton" else real_find_spec(n))
    cpu.stub_triton_module(name, "MoE only")
    from aogpt_test_fake.kernels import permute  # noqa: I001  (the stub answers any name)

    with pytest.raises(RuntimeError, match=r"permute needs triton \(MoE only\)"):
        permute()
    monkeypatch.delitem(sys.modules, name)
