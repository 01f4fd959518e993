"""The sampler's named choices, spelled once: the samplers check them, the torch-free CLIs offer them."""

from dataclasses import dataclass

SCHEDULES = ("linear", "cosine")  # time grid of parallel steps (sampling.py)
COUNTS = ("deterministic", "binomial")  # how many tokens a step draws (Lemma 4.1 / binomial)
BACKENDS = ("auto", "sdpa", "flex")  # attention of the cached decoder (decoder.py)
LINEAR_KERNELS = ("auto", "aten", "onednn")  # how the decode view runs its Linears (decoder.py)
# how a decode step runs (static.py): off = the dynamic sampler; static = the static-shape step, eagerly;
# on = that step captured in CUDA graphs (on a CPU: compiled step, no CUDA graph); compile = inductor-compiled,
# then captured on CUDA; auto = on for CUDA, off elsewhere
GRAPHS = ("auto", "on", "off", "compile", "static")


def add_graphs_arg(p) -> None:
    """`--graphs`, the same on every command that samples."""
    p.add_argument(
        "--graphs",
        choices=GRAPHS,
        default="auto",
        help="how each decode step runs: off (the dynamic sampler), on (a static step replayed from CUDA graphs; "
        "on a CPU: compiled step, no CUDA graph, as compile), compile (inductor, then graphs on CUDA), static (the "
        "static step, eager); auto: on for CUDA, off elsewhere. Same seed, same samples",
    )


# The static step's FlexAttention (`--decode-attention`): its BlockMask layout and FlexDecoding's kernel options.
# full = blocks the whole query block sees listed as full, the last as partial; partial = every touched block
# partial (masks.step_block_mask's `full_blocks`): FlexDecoding then splits only the touched blocks over its programs
DECODE_LAYOUTS = ("full", "partial")
# a setting's keys and the FlexAttention kernel option each sets (a key left out: torch's choice)
DECODE_KNOBS = {"split": "SPLIT_KV", "stages": "num_stages", "warps": "num_warps", "backend": "BACKEND"}
DECODE_ATTENTION_FORM = "auto, or full|partial followed by any of ,split=N ,stages=N ,warps=N ,backend=NAME"


@dataclass(frozen=True)
class DecodeAttention:
    """How the static decode step attends with FlexAttention: the BlockMask layout and the kernel options of
    FlexDecoding (None: torch's choice). Spelled `partial,split=4` (str), the form `--decode-attention` takes."""

    layout: str  # full | partial
    split: int | None = None  # SPLIT_KV: programs per (sample, head), each a share of the listed blocks
    stages: int | None = None  # num_stages: software-pipelined loads of the key/value tiles
    warps: int | None = None  # num_warps
    backend: str | None = None  # BACKEND (AUTO, TRITON, TRITON_DECODE, ...), where the installed torch has it

    @property
    def full_blocks(self) -> bool:
        return self.layout == "full"

    def kernel_options(self) -> dict | None:
        """FlexAttention's `kernel_options` for this setting (None: all torch's)."""
        options = {option: getattr(self, key) for key, option in DECODE_KNOBS.items() if getattr(self, key) is not None}
        return options or None

    def __str__(self) -> str:
        knobs = [f"{key}={getattr(self, key)}" for key in DECODE_KNOBS if getattr(self, key) is not None]
        return ",".join([self.layout, *knobs])


def add_decode_attention_arg(p) -> None:
    """`--decode-attention`, the same on every command that samples with the static step."""
    p.add_argument(
        "--decode-attention",
        default="auto",
        metavar="SETTING",
        help="the static step's FlexAttention (--backend flex, --graphs on|compile|static): its BlockMask layout "
        "(full: full blocks listed; partial: every touched block partial) and FlexDecoding's kernel options, "
        "e.g. partial,split=4,stages=3,warps=4 (SPLIT_KV, num_stages, num_warps; backend=NAME: BACKEND); "
        "auto: the sampler's default (sampler/choices.py). Same samples",
    )


BATCHING = (
    "continuous",
    "fixed",
)  # the engine's admission (engine.py): a sample joins as another leaves, or a batch at a time
