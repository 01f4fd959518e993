"""Model hyper-parameters of AO-GPT and its named sizes (torchtitan's `BaseModelArgs` contract, duck-typed).

The sampler and evaluator import this file without torchtitan, so it only duck-types
torchtitan's interface: `update_from_config(settings)` and `get_nparams_and_flops(model, seq_len)`.
`FLAVORS` are the sizes `--model.flavor` selects: `small` and `medium` are the paper's Table 3
(GPT-2 small / medium shapes, 1024 positions); `debugmodel`, `tiny` and `mini` train on 2 CPU cores.

The backbone is the paper's by default (RMSNorm, RMSNorm on queries and keys, exact GELU, an untied
head with a bias). `GPT2_BACKBONE` is GPT-2's (LayerNorm with bias, no query/key norm, tanh GELU, the
head tied to the token embedding), so a GPT-2 checkpoint loads with nothing lost (model/gpt2.py); the
`gpt2*` flavors are GPT-2's four sizes on it, and `gpt2-tiny` the CPU stand-in of the study.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import torch.nn as nn

CONDITIONINGS = ("adaln", "concat", "none")
LOSS_PATHS = ("logits", "fused")
"""How training meets the head: `logits` (forward returns them, the loss reads them) or `fused` (forward is given
the labels and returns the loss, the head's GEMM chunked with it: no logits tensor; model.py)."""
NORMS = ("rmsnorm", "layernorm")
GELUS = ("exact", "tanh")


def check_conditioning(conditioning: str, key: str = "aogpt.conditioning") -> None:
    """The model knows its conditionings; the `[aogpt]` section and the model args both ask here."""
    if conditioning not in CONDITIONINGS:
        raise ConfigError(f"{key}={conditioning!r} is not supported; allowed: {', '.join(CONDITIONINGS)}")


def check_loss_path(loss_path: str, key: str = "aogpt.loss_path") -> None:
    if loss_path not in LOSS_PATHS:
        raise ConfigError(f"{key}={loss_path!r} is not supported; allowed: {', '.join(LOSS_PATHS)}")


def check_positions(key: str, length: int, max_seq_len: int, owner: str) -> None:
    """A sequence length must fit the model's position tables (1..max_seq_len): training and validation
    seq_len in preflight and in `update_from_config`, sample lengths. `owner` names the model, e.g.
    "model.flavor='debugmodel'"."""
    if not 1 <= length <= max_seq_len:
        raise ConfigError(f"{key}={length} is outside the positions of {owner}; allowed: 1..{max_seq_len}")


@dataclass
class AOGPTModelArgs:
    dim: int = 768
    n_layers: int = 12
    n_heads: int = 12
    vocab_size: int = 50257  # real tokenizer vocabulary (GPT-2)
    vocab_multiple: int = 64  # the embedding / head are padded to a multiple of this
    max_seq_len: int = 1024  # n: number of token positions the model has embeddings for
    mlp_ratio: int = 4
    conditioning: str = "adaln"  # adaln (AO-GPT) | concat (sigma-GPT target PE) | none (plain AR GPT)
    target_pe_dim: int = 128  # width of the target-position table feeding adaLN
    norm_eps: float = 1e-5
    bias: bool = True
    norm: str = "rmsnorm"  # rmsnorm (the paper's) | layernorm (GPT-2's, with a bias)
    qk_norm: bool = True  # RMSNorm on each head's queries and keys (the paper's); GPT-2 has none
    gelu: str = "exact"  # exact (the paper's) | tanh (GPT-2's approximation)
    tie_head: bool = False  # the head's weights are the token embedding's, no head bias (GPT-2)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_conditioning(self.conditioning)
        for key, allowed in (("norm", NORMS), ("gelu", GELUS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"model.{key}={getattr(self, key)!r} is not supported; allowed: {', '.join(allowed)}")
        if self.dim % self.n_heads != 0:
            raise ConfigError(f"dim={self.dim} must be divisible by n_heads={self.n_heads}")
        for key in ("dim", "n_layers", "n_heads", "vocab_size", "max_seq_len", "target_pe_dim"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def gpt2_backbone(self) -> bool:
        """GPT-2's backbone: a GPT-2 checkpoint maps onto these args with nothing lost (model/gpt2.py)."""
        return all(getattr(self, k) == v for k, v in GPT2_BACKBONE.items())

    @property
    def padded_vocab_size(self) -> int:
        m = self.vocab_multiple
        return (self.vocab_size + m - 1) // m * m

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> AOGPTModelArgs:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown model args {sorted(unknown)}; allowed: {sorted(known)}")
        return cls(**d)

    # ---- torchtitan BaseModelArgs contract -------------------------------------------------
    micro_batch = 1
    """Not a field (no config.json or checkpoint holds it): the sequences of a training micro-batch, which one
    forward's adaLN tables serve; `update_from_config` sets it, the FLOP count reads it."""

    def update_from_config(self, settings, **kwargs) -> None:
        """Copy the AO options of the `[aogpt]` TOML section in (and its tokenizer's vocabulary size) and
        check `training.seq_len`. `settings`: the run's settings (training/sections.py), or the JobConfig
        torchtitan 0.2.2's Trainer passes, which has the same paths."""
        ao = getattr(settings, "aogpt", None)
        if ao is not None:
            self.conditioning = ao.conditioning
            self.target_pe_dim = ao.target_pe_dim
            self.vocab_size = ao.vocab_size()  # the embedding follows the tokenizer
        self.validate()
        owner = f"model.flavor={settings.model.flavor!r}"
        check_positions("training.seq_len", settings.training.seq_len, self.max_seq_len, owner)
        self.micro_batch = settings.training.local_batch_size

    def get_nparams_and_flops(
        self, model: nn.Module, seq_len: int, micro_batch: int | None = None
    ) -> tuple[int, float]:
        """Total parameters and training FLOPs per token (forward + backward), as executed.

        6 FLOPs per matmul weight per token (every nn.Linear but adaLN's: attention, MLP and the LM head, tied
        or not) plus attention scores/values, 12 * layers * dim * seq_len, counted densely as torchtitan does
        for causal attention. adaLN's Linears run once per forward on the seq_len positions' table
        (model.modulation_rows), whatever the micro-batch (`micro_batch` sequences, default the run's
        `self.micro_batch`): 6 FLOPs per adaLN weight per position, shared by the micro-batch's tokens.
        Embedding lookups and the table's gathers cost nothing.
        """
        import torch.nn as nn

        nparams = sum(p.numel() for p in model.parameters())
        per_token = per_position = 0
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                if name.endswith("adaln"):  # layers.N.adaln and final_adaln
                    per_position += module.weight.numel()
                else:
                    per_token += module.weight.numel()
        if self.tie_head:  # the head multiplies by the token embedding, which is no nn.Linear
            per_token += self.padded_vocab_size * self.dim
        tables = (
            6 * per_position / (micro_batch or self.micro_batch)
        )  # per token: seq_len positions, batch x seq_len tokens
        flops = 6 * per_token + tables + 12 * self.n_layers * self.dim * seq_len
        return nparams, flops


GPT2_BACKBONE = {"norm": "layernorm", "qk_norm": False, "gelu": "tanh", "tie_head": True}
"""GPT-2's backbone as model args (what `gpt2_backbone` asks). A GPT-2 checkpoint of P positions reads
<|endoftext|> + P - 1 tokens; the [None] slot takes position row 0, so its flavor has P - 1 positions."""

FLAVORS: dict[str, AOGPTModelArgs] = {
    "debugmodel": AOGPTModelArgs(dim=64, n_layers=2, n_heads=4, max_seq_len=256),
    "tiny": AOGPTModelArgs(dim=128, n_layers=4, n_heads=4, max_seq_len=256),
    "mini": AOGPTModelArgs(dim=256, n_layers=6, n_heads=8, max_seq_len=512),
    "small": AOGPTModelArgs(dim=768, n_layers=12, n_heads=12, max_seq_len=1024),
    "medium": AOGPTModelArgs(dim=1024, n_layers=24, n_heads=16, max_seq_len=1024),
    "gpt2-tiny": AOGPTModelArgs(dim=128, n_layers=4, n_heads=4, max_seq_len=255, **GPT2_BACKBONE),
    "gpt2": AOGPTModelArgs(dim=768, n_layers=12, n_heads=12, max_seq_len=1023, **GPT2_BACKBONE),
    "gpt2-medium": AOGPTModelArgs(dim=1024, n_layers=24, n_heads=16, max_seq_len=1023, **GPT2_BACKBONE),
    "gpt2-large": AOGPTModelArgs(dim=1280, n_layers=36, n_heads=20, max_seq_len=1023, **GPT2_BACKBONE),
    "gpt2-xl": AOGPTModelArgs(dim=1600, n_layers=48, n_heads=25, max_seq_len=1023, **GPT2_BACKBONE),
}
