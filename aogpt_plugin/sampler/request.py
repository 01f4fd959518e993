"""One sampling run from its options: the path `aogpt sample` and the Python API (`aogpt_plugin.load(...)
.generate`) share, so the same options and seed give the same tokens from both.

    request = SampleRequest(num_samples=4, length=128, steps=32, top_p=0.95, seed=0)
    plan = request.plan(model.model_args, tokenizer.encode, device, dtype)   # every value checked, no weights
    samples = run_plan(model, plan, tokenizer.decode)          # tokens (B, n) and their texts

`plan` checks every option against the model's args (positions, vocabulary), turns text spans into
token ids and decides, once, what the run runs with on `device` (choices.py: how each step runs, the
attention, the Linear kernel, the parallel or the speculative sampler), before any weight is read;
`run_plan` runs that sampler (`generate` or `speculative_generate`) with those choices. A new sampler
option is one field here: the commands read it off their flags (`from_args`), the API takes it as a
keyword.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:
    import torch

    from ..model import AOGPT, AOGPTModelArgs
    from .choices import SamplerChoices
    from .generation import GenerationResult, SampleConfig
    from .prompt import Prompt


@dataclass
class SampleRequest:
    """What a caller asks the sampler for; None means "not given" (the default applies).

    length None: all the model's positions; steps None: one step per generated token; schedule and
    counts None: SampleConfig's defaults (and `speculative` refuses them when given). `order` is
    `random`, `l2r`, or (Python only) a tensor of the positions to generate, (m,) or (B, m), in the
    order to generate them. `infill` is the JSON of `aogpt sample --infill` (a string, '@FILE', or the
    parsed dict; see sampler/prompt.py)."""

    num_samples: int = 1
    length: int | None = None
    steps: int | None = None
    order: str | torch.Tensor = "random"
    schedule: str | None = None
    counts: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    prompt: str | None = None
    infill: str | dict | None = None
    speculative: int | str | None = None
    seed: int = 0
    backend: str = "auto"
    graphs: str = "auto"

    @classmethod
    def from_args(cls, args, renamed: dict[str, str] | None = None, **given) -> SampleRequest:
        """The request an argparse namespace holds: each field read off the flag of its name (or the one
        `renamed` maps it to: genppl's `--sample-order` for `order`), a field the command has no flag for
        at its default; `given` values replace what the flags say."""
        names = {f.name: (renamed or {}).get(f.name, f.name) for f in dataclasses.fields(cls)}
        read = {field: getattr(args, name) for field, name in names.items() if hasattr(args, name)}
        return cls(**(read | given))

    def plan(
        self,
        model_args: AOGPTModelArgs,
        encode: Callable[[str], list[int]] | None,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> SamplePlan:
        """The checked run for a model with `model_args` whose weights will be `dtype` on `device`;
        `encode` tokenizes prompt text (called only when there is some). Raises UserError naming the
        first bad value; reads no weights."""
        import torch

        from .choices import resolve_choices
        from .generation import SampleConfig
        from .sampling import SamplingParams
        from .speculative import check_sampling_flags

        draft = check_sampling_flags(self.speculative, self.steps, self.schedule, self.counts)
        length = model_args.max_seq_len if self.length is None else self.length
        prompt = self._prompt(encode)
        steps = self.steps if self.steps is not None else length - len(prompt)
        given = {"schedule": self.schedule, "counts": self.counts}  # left out: SampleConfig's defaults
        tensor_order = self.order if isinstance(self.order, torch.Tensor) else None
        config = SampleConfig(
            length=length,
            steps=steps,
            num_samples=self.num_samples,
            order="random" if tensor_order is not None else self.order,
            sampling=SamplingParams(self.temperature, self.top_p, self.top_k),
            seed=self.seed,
            backend=self.backend,
            graphs=self.graphs,
            **{k: v for k, v in given.items() if v is not None},
        )
        config.validate(model_args.max_seq_len, prompt, model_args.vocab_size, speculative=draft is not None)
        choices = resolve_choices(
            config.graphs, config.backend, config.linears, device, dtype, model_args.head_dim, draft is not None
        )
        if tensor_order is not None:  # checked here, before any weight is used
            from .prompt import fill_orders

            fill_orders(prompt.free_positions(length), config.num_samples, tensor_order)
        return SamplePlan(config, prompt, choices, draft, tensor_order)

    def _prompt(self, encode: Callable[[str], list[int]]) -> Prompt:
        """The given tokens of `prompt` (at position 0) and `infill`."""
        from .prompt import PromptBuilder, parse_infill

        builder = PromptBuilder()
        if self.prompt is not None:
            if not self.prompt:
                raise UserError("--prompt is empty; leave it out to sample unconditionally")
            builder.add(0, encode(self.prompt))
        if self.infill is not None:
            parse_infill(self.infill, encode, builder)
        return builder.build()


@dataclass
class SamplePlan:
    """A checked sampling run: the sampler's config, the given tokens, what the run runs with (resolved
    once), the speculative draft size (None: the parallel sampler) and a tensor fill order (None:
    config.order)."""

    config: SampleConfig
    prompt: Prompt
    choices: SamplerChoices
    draft: int | str | None = None
    order: torch.Tensor | None = None


@dataclass
class Samples:
    """What a run drew: `tokens` (B, n) in position order on the CPU, their `texts`, the sampler's
    result (orders, steps, forward passes, time) and, for a speculative run, its statistics."""

    tokens: torch.Tensor
    texts: list[str]
    result: GenerationResult
    speculative: dict = field(default_factory=dict)


def run_plan(model: AOGPT, plan: SamplePlan, decode: Callable[[list[int]], str], progress: bool = False) -> Samples:
    """Sample `plan` with `model` (its weights on the device and dtype it was planned for) and decode every
    row with `decode`."""
    from .choices import SPECULATIVE
    from .generation import generate, speculative_generate

    config, choices, speculative = plan.config, plan.choices, {}
    if choices.sampler == SPECULATIVE:
        result, stats = speculative_generate(
            model, config, plan.draft, plan.prompt, order=plan.order, progress=progress, choices=choices
        )
        generated = config.length - len(plan.prompt)  # per sample; a forward serves the whole batch
        speculative = {"speculative": plan.draft, **stats.as_dict(generated, result.forward_passes)}
    else:
        result = generate(model, config, plan.prompt, order=plan.order, progress=progress, choices=choices)
    texts = [decode(row) for row in result.tokens.tolist()]
    return Samples(result.tokens, texts, result, speculative)
