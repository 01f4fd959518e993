"""Standalone AO-GPT sampler: static KV cache, parallel-generation masks, float64 sampling.

Pure PyTorch -- importing or running it pulls in no torchtitan and needs no process group.

    from aogpt_plugin.model_dir import load_model_dir
    from aogpt_plugin.sampler import SampleConfig, generate

    model = load_model_dir("out/aogpt-small").model
    result = generate(model, SampleConfig(length=256, steps=64, num_samples=4, seed=0))
"""

from .generate import (
    GenerationResult,
    SampleConfig,
    StepRecord,
    generate,
    noise_generator,
    plan_generator,
    samples_record,
)
from .prompt import Prompt, PromptBuilder, parse_infill
from .sampling import SamplingParams, sample_tokens

__all__ = [
    "GenerationResult",
    "Prompt",
    "PromptBuilder",
    "SampleConfig",
    "SamplingParams",
    "StepRecord",
    "generate",
    "noise_generator",
    "parse_infill",
    "plan_generator",
    "sample_tokens",
    "samples_record",
]
