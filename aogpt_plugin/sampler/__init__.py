"""Standalone AO-GPT sampler: static KV cache, parallel-generation masks, float64 sampling.

Pure PyTorch -- importing or running it pulls in no torchtitan and needs no process group.

    from aogpt_plugin.model_dir import load_model_dir
    from aogpt_plugin.sampler import SampleConfig, generate

    model = load_model_dir("out/aogpt-small").model
    result = generate(model, SampleConfig(length=256, steps=64, num_samples=4, seed=0))
    exact, stats = speculative_generate(model, SampleConfig(length=256, num_samples=4), draft="auto")

Each sample of a batch may have its own prompt, length, order and seed (SampleConfig.lengths / seeds, one
Prompt per sample); `SampleRequest` and `sample_batches` (request.py) run many such requests in batches, and
`Engine` (engine.py) in slots that a request joins as another leaves (`sample_in_slots`).
"""

import importlib

_EXPORTS = {  # name: module that defines it (imported on first use: `aogpt sample --help` loads no torch)
    "GenerationResult": "generation",
    "SampleConfig": "generation",
    "StepRecord": "generation",
    "generate": "generation",
    "noise_seed": "generation",
    "plan_generator": "generation",
    "samples_record": "generation",
    "Prompt": "prompt",
    "PromptBuilder": "prompt",
    "parse_infill": "prompt",
    "SamplingParams": "sampling",
    "sample_tokens": "sampling",
    "SpeculativeStats": "speculative",
    "speculative_generate": "generation",
    "SampleRequest": "request",
    "check_requests": "request",
    "sample_batches": "request",
    "sample_in_slots": "request",
    "Engine": "engine",
    "RequestLine": "requests_file",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
