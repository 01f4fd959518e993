"""`aogpt convert CHECKPOINT_DIR OUT_DIR`: a torchtitan DCP checkpoint -> model.safetensors + config.json;
`aogpt convert --from-hf HF_DIR OUT_DIR`: a Hugging Face GPT-2 folder -> the same (model/gpt2.py).

Reads the checkpoint without torchtitan and without a process group (DCP `no_dist` load, which
reassembles shards written by any world size). The model args and the tokenizer come from the
step folder's record (`aogpt.json`, checkpoints.py), so no TOML and no tokenizer has to be re-typed;
checkpoints written before the record existed fall back to reading the tensor shapes. OUT_DIR is written through model_dir.py: to a
temporary sibling first and renamed into place, so a failed conversion never leaves a half-written
OUT_DIR and `--force` replaces an old one only once the new one is complete.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import TYPE_CHECKING

from .checkpoints import read_metadata, resolve_step_dir
from .errors import UserError, interruption
from .model import AOGPTModelArgs

if TYPE_CHECKING:  # torch and the model folder load only when a conversion runs (fast --help)
    import torch

    from .model_dir import ModelDirConfig

WEIGHTS = ("ema", "raw")


def infer_model_args(shapes: dict[str, torch.Size], vocab_size: int, tokenizer: str = "gpt2") -> AOGPTModelArgs:
    """Model hyper-parameters from parameter shapes, for checkpoints without a record (n_heads from the
    per-head QK-norm width; norm_eps cannot be recovered and takes its default)."""
    try:
        padded, dim = shapes["tok_embeddings.weight"]
        max_seq_len = shapes["pos_embeddings.weight"][0] - 1
        head_dim = shapes["layers.0.attention.q_norm.weight"][0]
        hidden = shapes["layers.0.feed_forward.w1.weight"][0]
    except KeyError as e:
        raise UserError(f"checkpoint has no aogpt parameter {e.args[0]!r}; is it an aogpt checkpoint?") from None
    n_layers = len({k.split(".")[1] for k in shapes if k.startswith("layers.")})
    if "layers.0.adaln.weight" in shapes:
        conditioning, tpe = "adaln", shapes["target_embeddings.weight"][1]
    elif "target_embeddings.weight" in shapes:
        conditioning, tpe = "concat", 128
    else:
        conditioning, tpe = "none", 128
    multiple = AOGPTModelArgs.vocab_multiple
    if (vocab_size + multiple - 1) // multiple * multiple != padded:
        raise UserError(
            f"--tokenizer {tokenizer!r} has {vocab_size} tokens but the checkpoint's embedding has {padded} rows "
            f"(a vocabulary of {padded - multiple + 1}..{padded} tokens); give the tokenizer the run trained with"
        )
    return AOGPTModelArgs(
        dim=dim,
        n_layers=n_layers,
        n_heads=dim // head_dim,
        vocab_size=vocab_size,
        vocab_multiple=multiple,
        max_seq_len=max_seq_len,
        mlp_ratio=hidden // dim,
        conditioning=conditioning,
        target_pe_dim=tpe,
        bias="layers.0.attention.wqkv.bias" in shapes,
    )


def read_checkpoint_weights(step_dir: str, weights: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The chosen weights (raw or EMA) under model parameter names, plus a little metadata."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from .model_dir import check_finite

    if weights not in WEIGHTS:
        raise UserError(f"--weights {weights!r} is not allowed; allowed: {', '.join(WEIGHTS)}")
    md = read_metadata(step_dir)
    tensors = {k: v for k, v in md.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}
    model_keys = [k for k in tensors if k.split(".")[0] in _MODEL_ROOTS]
    if weights == "ema":
        src = {k: "ema." + k for k in model_keys}
        missing = [k for k, s in src.items() if s not in tensors]
        if missing:
            raise UserError(
                f"{step_dir!r} holds no EMA weights (missing e.g. 'ema.{missing[0]}'); "
                "the run had [ema] enable = false: use --weights raw"
            )
    else:
        src = {k: k for k in model_keys}
    state = {s: torch.empty(tensors[s].size, dtype=tensors[s].properties.dtype) for s in src.values()}
    extra = {}
    if "ema.num_updates" in tensors and weights == "ema":
        state["ema.num_updates"] = torch.empty((), dtype=torch.int64)
    if "train_state.step" in md.state_dict_metadata:
        extra["train_state_present"] = True
    with warnings.catch_warnings():  # "torch.distributed is disabled ... single process": intended
        warnings.simplefilter("ignore", UserWarning)
        try:
            dcp.load(state, checkpoint_id=step_dir, no_dist=True)
        except (Exception, CheckpointException) as e:  # data files whose bytes are not what .metadata describes
            stop = interruption(e)  # DCP wraps a Ctrl-C / SIGTERM too
            if stop is not None:
                raise stop from None
            raise UserError(
                f"{step_dir!r}: its data files cannot be read as the tensors its .metadata describes (corrupt checkpoint)"
            ) from None
    out = {k: state[s].float().contiguous() for k, s in src.items()}
    check_finite(out, f"{step_dir!r} ({weights} weights)")
    if "ema.num_updates" in state:
        extra["ema_updates"] = int(state["ema.num_updates"])
    return out, extra


_MODEL_ROOTS = {
    "tok_embeddings",
    "pos_embeddings",
    "none_embedding",
    "target_embeddings",
    "layers",
    "norm",
    "final_adaln",
    "output",
}


def model_args_and_tokenizer(step_dir: str, shapes: dict, tokenizer: str | None) -> tuple[AOGPTModelArgs, str, dict]:
    """The model args and tokenizer a checkpoint was trained with: from its record (checkpoints.py)
    when it has one, else (older checkpoints) from the tensor shapes and `--tokenizer`, whose
    vocabulary must fit the checkpoint's embedding."""
    from .checkpoints import read_record, record_tokenizer
    from .data.tokenizer import load_tokenizer, same_tokenizer
    from .errors import ConfigError

    record = read_record(step_dir)
    if record is None:
        spec = tokenizer or "gpt2"
        vocab = load_tokenizer(spec, key="--tokenizer").get_vocab_size()
        return infer_model_args(shapes, vocab, spec), spec, {}
    try:
        args = AOGPTModelArgs.from_dict(record["model_args"])
    except (ConfigError, TypeError) as e:
        raise UserError(f"{step_dir!r}: bad model_args in its aogpt.json ({e})") from None
    spec = record_tokenizer(step_dir, record)
    if tokenizer is not None and not same_tokenizer(tokenizer, spec):
        vocab = load_tokenizer(tokenizer, key="--tokenizer").get_vocab_size()
        raise UserError(
            f"--tokenizer {tokenizer!r} ({vocab} tokens) is not the tokenizer {step_dir!r} was trained with "
            f"({record['tokenizer']!r}, {args.vocab_size} tokens, recorded in its aogpt.json); drop --tokenizer"
        )
    want = _parameter_shapes(args)
    bad = next((k for k, v in shapes.items() if k in want and tuple(v) != want[k]), None)
    if bad is not None or set(want) != set(shapes):
        raise UserError(
            f"{step_dir!r}: its weights do not match the model args its aogpt.json records "
            f"({bad or sorted(set(want) ^ set(shapes))[:3]}); the checkpoint is damaged"
        )
    extra = {"training": {k: record[k] for k in ("flavor", "aogpt", "ema") if k in record}}
    return args, spec, extra


def _parameter_shapes(args: AOGPTModelArgs) -> dict[str, tuple]:
    import torch

    from .model import AOGPT

    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in AOGPT(args).state_dict().items()}


def convert(
    checkpoint_dir: str,
    out_dir: str,
    weights: str = "ema",
    step: int | None = None,
    tokenizer: str | None = None,
    force: bool = False,
) -> ModelDirConfig:
    """Write OUT_DIR/model.safetensors and OUT_DIR/config.json; returns the config written."""
    from .model_dir import CHECKPOINT, check_out_dir, save_model_dir, source_kind

    check_out_dir(out_dir, force)
    source_kind(checkpoint_dir, "CHECKPOINT_DIR", (CHECKPOINT,))  # a model folder needs no conversion
    try:
        state, config = read_checkpoint(checkpoint_dir, weights, step, tokenizer)
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM while reading: the command's one line says so
        e.detail = f"{out_dir!r} was not written"
        raise
    save_model_dir(out_dir, state, config)
    return config


def read_checkpoint(
    checkpoint_dir: str, weights: str = "ema", step: int | None = None, tokenizer: str | None = None
) -> tuple[dict[str, torch.Tensor], ModelDirConfig]:
    """The weights and the model folder config of a checkpoint (what `convert` writes; `aogpt export` too)."""
    from .model_dir import ModelDirConfig

    step_dir, step_found = resolve_step_dir(checkpoint_dir, step)
    state, extra = read_checkpoint_weights(step_dir, weights)
    args, spec, more = model_args_and_tokenizer(step_dir, {k: v.shape for k, v in state.items()}, tokenizer)
    config = ModelDirConfig(
        model_args=args,
        tokenizer=spec,
        step=step_found,
        weights=weights,
        source=os.path.abspath(step_dir),
        extra=extra | more,
    )
    return state, config


TARGET_TABLE_SEED = 0  # the seed of adaLN's target table in a GPT-2 conversion (recorded in config.json)


def convert_from_hf(hf_dir: str, out_dir: str, tokenizer: str | None = None, force: bool = False) -> ModelDirConfig:
    """A Hugging Face GPT2LMHeadModel folder -> a model folder on GPT-2's backbone, adaLN at the identity
    (model/gpt2.py): at the identity order it scores text exactly as the GPT-2 does after <|endoftext|>.
    Everything is checked (the weight files' names and shapes too) before OUT_DIR is taken."""
    from .data.tokenizer import load_tokenizer
    from .model.gpt2 import (
        RANDOM_TABLE,
        GPT2Weights,
        check_start_token,
        from_gpt2,
        gpt2_model_args,
        init_target_table,
        read_gpt2_folder,
    )
    from .model_dir import ModelDirConfig, check_out_dir, save_model_dir

    spec = tokenizer or "gpt2"
    folder = read_gpt2_folder(hf_dir, "--from-hf")
    args = gpt2_model_args(folder)
    tok = load_tokenizer(spec, key="--tokenizer")
    if tok.get_vocab_size() != args.vocab_size:
        raise UserError(
            f"GPT-2 folder {hf_dir!r} has a vocabulary of {args.vocab_size} tokens (vocab_size) but --tokenizer "
            f"{spec!r} has {tok.get_vocab_size()}; give the tokenizer the GPT-2 was trained with"
        )
    check_start_token(folder, tok.eos_id, spec, "--tokenizer")
    weights = GPT2Weights(folder, args)  # opened and checked (names, shapes); nothing read yet
    check_out_dir(out_dir, force)
    try:
        state = from_gpt2(weights, args, folder.start_token_id)
    except KeyboardInterrupt as e:
        e.detail = f"{out_dir!r} was not written"
        raise
    if args.conditioning == "adaln":
        state[RANDOM_TABLE] = init_target_table(args, TARGET_TABLE_SEED)
    config = ModelDirConfig(
        model_args=args,
        tokenizer=spec,
        step=0,
        weights="raw",
        source=os.path.abspath(hf_dir),
        extra={"from_hf": {"model_type": "gpt2", "target_table_seed": TARGET_TABLE_SEED}},
    )
    save_model_dir(out_dir, state, config)
    return config


# ---- `aogpt convert` -----------------------------------------------------------------------
def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "convert",
        help="torchtitan DCP checkpoint (or a Hugging Face GPT-2 folder) -> model.safetensors + config.json",
        usage="aogpt convert CHECKPOINT_DIR OUT_DIR [--weights W] [--step N] [--tokenizer T] [--force]\n"
        "       aogpt convert --from-hf HF_DIR OUT_DIR [--tokenizer T] [--force]",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="CHECKPOINT_DIR OUT_DIR",
        help="a step-N checkpoint folder (or the folder holding them: newest wins), then the output folder (must "
        "not exist unless --force); with --from-hf the output folder alone",
    )
    p.add_argument(
        "--from-hf",
        metavar="HF_DIR",
        default=None,
        help="convert a Hugging Face GPT2LMHeadModel folder (config.json + model.safetensors or pytorch_model.bin) "
        "instead of a checkpoint: GPT-2's backbone, adaLN at the identity",
    )
    p.add_argument("--weights", choices=WEIGHTS, default=None, help="EMA (default) or raw training weights")
    p.add_argument("--step", type=int, default=None, help="which step-N folder to convert")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="--from-hf: the GPT-2's tokenizer (default gpt2); a checkpoint: only one older than its aogpt.json "
        "record (which names the tokenizer): the run's [aogpt] tokenizer, gpt2 (default), a tokenizer.json (copied) "
        "or symbols:V",
    )
    p.add_argument("--force", action="store_true", help="replace OUT_DIR (only once the new one is complete)")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.from_hf is not None:
        if len(args.paths) != 1:
            raise UserError(f"with --from-hf give OUT_DIR alone; got {len(args.paths)} paths {args.paths}")
        given = [f for f, v in (("--weights", args.weights), ("--step", args.step)) if v is not None]
        if given:
            raise UserError(
                f"{given[0]} applies to a checkpoint; --from-hf reads a GPT-2 folder, which has one set of weights"
            )
        config = convert_from_hf(args.from_hf, args.paths[0], args.tokenizer, args.force)
        a = config.model_args
        print(
            f"converted GPT-2 {config.source} -> {args.paths[0]}: {a.n_layers}L/{a.dim}d/{a.n_heads}H, GPT-2 backbone, "
            f"conditioning={a.conditioning} (at the identity), positions={a.max_seq_len}"
        )
        print(json.dumps({"out_dir": args.paths[0], "step": config.step, "weights": config.weights}))
        return 0
    if len(args.paths) != 2:
        raise UserError(f"give CHECKPOINT_DIR OUT_DIR (or --from-hf HF_DIR OUT_DIR); got {len(args.paths)} paths")
    checkpoint_dir, out_dir = args.paths
    config = convert(checkpoint_dir, out_dir, args.weights or "ema", args.step, args.tokenizer, args.force)
    a = config.model_args
    print(
        f"converted step {config.step} ({config.weights} weights) from {config.source} -> {out_dir}: "
        f"{a.n_layers}L/{a.dim}d/{a.n_heads}H, conditioning={a.conditioning}, positions={a.max_seq_len}"
    )
    print(json.dumps({"out_dir": out_dir, "step": config.step, "weights": config.weights}))
    return 0
