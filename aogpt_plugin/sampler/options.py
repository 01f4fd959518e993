"""The sampler's named choices, spelled once: the samplers check them, the torch-free CLIs offer them."""

SCHEDULES = ("linear", "cosine")  # time grid of parallel steps (sampling.py)
COUNTS = ("deterministic", "binomial")  # how many tokens a step draws (Lemma 4.1 / binomial)
BACKENDS = ("auto", "sdpa", "flex")  # attention of the cached decoder (decoder.py)
