"""`aogpt convert CHECKPOINT_DIR OUT_DIR [--weights ema|raw] [--step N] [--force]`."""

from __future__ import annotations

import json

from .convert import WEIGHTS, convert


def add_to(subparsers) -> None:
    p = subparsers.add_parser("convert", help="torchtitan DCP checkpoint -> model.safetensors + config.json")
    p.add_argument("checkpoint_dir", help="a step-N checkpoint folder, or the folder holding them (newest wins)")
    p.add_argument("out_dir", help="output folder (must not exist unless --force)")
    p.add_argument("--weights", choices=WEIGHTS, default="ema", help="EMA (default) or raw training weights")
    p.add_argument("--step", type=int, default=None, help="which step-N folder to convert")
    p.add_argument("--tokenizer", default="gpt2", help="tiktoken encoding the model was trained with")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR (only once the new one is complete)")
    p.set_defaults(run=run)


def run(args) -> int:
    config = convert(args.checkpoint_dir, args.out_dir, args.weights, args.step, args.tokenizer, args.force)
    a = config["model_args"]
    print(
        f"converted step {config['step']} ({config['weights']} weights) from {config['source']} -> {args.out_dir}: "
        f"{a['n_layers']}L/{a['dim']}d/{a['n_heads']}H, conditioning={a['conditioning']}, "
        f"positions={a['max_seq_len']}"
    )
    print(json.dumps({"out_dir": args.out_dir, **{k: config[k] for k in ("step", "weights")}}))
    return 0
