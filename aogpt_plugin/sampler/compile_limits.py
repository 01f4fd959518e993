"""Dynamo's recompile limits, raised once for the sampler's compiled code (its own module: the compiled
flex of decoder.py and the compiled step of graphs.py both need it, and neither should import the other).

Dynamo keeps one cache per code object, and every compiled flex wrapper of the process shares
flex_attention's: a static step adds an entry per (batch, width) shape, the dynamic sampler a few more.
A code object past `recompile_limit` (8 by default) runs eagerly from then on, and eager flex cannot be
captured in a CUDA graph (it copies a host scalar), so one long process (an eval, a test session) that
sampled many shapes failed its next capture. The limits are raised, never lowered, before a first compile.
"""

import torch

RECOMPILE_LIMIT = 64


def raise_compile_limits() -> None:
    """Room for a compiled graph per step shape (the sampler's and flex's), process-wide."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
