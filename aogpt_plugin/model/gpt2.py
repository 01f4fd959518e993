"""GPT-2 weights in: a Hugging Face GPT2LMHeadModel folder -> AO-GPT on GPT-2's backbone, nothing lost.

A decoder-only any-order model read at the identity order is a left-to-right model, so a GPT-2
checkpoint can be the start of any-order training. The mapping, for a folder of P positions:

    tok_embeddings      wte (the rows the head is padded with: zero)
    none_embedding      wte[<|endoftext|>]: the [None] slot reads <|endoftext|> ...
    pos_embeddings      wpe, unshifted: ... at position row 0, and the token at position p reads row
                        p + 1, so at the identity order the model reads <|endoftext|> + x as GPT-2 does
    layers.i            ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj (Conv1D weights
                        are stored (in, out): transposed into nn.Linear's (out, in))
    norm                ln_f (the head is tied to wte, as GPT-2's)
    adaln, final_adaln  the identity: weight 0, shift 0, scale 0, gate 1. The target position starts
                        silent, and the adaLN weights get gradients from the first step (their input,
                        SiLU of the target table, is not zero)
    target_embeddings   adaln: not GPT-2's, initialised by the caller (`aogpt convert --from-hf`: the
                        seeded init of `init_target_table`; training: the model's own init);
                        concat: zero, silent like adaLN's identity

The folder is checked before any tensor is read (`read_gpt2_folder`, `check_gpt2_matches`): each
mismatch with the model args (layers, width, heads, vocabulary, positions, ...) is one error line
naming both values. Weights are read one tensor at a time (`GPT2Weights`) from model.safetensors or
pytorch_model.bin (or their sharded index), with or without the `transformer.` prefix.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError, UserError
from .args import FLAVORS, GPT2_BACKBONE, AOGPTModelArgs

if TYPE_CHECKING:
    import torch

MODEL_TYPE = "gpt2"
# the files a Hugging Face folder keeps its weights in, in the order they are looked for
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")  # transformers' names of GPT-2's tanh approximation
PREFIX = "transformer."
# in old files: the causal mask buffers, and the head that GPT2LMHeadModel ties to wte
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
TIED_HEAD = "lm_head.weight"


@dataclass(frozen=True)
class GPT2Folder:
    """A checked Hugging Face GPT-2 folder: its config.json and its weight files (nothing read yet)."""

    path: str
    config: dict
    weight_files: tuple[str, ...]

    def value(self, key: str):
        """A config.json value, with GPT2Config's default where the file leaves it out."""
        defaults = {"n_inner": None, "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256}
        defaults |= {"activation_function": "gelu_new", "scale_attn_weights": True, "tie_word_embeddings": True}
        defaults |= {"scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}
        return self.config.get(key, defaults.get(key))

    @property
    def start_token_id(self) -> int:
        """The token GPT-2 begins a text with, <|endoftext|>: the [None] slot reads its embedding."""
        return int(self.value("bos_token_id"))

    @property
    def mlp_width(self) -> int:
        return self.value("n_inner") or 4 * self.config["n_embd"]


def _weight_files(path: str, name: str) -> tuple[str, ...]:
    """The files of `name` (one file, or the shards its index lists)."""
    file = os.path.join(path, name)
    if not name.endswith(".index.json"):
        return (file,)
    try:
        with open(file) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError) as e:
        raise UserError(f"GPT-2 folder {path!r}: cannot read {name} ({type(e).__name__})") from None
    missing = [s for s in shards if not os.path.isfile(os.path.join(path, s))]
    if missing:
        raise UserError(f"GPT-2 folder {path!r}: {name} lists {missing[0]!r}, which is not in the folder")
    return tuple(os.path.join(path, s) for s in shards)


def is_gpt2_folder(path: str) -> bool:
    """A folder whose config.json is a Hugging Face GPT-2's (anything else: False, nothing raised)."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == MODEL_TYPE


def read_gpt2_folder(path: str, key: str = "HF_DIR") -> GPT2Folder:
    """config.json and the weight files of a GPT2LMHeadModel folder, checked; reads no weights.
    `key` names where the path came from in the error (a flag or a config key)."""
    if not os.path.isdir(path):
        what = "is a file" if os.path.isfile(path) else "does not exist"
        raise UserError(f"{key}={path!r} {what}; give a Hugging Face GPT-2 folder (config.json + model.safetensors)")
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(
            f"{key}={path!r}: cannot read config.json ({type(e).__name__}); is it a Hugging Face folder?"
        ) from None
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else None
        raise UserError(
            f"{key}={path!r} holds a model_type={found!r} config.json; allowed: {MODEL_TYPE!r} (GPT2LMHeadModel)"
        )
    name = next((n for n in WEIGHT_FILES if os.path.isfile(os.path.join(path, n))), None)
    if name is None:
        raise UserError(f"{key}={path!r} holds no weights; allowed: {', '.join(WEIGHT_FILES)}")
    return GPT2Folder(path, config, _weight_files(path, name))


def gpt2_model_args(folder: GPT2Folder, conditioning: str = "adaln", target_pe_dim: int = 128) -> AOGPTModelArgs:
    """The model args that hold the folder's GPT-2 (what `aogpt convert --from-hf` builds)."""
    c = folder.config
    try:
        dim, mlp = int(c["n_embd"]), folder.mlp_width
        args = AOGPTModelArgs(
            dim=dim,
            n_layers=int(c["n_layer"]),
            n_heads=int(c["n_head"]),
            vocab_size=int(c["vocab_size"]),
            max_seq_len=int(c["n_positions"]) - 1,
            mlp_ratio=mlp // dim,
            conditioning=conditioning,
            target_pe_dim=target_pe_dim,
            norm_eps=float(folder.value("layer_norm_epsilon")),
            **GPT2_BACKBONE,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"GPT-2 folder {folder.path!r}: config.json lacks or mistypes {e}") from None
    check_gpt2_matches(folder, args, "its model args")
    return args


def check_gpt2_matches(folder: GPT2Folder, args: AOGPTModelArgs, owner: str) -> None:
    """The folder's GPT-2 is the model `args` describe (`owner` names them: "model.flavor='gpt2'"), and
    a GPT-2 variant this mapping holds exactly; the first difference is one ConfigError naming both values."""
    where = f"GPT-2 folder {folder.path!r}"
    if not args.gpt2_backbone:
        differ = ", ".join(f"{k}={getattr(args, k)!r}" for k, v in GPT2_BACKBONE.items() if getattr(args, k) != v)
        flavors = [name for name, a in FLAVORS.items() if a.gpt2_backbone]
        raise ConfigError(f"{where} needs GPT-2's backbone but {owner} has {differ}; allowed: {', '.join(flavors)}")
    c = folder.config
    shapes = [
        ("layers", "n_layer", c.get("n_layer"), "n_layers", args.n_layers),
        ("width", "n_embd", c.get("n_embd"), "dim", args.dim),
        ("heads", "n_head", c.get("n_head"), "n_heads", args.n_heads),
        ("vocabulary", "vocab_size", c.get("vocab_size"), "vocab_size (the tokenizer's)", args.vocab_size),
        ("positions", "n_positions", c.get("n_positions"), "max_seq_len + 1 ([None] + tokens)", args.max_seq_len + 1),
        ("MLP width", "n_inner", folder.mlp_width, "mlp_ratio x dim", args.mlp_ratio * args.dim),
    ]
    for what, theirs, found, ours, want in shapes:
        if found != want:
            raise ConfigError(f"{where} has {what} {theirs}={found} but {owner} has {ours}={want}; they must be equal")
    eps = folder.value("layer_norm_epsilon")
    if not math.isclose(eps, args.norm_eps, rel_tol=1e-9):
        raise ConfigError(
            f"{where} has layer_norm_epsilon={eps} but {owner} has norm_eps={args.norm_eps}; they must be equal"
        )
    variant = [
        ("activation_function", TANH_GELUS),
        ("scale_attn_weights", (True,)),
        ("scale_attn_by_inverse_layer_idx", (False,)),
        ("tie_word_embeddings", (True,)),
        ("add_cross_attention", (False,)),
    ]
    for key, allowed in variant:
        if folder.value(key) not in allowed:
            raise ConfigError(
                f"{where} has {key}={folder.value(key)!r}, a GPT-2 variant aogpt does not map; allowed: "
                f"{', '.join(map(repr, allowed))}"
            )


def check_start_token(folder: GPT2Folder, eos_id: int | None, tokenizer: str, key: str) -> None:
    """The folder's <|endoftext|> (bos_token_id) is the tokenizer's end of text: the [None] slot reads it."""
    if eos_id != folder.start_token_id:
        raise ConfigError(
            f"GPT-2 folder {folder.path!r} begins texts with token {folder.start_token_id} (bos_token_id) but "
            f"{key}={tokenizer!r} ends them with {eos_id}; they must be the same token"
        )


# ---- the tensors -----------------------------------------------------------------------------
def gpt2_shapes(args: AOGPTModelArgs) -> dict[str, tuple[int, ...]]:
    """GPT2LMHeadModel's tensors for `args` (without its tied head), by name, in its layout."""
    d, hidden, vocab, positions = args.dim, args.mlp_ratio * args.dim, args.vocab_size, args.max_seq_len + 1
    shapes = {f"{PREFIX}wte.weight": (vocab, d), f"{PREFIX}wpe.weight": (positions, d)}
    for i in range(args.n_layers):
        h = f"{PREFIX}h.{i}."
        shapes |= {h + "ln_1.weight": (d,), h + "ln_1.bias": (d,), h + "ln_2.weight": (d,), h + "ln_2.bias": (d,)}
        shapes |= {h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,)}
        shapes |= {h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,)}
        shapes |= {h + "mlp.c_fc.weight": (d, hidden), h + "mlp.c_fc.bias": (hidden,)}
        shapes |= {h + "mlp.c_proj.weight": (hidden, d), h + "mlp.c_proj.bias": (d,)}
    return shapes | {f"{PREFIX}ln_f.weight": (d,), f"{PREFIX}ln_f.bias": (d,)}


def canonical_name(name: str) -> str | None:
    """A file's tensor name as GPT2LMHeadModel names it (GPT2Model's files lack the prefix); None for
    what the mapping does not read (mask buffers, the tied head)."""
    if name.endswith(IGNORED_SUFFIXES) or name == TIED_HEAD:
        return None
    return name if name.startswith(PREFIX) else PREFIX + name


def _load_bin(file: str) -> dict[str, torch.Tensor]:
    """A pytorch_model.bin, memory-mapped (tensors read when touched); files written by torch < 1.6 (no zip
    container) cannot be mapped and are read whole."""
    import torch

    try:
        return torch.load(file, map_location="cpu", mmap=True, weights_only=True)
    except RuntimeError as e:
        if "mmap" not in str(e):
            raise
        return torch.load(file, map_location="cpu", weights_only=True)


class GPT2Weights(Mapping):
    """The folder's tensors under GPT2LMHeadModel's names, each read when asked for (a 6 GB gpt2-xl is
    never held twice). The names and shapes are checked against `args` when it opens."""

    def __init__(self, folder: GPT2Folder, args: AOGPTModelArgs):
        from safetensors import SafetensorError, safe_open

        self.folder = folder
        self._sources: dict[str, tuple[object, str]] = {}  # canonical name -> (open file, its name there)
        found: dict[str, tuple[int, ...]] = {}
        for file in folder.weight_files:
            try:
                if file.endswith(".safetensors"):
                    handle = safe_open(file, framework="pt")
                    names = {n: tuple(handle.get_slice(n).get_shape()) for n in handle.keys()}  # noqa: SIM118
                else:
                    handle = _load_bin(file)
                    names = {n: tuple(t.shape) for n, t in handle.items()}
            except (OSError, SafetensorError, RuntimeError, ValueError) as e:
                raise UserError(
                    f"GPT-2 folder {folder.path!r}: cannot read {os.path.basename(file)} ({type(e).__name__})"
                ) from None
            for name, shape in names.items():
                canonical = canonical_name(name)
                if canonical is not None:
                    self._sources[canonical] = (handle, name)
                    found[canonical] = shape
        want = gpt2_shapes(args)
        missing = sorted(set(want) - set(found))
        unknown = sorted(set(found) - set(want))
        if missing or unknown:
            what = (
                f"lacks {missing[0]!r}"
                if missing
                else f"holds {unknown[0]!r}, which GPT2LMHeadModel of its config has not"
            )
            raise UserError(
                f"GPT-2 folder {folder.path!r} {what} ({len(missing)} missing, {len(unknown)} unknown tensors)"
            )
        bad = next((n for n in want if found[n] != want[n]), None)
        if bad is not None:
            raise UserError(
                f"GPT-2 folder {folder.path!r}: tensor {bad!r} has shape {list(found[bad])} but its config.json "
                f"implies {list(want[bad])}; the folder is damaged"
            )

    def __getitem__(self, name: str) -> torch.Tensor:
        handle, stored = self._sources[name]
        return handle.get_tensor(stored) if hasattr(handle, "get_tensor") else handle[stored]

    def __iter__(self):
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


# ---- GPT-2 -> AO-GPT ---------------------------------------------------------------------------
# (our name, GPT-2's name under transformer.h.{i}., transposed: a Conv1D weight)
_BLOCK = [
    ("attention_norm.weight", "ln_1.weight", False),
    ("attention_norm.bias", "ln_1.bias", False),
    ("attention.wqkv.weight", "attn.c_attn.weight", True),  # [q | k | v], heads contiguous: our wqkv's layout
    ("attention.wqkv.bias", "attn.c_attn.bias", False),
    ("attention.wo.weight", "attn.c_proj.weight", True),
    ("attention.wo.bias", "attn.c_proj.bias", False),
    ("ffn_norm.weight", "ln_2.weight", False),
    ("ffn_norm.bias", "ln_2.bias", False),
    ("feed_forward.w1.weight", "mlp.c_fc.weight", True),
    ("feed_forward.w1.bias", "mlp.c_fc.bias", False),
    ("feed_forward.w2.weight", "mlp.c_proj.weight", True),
    ("feed_forward.w2.bias", "mlp.c_proj.bias", False),
]
RANDOM_TABLE = "target_embeddings.weight"  # adaln: the one parameter GPT-2 has no value for


def identity_modulation(args: AOGPTModelArgs, n_chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of an adaLN Linear whose output is shift 0, scale 0 (and gate 1) for every target."""
    import torch

    weight = torch.zeros(n_chunks * args.dim, args.target_pe_dim)
    bias = torch.zeros(n_chunks, args.dim)
    if n_chunks == 6:  # shift, scale, gate of attention, then of the MLP (model.TransformerBlock)
        bias[2] = bias[5] = 1.0
    return weight, bias.reshape(-1)


def from_gpt2(gpt2: Mapping[str, torch.Tensor], args: AOGPTModelArgs, start_token_id: int) -> dict[str, torch.Tensor]:
    """AO-GPT's state dict (float32) from GPT2LMHeadModel's tensors (`GPT2Weights`, or a state dict under
    its names); under adaLN without `RANDOM_TABLE`, which the caller initialises."""
    import torch

    f32 = lambda name: gpt2[name].to(torch.float32)
    wte = f32(f"{PREFIX}wte.weight")
    tok = torch.zeros(args.padded_vocab_size, args.dim)
    tok[: args.vocab_size] = wte
    out = {
        "tok_embeddings.weight": tok,
        "pos_embeddings.weight": f32(f"{PREFIX}wpe.weight").clone(),
        "none_embedding": wte[start_token_id : start_token_id + 1].clone(),
        "norm.weight": f32(f"{PREFIX}ln_f.weight").clone(),
        "norm.bias": f32(f"{PREFIX}ln_f.bias").clone(),
    }
    for i in range(args.n_layers):
        for ours, theirs, transposed in _BLOCK:
            t = f32(f"{PREFIX}h.{i}.{theirs}")
            out[f"layers.{i}.{ours}"] = (t.t() if transposed else t).contiguous().clone()
        if args.conditioning == "adaln":
            out[f"layers.{i}.adaln.weight"], out[f"layers.{i}.adaln.bias"] = identity_modulation(args, 6)
    if args.conditioning == "adaln":
        out["final_adaln.weight"], out["final_adaln.bias"] = identity_modulation(args, 2)
    elif args.conditioning == "concat":
        out[RANDOM_TABLE] = torch.zeros(args.max_seq_len, args.dim)
    return out


def init_target_table(args: AOGPTModelArgs, seed: int) -> torch.Tensor:
    """adaLN's target-position table as the model's init draws it (truncated normal, std 0.02), from
    its own seeded stream: a conversion is reproducible."""
    import torch

    from ..seeding import stream_generator

    table = torch.empty(args.max_seq_len, args.target_pe_dim)
    g = stream_generator("gpt2_target_table", seed)
    return torch.nn.init.trunc_normal_(table, std=0.02, a=-0.06, b=0.06, generator=g)
