"""Named model sizes ("flavors"), as torchtitan's `--model.flavor` selects them.

`small` and `medium` are the paper's Table 3 (GPT-2 small / medium shapes, 1024 positions).
`debugmodel`, `tiny` and `mini` exist to train on 2 CPU cores in minutes.
"""

from .args import AOGPTModelArgs

FLAVORS: dict[str, AOGPTModelArgs] = {
    "debugmodel": AOGPTModelArgs(dim=64, n_layers=2, n_heads=4, max_seq_len=256),
    "tiny": AOGPTModelArgs(dim=128, n_layers=4, n_heads=4, max_seq_len=256),
    "mini": AOGPTModelArgs(dim=256, n_layers=6, n_heads=8, max_seq_len=512),
    "small": AOGPTModelArgs(dim=768, n_layers=12, n_heads=12, max_seq_len=1024),
    "medium": AOGPTModelArgs(dim=1024, n_layers=24, n_heads=16, max_seq_len=1024),
}
