"""The sampler's named choices, spelled once: the samplers check them, the torch-free CLIs offer them."""

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
