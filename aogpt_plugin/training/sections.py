"""aogpt's settings: the TOML sections it adds to torchtitan's job config, `[aogpt]` (any-order options)
and `[ema]`, and the run's settings as the shared training code reads them (`RunSettings`).

Plain dataclasses, no torchtitan: each version's glue composes the sections into its job config (the
recipes' `custom_config_module` for 0.2.2, titan03/trainer.py for 0.3). Each value is checked when the
section is built, i.e. while torchtitan parses the TOML and the CLI, before any process group exists; a bad
value raises ConfigError with one line naming key, value and what is allowed. Their docstrings are
the config reference (`python scripts/config_reference.py --write` -> docs/training.md).

`RunSettings` is `[aogpt]`, `[ema]` and the job fields the shared training code reads (the preflight,
the batches, validation, the checkpoint record, the model args' `update_from_config`, the launcher's
messages), under the recipes' key names (`training.seq_len`, `validation.dataset`, `job.dump_folder`,
`quantize.linear.float8` as `float8`, ...). Each version's glue builds it once per run from its own
config (`run_settings`: titan022/settings.py from 0.2.2's JobConfig, whose paths are the recipes';
titan03/trainer.py from 0.3's config, which moved some of them) and hands that one object to every
shared module: the same recipe gives equal RunSettings on both versions (tests/training/titan03).
`aogpt`, `ema` and `float8` are the parsed sections themselves; the rest are typed, frozen copies
with no defaults: every value comes from the parsed config.
"""

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Protocol

import tyro

from ..data.tokenizer import check_tokenizer_spec
from ..errors import ConfigError
from ..model.args import check_conditioning, check_loss_path
from ..orders import canonical_order, check_curriculum, check_p_l2r
from .config_checks import check_types


@dataclass
class AOGPT:
    conditioning: str = "adaln"
    """How slot j learns its target position: adaln (AO-GPT), concat (sigma-GPT), none (AR GPT)."""

    target_pe_dim: int = 128
    """Width of the target-position table that feeds adaLN (the paper uses 128)."""

    loss_path: str = "logits"
    """How the head meets the loss: logits (the head writes the micro-batch's logits, the loss reads them) | fused
    (the head's GEMM chunked with the loss inside the model's forward: no logits tensor; equal loss and gradients).
    Under FSDP the fused path keeps the head in the root's unit (docs/training.md)."""

    order: str = "mixture"
    """Order distribution: mixture | random | l2r | fixed_random | blockwise:K (orders.py)."""

    p_l2r: float = 0.1
    """With order=mixture: probability that a sequence is read left to right (paper: 0.1)."""

    order_seed: int = 0
    """Seed of the order streams (mixed with the data-parallel rank and the sequence index)."""

    l2r_curriculum_steps: int = 0
    """With order=mixture: steps over which the left-to-right share falls from 1.0 to p_l2r (0: off, p_l2r throughout).
    For a run that starts from a left-to-right model (GPT-2): it reads the order it knows first. Step s draws with
    the share of step s (1.0 at step 1, p_l2r from step l2r_curriculum_steps + 1 on), logged as `aogpt/l2r_share`;
    a pure function of the step, so exact across resume."""

    l2r_curriculum: str = "linear"
    """Shape of that fall: linear | cosine (half a cosine: slow at the start and at the end)."""

    shuffle_windows: int = 0
    """Windows held in a shuffle buffer before they are batched (0: torchtitan's consecutive windows).
    torchtitan packs documents into consecutive windows, so a small batch holds one or two articles;
    a buffer of K windows makes each batch a random draw from K (the small-scale study needs it)."""

    tokenizer: str = "gpt2"
    """gpt2 (tiktoken, the paper's), a tokenizer.json path, or symbols:V (data/tokenizer.py); EOS ends every document."""

    val_orders: int = 2
    """Validation: fixed random orders per window for the any-order loss (left to right is always added)."""

    val_order_seed: int = 1234
    """Validation: seed of those fixed orders, so every validation scores the same (window, order) pairs."""

    nan_check: bool = True
    """Stop on a NaN/inf loss, gradient or updated weight, read at the logging steps (a bad step then stops before its update) and before every checkpoint: no checkpoint holds bad weights."""

    verify_data: bool = True
    """Check every shard of a prepared data folder against its manifest's sha256 before training (once per file; `--aogpt.no-verify-data` skips it)."""

    def vocab_size(self) -> int:
        """The tokenizer's real vocabulary (the model's embedding and the loss follow it)."""
        from ..data.tokenizer import load_tokenizer

        return load_tokenizer(self.tokenizer).get_vocab_size()

    def __post_init__(self) -> None:
        check_types(self, "aogpt")
        check_conditioning(self.conditioning)
        check_loss_path(self.loss_path)
        self.order = canonical_order(self.order)  # aliases spelled canonically
        check_p_l2r(self.p_l2r)
        check_curriculum(self.l2r_curriculum_steps, self.l2r_curriculum, self.order)
        if self.target_pe_dim < 1:
            raise ConfigError(f"aogpt.target_pe_dim={self.target_pe_dim} must be >= 1")
        check_tokenizer_spec(self.tokenizer, must_exist=False)  # the file: preflight, once CLI overrides are in
        if self.val_orders < 0:
            raise ConfigError(f"aogpt.val_orders={self.val_orders} must be >= 0")
        if self.shuffle_windows < 0:
            raise ConfigError(f"aogpt.shuffle_windows={self.shuffle_windows} is not allowed; allowed: 0 (off) or >= 1")


@dataclass
class EMA:
    enable: bool = True
    """Keep an exponential moving average of the weights (saved in checkpoints as `ema.<param>`)."""

    decay: float = 0.9999
    """EMA decay (paper: 0.9999)."""

    warmup: bool = True
    """Use min(decay, (1+k)/(10+k)) at update k, as torch_ema and the authors do."""

    validate: bool = True
    """Also report validation losses of the EMA weights."""

    def __post_init__(self) -> None:
        check_types(self, "ema")
        if not 0.0 <= self.decay < 1.0:
            raise ConfigError(f"ema.decay={self.decay} is outside the allowed range [0, 1)")


# ---- the run's settings as the shared code reads them ----------------------------------------------
def section_of(cls, source, **differing):
    """The settings section `cls` copied from a torchtitan config section `source` holding the same field
    names (lists as tuples, so the copy is frozen all through), but the `differing` fields, given."""
    copied = {f.name: getattr(source, f.name) for f in dataclasses.fields(cls) if f.name not in differing}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in copied.items()}, **differing)


@dataclass(frozen=True, kw_only=True)
class Job:
    dump_folder: str


@dataclass(frozen=True, kw_only=True)
class Model:
    name: str
    flavor: str
    converters: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Training:
    dataset: str
    dataset_path: str | None
    seq_len: int
    local_batch_size: int
    global_batch_size: int  # -1: local_batch_size x the data-parallel degree (no gradient accumulation)
    steps: int
    max_norm: float


@dataclass(frozen=True, kw_only=True)
class Validation:
    """The validation windows as scored (seq_len and local_batch_size resolved)."""

    enable: bool
    dataset: str
    dataset_path: str | None
    seq_len: int
    local_batch_size: int
    steps: int
    freq: int


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    name: str
    lr: float
    beta1: float
    beta2: float
    weight_decay: float
    early_step_in_backward: bool


@dataclass(frozen=True, kw_only=True)
class LRScheduler:
    warmup_steps: int
    decay_ratio: float | None


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    tensor_parallel_degree: int
    context_parallel_degree: int
    pipeline_parallel_degree: int


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    enable: bool
    folder: str
    interval: int
    keep_latest_k: int
    load_step: int
    exclude_from_loading: tuple[str, ...]
    initial_load_path: str | None  # weights a fresh run starts from (a GPT-2 folder with initial_load_in_hf)
    initial_load_in_hf: bool
    initial_load_model_only: bool
    last_save_in_hf: bool


@dataclass(frozen=True, kw_only=True)
class Compile:
    enable: bool
    components: tuple[str, ...]
    backend: str


class Float8(Protocol):
    """`[quantize.linear.float8]` as parsed (0.2.2: torchtitan's own section; 0.3: titan03/float8.py's, with
    0.2.2's keys), read when model.converters names it."""

    enable_fsdp_float8_all_gather: bool
    precompute_float8_dynamic_scale_for_fsdp: bool
    recipe_name: str | None
    filter_fqns: list[str]
    emulate: bool


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """One run's settings, under the recipes' key names; built once per run by the installed version's
    glue (titan022/settings.py, titan03/trainer.py) and the one settings type the shared modules read."""

    aogpt: AOGPT
    ema: EMA
    job: Job
    model: Model
    training: Training
    validation: Validation
    optimizer: Optimizer
    lr_scheduler: LRScheduler
    parallelism: Parallelism
    checkpoint: Checkpoint
    compile: Compile
    float8: Float8


SettingsField = Annotated[RunSettings | None, tyro.conf.Suppress]
"""A torchtitan 0.3 component Config's `settings` field: the run's RunSettings, set by the Trainer (None
before); tyro, torchtitan's command-line library, leaves it off the command line."""
