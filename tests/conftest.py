"""Shared test setup: offline tokenizer, data paths, tiny models, a torchrun helper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AOGPT_DATA_DIR", ROOT.parent / "shared" / "data"))
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED_DATA / "tiktoken_cache"))
os.environ.setdefault("AOGPT_DATA_DIR", str(SHARED_DATA))
TRAIN_CORPUS = SHARED_DATA / "train_corpus"
HELDOUT = TRAIN_CORPUS / "enwiki2015_heldout.jsonl"


# Shapes of the tiny models the tests build. "default": plain tests; "sampler": weights scaled so
# next-token distributions are far from uniform (a cache bug then changes sampled tokens, not just
# the 5th decimal); "eval": larger vocabulary and positions for likelihood and ensemble checks.
PRESETS = {
    "default": dict(dim=32, n_layers=2, n_heads=4, vocab_size=61, max_seq_len=24),
    "sampler": dict(dim=64, n_layers=2, n_heads=2, vocab_size=61, max_seq_len=40, scale=8.0, frozen=True),
    "eval": dict(dim=64, n_layers=2, n_heads=4, vocab_size=97, max_seq_len=48, scale=15.0, frozen=True),
}


def tiny_model(
    conditioning: str = "adaln", seed: int = 0, scale: float | None = None, *, preset="default", **overrides
):
    """The tests' one model builder: a small AO-GPT with deterministic random weights (CPU, float32).

    `scale` multiplies the matrices (init std 0.02 gives near-uniform logits); `frozen` presets return
    it in eval mode without gradients."""
    from aogpt_plugin.model import AOGPT, AOGPTModelArgs

    kw = dict(PRESETS[preset], conditioning=conditioning)
    kw.update(overrides)
    preset_scale = kw.pop("scale", 1.0)
    scale = preset_scale if scale is None else scale
    frozen = kw.pop("frozen", False)
    args = AOGPTModelArgs(**kw)
    with torch.device("meta"):
        model = AOGPT(args)
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights()
    if scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.mul_(scale)
    return model.eval().requires_grad_(False) if frozen else model


# aten ops that launch no kernel (views, metadata); every other op is one kernel on a GPU, eager or replayed
VIEW_OPS = frozenset(
    "view _unsafe_view t transpose permute unsqueeze squeeze expand slice select unbind split split_with_sizes "
    "chunk detach alias as_strided narrow reshape _reshape_alias empty lift_fresh".split()
)


def kernel_ops(fn) -> list[str]:
    """The aten ops `fn()` runs that launch a kernel, in order (a decode step on a GPU pays per launch)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in VIEW_OPS:
                self.ops.append(name)
            return func(*args, **(kwargs or {}))

    with Record() as record:
        fn()
    return record.ops


# A tiny GPT-2 as transformers makes and saves it (the shapes of model.FLAVORS["gpt2-tiny"] are in
# GPT2_TINY_FLAVOR, for training from the folder).
GPT2_TINY = dict(n_layer=2, n_embd=32, n_head=4, n_positions=33, vocab_size=50257)
GPT2_TINY_FLAVOR = dict(n_layer=4, n_embd=128, n_head=4, n_positions=256, vocab_size=50257)


def tiny_gpt2(path: Path | None = None, seed: int = 0, weights: str = "safetensors", **config):
    """A GPT2LMHeadModel made by transformers (random weights: its init with every matrix scaled x5, so
    logits span a few units as a trained model's do, and its ones/zeros norms and biases perturbed, so
    each tensor's mapping shows), saved to `path` by `save_pretrained` ("safetensors") or, as older
    folders are, a `pytorch_model.bin` of GPT2Model's names (no `transformer.` prefix, the causal-mask
    buffers kept) beside its config.json ("bin"; "legacy-bin": in torch < 1.6's file format). Returns the
    model (eval mode)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # "Writing model shards" bars on stderr
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**GPT2_TINY, **config})).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(5.0)
            else:
                p.add_(torch.randn_like(p) * 0.1)
    if path is None:
        return model
    if weights == "safetensors":
        model.save_pretrained(path)
    else:
        model.config.save_pretrained(path)
        state = {k.removeprefix("transformer."): v for k, v in model.state_dict().items() if k != "lm_head.weight"}
        n = model.config.n_positions
        for i in range(model.config.n_layer):  # the buffers GPT-2 checkpoints of transformers < 4.30 hold
            state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n)
        zipped = weights == "bin"  # "legacy-bin": torch < 1.6's format, which cannot be memory-mapped
        torch.save(state, Path(path) / "pytorch_model.bin", _use_new_zipfile_serialization=zipped)
    return model


def gpt2_logits(gpt2, tokens: torch.Tensor) -> torch.Tensor:
    """transformers' GPT-2 logits of `tokens` (B, n) read after <|endoftext|>: row j scores tokens[:, j]."""
    start = torch.full((tokens.shape[0], 1), gpt2.config.bos_token_id, dtype=torch.long)
    with torch.no_grad():
        return gpt2(torch.cat([start, tokens], dim=1)).logits[:, :-1]


def gpt2_loss(gpt2, rows: torch.Tensor) -> float:
    """transformers' loss of `rows` (B, n), each read after <|endoftext|> (all n tokens of a row scored)."""
    ids = torch.cat([torch.full((rows.shape[0], 1), gpt2.config.bos_token_id), rows], dim=1)
    with torch.no_grad():
        return gpt2(ids, labels=ids).loss.item()


def gpt2_start_args(dump: Path, hf_dir: Path, steps: int, **overrides) -> list[str]:
    """debug_train_args for a `gpt2-tiny` run that starts from the GPT-2 folder `hf_dir` (GPT2_TINY_FLAVOR's
    shapes) on left-to-right batches, checkpointing every step (each step folder records its loss)."""
    start = {"model.flavor": "gpt2-tiny", "checkpoint.initial_load_path": str(hf_dir)}
    start |= {"checkpoint.initial_load_in_hf": True, "aogpt.order": "l2r", "checkpoint.interval": 1}
    return debug_train_args(dump, steps, **{**start, **overrides})


def first_windows(seq_len: int, rows: int) -> torch.Tensor:
    """The first `rows` training windows of the debug recipe's corpus as one process reads them: its first
    shard's documents, each followed by <|endoftext|>, packed into consecutive windows of seq_len + 1
    tokens, of which a row holds the first seq_len."""
    from aogpt_plugin.data.text_files import iter_documents
    from aogpt_plugin.data.tokenizer import TiktokenTokenizer

    tokenizer, ids = TiktokenTokenizer("gpt2"), []
    for doc in iter_documents(str(sorted(TRAIN_CORPUS.glob("enwiki2015_train_*.jsonl"))[0])):
        ids += tokenizer.encode(doc, add_eos=True)
        if len(ids) >= rows * (seq_len + 1):
            break
    return torch.tensor([ids[r * (seq_len + 1) : r * (seq_len + 1) + seq_len] for r in range(rows)])


def recorded_losses(dump: Path) -> dict[int, float]:
    """{step: training loss} as the step folders' aogpt.json records them (full precision)."""
    losses = {}
    for record in sorted((dump / "checkpoint").glob("step-*/aogpt.json")):
        losses |= {int(s): v[0] for s, v in json.loads(record.read_text())["losses"].items()}
    return losses


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def run_torchrun(script_args: list[str], nproc: int = 1, timeout: int = 600, module: bool = True):
    """Run `torchrun --nproc_per_node=nproc -m ...` (or a script) from the repo root; returns CompletedProcess."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_port",
        str(29500 + (os.getpid() % 1000)),
    ]
    cmd += (["-m"] if module else []) + script_args
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def launch_train(args: list[str], env=None, timeout=300, popen=False):
    """`python -m aogpt_plugin.train ARGS` from the repo root (one process), finished or, with
    `popen`, running (stdout and stderr merged into one log for the caller to read)."""
    cmd = [sys.executable, "-m", "aogpt_plugin.train", *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    if popen:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


HF_LOADER = ROOT / "tests" / "helpers" / "hf_load.py"


def load_with_transformers(cases: dict, inputs: dict, work: Path, timeout: int = 300) -> dict:
    """What transformers computes from exported folders, in a `python -I` process that cannot import
    aogpt_plugin or torchtitan (tests/helpers/hf_load.py, one thread). `cases` {name: {"dir", "texts"}},
    `inputs` {f"{name}/tokens", f"{name}/order"}; returns {f"{name}/l2r", f"{name}/order"} logits and,
    for non-empty texts, AutoTokenizer's f"{name}/ids" and f"{name}/decoded". `work` is a scratch folder."""
    work.mkdir(parents=True, exist_ok=True)
    torch.save(inputs, work / "inputs.pt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env |= {"HF_MODULES_CACHE": str(work / "hf_modules"), "TRANSFORMERS_VERBOSITY": "error"}
    cmd = [sys.executable, "-I", str(HF_LOADER), json.dumps(cases), "inputs.pt", "out.pt"]
    proc = subprocess.run(
        cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(work / "out.pt")


def error_lines(proc) -> list[str]:
    """The `error:` lines and traceback headers a launcher run printed (one error line is the contract)."""
    return [ln for ln in proc.stderr.splitlines() if ln.startswith(("error", "Traceback"))]


def debug_train_args(dump: Path, steps: int, **overrides) -> list[str]:
    """aogpt_debug.toml shrunk for tests: seq 32, batch 4, checkpoints every `interval` steps."""
    args = {
        "job.config_file": "train_configs/aogpt_debug.toml",
        "job.dump_folder": str(dump),
        "training.steps": steps,
        "training.seq_len": 32,
        "training.local_batch_size": 4,
        "validation.seq_len": 32,
        "validation.local_batch_size": 4,
        "validation.steps": 1,
        "validation.freq": steps,
        "checkpoint.interval": steps // 2,
        "metrics.log_freq": 1,
        "metrics.disable_color_printing": True,
        "debug.seed": 7,
        "lr_scheduler.warmup_steps": 2,
    }
    args.update(overrides)
    out = []
    for k, v in args.items():
        if v is None:  # dropped: the recipe's own value applies
            continue
        if isinstance(v, bool):
            out += [f"--{k}"] if v else []
        else:
            out += [f"--{k}", str(v)]
    return out


@pytest.fixture(scope="session", autouse=True)
def aogpt_cache(tmp_path_factory):
    """What aogpt caches (the shards that matched their manifest's sha256) goes to a folder of the test
    session, not the user's ~/.cache, also in the commands the tests launch."""
    os.environ["AOGPT_CACHE_DIR"] = str(tmp_path_factory.mktemp("aogpt_cache"))
    return os.environ["AOGPT_CACHE_DIR"]


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(size)`: a real size-limited filesystem (a tmpfs of `size`, e.g. "8m") mounted in the
    test's folder, unmounted afterwards: the kernel answers ENOSPC as a full disk does, through every
    writer's own path (DCP, safetensors, tokenizers, torch's zip writer). Skipped, with the reason,
    where mounting is not allowed (not root, or a container without the right)."""
    mounted = []

    def mount(size: str) -> Path:
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        try:
            proc = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path)],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError) as e:
            proc = subprocess.CompletedProcess([], 1, "", str(e))
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or ["mount failed"])[-1]
            pytest.skip(f"a real full disk needs a tmpfs mount, which is not allowed here ({why})")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill_disk(path: Path, leave: int) -> None:
    """Fill the filesystem of `path` until `leave` bytes are free (a file named `filler`)."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    with open(path / "filler", "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


@pytest.fixture
def one_cpu_thread():
    """Tiny models' ops are far too small for intra-op threads; on a shared 2-core CPU OpenMP
    spin-waits make them many times slower. Autouse it in a folder's conftest."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def ao_model():
    """AO-GPT (adaLN) with sharp next-token distributions, shared by the sampler and bench tests."""
    return tiny_model("adaln", preset="sampler")


@pytest.fixture(scope="session")
def gpt_model():
    """The same backbone without target conditioning: a plain causal GPT."""
    return tiny_model("none", preset="sampler")


def cache_sized_allocations(code: str, numel: int) -> list[str]:
    """The buffers inductor's generated `code` allocates that hold at least `numel` elements."""
    import math
    import re

    sizes = re.findall(r"empty_strided(?:_\w+)?\(\(([\d, ]+)\)", code)
    return [s for s in sizes if math.prod(int(d) for d in s.split(",") if d.strip()) >= numel]
