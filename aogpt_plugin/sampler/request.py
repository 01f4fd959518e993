"""One sampling run from its options: the path `aogpt sample` and the Python API (`aogpt_plugin.load(...)
.generate`) share, so the same options and seed give the same tokens from both.

    request = SampleRequest(num_samples=4, length=128, steps=32, top_p=0.95, seed=0)
    plan = request.plan(model.model_args, tokenizer.encode, device, dtype)   # every value checked, no weights
    samples = run_plan(model, plan, tokenizer.decode)          # tokens (B, n) and their texts

A batch's samples may each ask for something else: `prompt`, `infill`, `length`, `order` and `seed` take
one value for every sample or a list with one per sample (`from_requests` builds such a request from
request objects, a requests file's lines), and a sample's tokens depend on its own options and seed
only. The other options (steps, schedule, counts, temperature, top_p, top_k) are the batch's: requests
that differ in them never share a batch. `sample_batches` samples many requests (`aogpt sample
--requests`, the harnesses) in fixed-size batches, `sample_requests` all of them as one result in their
order (the API's `requests`); `check_requests` plans each one alone first, so a bad one is named before
any sampling.

`plan` checks every option against the model's args (positions, vocabulary), turns text spans into
token ids and decides, once, what the run runs with on `device` (choices.py: how each step runs, the
attention, the Linear kernel, the parallel or the speculative sampler), before any weight is read;
`run_plan` runs that sampler (`generate` or `speculative_generate`) with those choices. A new sampler
option is one field here: the commands read it off their flags (`from_args`), the API takes it as a
keyword. A bad value is one UserError that names the option as the caller spells it (`spell`: a flag
for the commands, the keyword for the API) and carries the option's name (`UserError.field`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import UserError, check_types, flag_name, is_int, is_number, keyword_name
from ..seeding import MAX_SEED, sample_seed
from .requests_file import PER_RUN, PER_SAMPLE, batches

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch

    from ..model import AOGPT, AOGPTModelArgs
    from .choices import SamplerChoices
    from .generation import GenerationResult, SampleConfig
    from .prompt import Prompt
    from .requests_file import RequestLine


def _is_tensor(value) -> bool:
    return type(value).__name__ == "Tensor" and type(value).__module__.startswith("torch")


def _one_or_list(check: Callable) -> Callable:
    """One value that passes `check`, or a list of them (one per sample; None: that sample's default)."""
    return lambda v: check(v) or (isinstance(v, list) and all(x is None or check(x) for x in v))


def _order_item(value) -> bool:
    return isinstance(value, str) or _is_tensor(value) or (isinstance(value, list) and all(is_int(x) for x in value))


# what each field takes from Python, and how an error says it
TYPES: dict[str, tuple[Callable, str]] = {
    "num_samples": (lambda v: v is None or is_int(v), "an integer"),
    "length": (lambda v: v is None or _one_or_list(is_int)(v), "an integer, or a list of integers (one per sample)"),
    "steps": (lambda v: v is None or is_int(v), "an integer"),
    "order": (
        lambda v: _order_item(v) or (isinstance(v, list) and all(x is None or _order_item(x) for x in v)),
        "random, l2r, a tensor of positions, or a list with one per sample",
    ),
    "schedule": (lambda v: v is None or isinstance(v, str), "a string"),
    "counts": (lambda v: v is None or isinstance(v, str), "a string"),
    "temperature": (is_number, "a number"),
    "top_p": (is_number, "a number"),
    "top_k": (lambda v: v is None or is_int(v), "an integer"),
    "prompt": (
        lambda v: v is None or _one_or_list(lambda x: isinstance(x, str))(v),
        "a string, or a list of strings (one per sample)",
    ),  # fmt: skip
    "infill": (
        lambda v: v is None or isinstance(v, (str, dict, list)),
        "a JSON string, '@FILE', a dict or list of spans, or a list with one per sample",
    ),
    "speculative": (lambda v: v is None or is_int(v) or isinstance(v, str), "a draft size (an integer) or auto"),
    "seed": (
        lambda v: is_int(v) or (isinstance(v, list) and all(is_int(x) for x in v)),
        "an integer, or a list of integers (one per sample)",
    ),  # fmt: skip
    "backend": (lambda v: isinstance(v, str), "a string"),
    "graphs": (lambda v: isinstance(v, str), "a string"),
    "decode_attention": (lambda v: isinstance(v, str), "a string"),
}


@contextlib.contextmanager
def about(name: str):
    """A UserError raised inside without a field is about option `name`."""
    try:
        yield
    except UserError as e:
        if e.field is None:
            e.field = name
        raise


@dataclass
class SampleRequest:
    """What a caller asks the sampler for; None means "not given" (the default applies).

    num_samples None: one per item of the per-sample lists (else 1). length None: all the model's
    positions; steps None: one step per generated token (of each sample); schedule and counts None:
    SampleConfig's defaults (and `speculative` refuses them when given). `order` is `random`, `l2r`, or
    (Python only) a tensor of the positions to generate, (m,) or (B, m), in the order to generate them.
    `infill` is the JSON of `aogpt sample --infill` (a string, '@FILE', the parsed dict, or its list of
    spans; see sampler/prompt.py). `seed`: sample i's is seeding.sample_seed(seed, i) (sample 0's is seed
    itself), or one per sample in a list.
    PER_SAMPLE fields take one value or a list with one per sample (None items: that sample's default)."""

    num_samples: int | None = None
    length: int | list | None = None
    steps: int | None = None
    order: str | torch.Tensor | list = "random"
    schedule: str | None = None
    counts: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    prompt: str | list | None = None
    infill: str | dict | list | None = None
    speculative: int | str | None = None
    seed: int | list = 0
    backend: str = "auto"
    graphs: str = "auto"
    decode_attention: str = "auto"

    @classmethod
    def from_args(cls, args, renamed: dict[str, str] | None = None, **given) -> SampleRequest:
        """The request an argparse namespace holds: each field read off the flag of its name (or the one
        `renamed` maps it to: genppl's `--sample-order` for `order`), a field the command has no flag for
        at its default; `given` values replace what the flags say."""
        names = {f.name: (renamed or {}).get(f.name, f.name) for f in dataclasses.fields(cls)}
        read = {field: getattr(args, name) for field, name in names.items() if hasattr(args, name)}
        return cls(**(read | given))

    @classmethod
    def for_requests(cls, spell: Callable[[str], str] = keyword_name, **given) -> SampleRequest:
        """The options that requests leave out (`given`), checked: each of a type it takes, and none that the
        requests give one each (a per-sample keyword as a list, or a prompt, infill or num_samples for every
        sample)."""
        request = cls(**given)
        request._check_types(spell)
        if is_int(request.seed) and not 0 <= request.seed <= MAX_SEED:  # the requests' own: checked with each
            raise UserError(f"{spell('seed')} {request.seed} is outside the allowed range 0..2**64-1", "seed")
        for name in ("prompt", "infill", "num_samples"):
            if given.get(name) is not None:
                raise UserError(
                    f"{spell(name)} is given for every sample and the requests give one each; drop it", name
                )
        for name in PER_SAMPLE:
            if request._listed(name) is not None:
                raise UserError(
                    f"{spell(name)} is a list (one per sample) and the requests give each sample its own; give one "
                    "value for the requests that leave it out, or put each in its request",
                    name,
                )
        return request

    @classmethod
    def from_requests(cls, items: list[dict], **given) -> SampleRequest:
        """One batch from request objects that share their run options (a group of `requests_file.batches`):
        each per-sample field a list with one value per item, each run option the one value the items share.
        `given` fills what the items leave out (`for_requests`; a seed s gives item i without its own seed
        sample i of s's)."""
        request = cls.for_requests(**given)
        for item in items:
            unknown = sorted(set(item) - set(PER_SAMPLE) - set(PER_RUN))
            if unknown:
                raise UserError(
                    f"a request has no field {unknown[0]!r}; allowed: {', '.join(PER_SAMPLE + PER_RUN)}", unknown[0]
                )
        if len({tuple(item.get(k) for k in PER_RUN) for item in items}) > 1:
            raise ValueError("from_requests takes requests that share their run options (requests_file.batches)")
        base_seed = request.seed
        for name in PER_RUN:
            if items[0].get(name) is not None:
                setattr(request, name, items[0][name])
        for name in PER_SAMPLE:
            default = getattr(request, name)
            values = [item.get(name) for item in items]
            if name == "seed":
                values = [sample_seed(base_seed, i) if v is None else v for i, v in enumerate(values)]
            elif default is not None:
                values = [default if v is None else v for v in values]
            if any(v is not None for v in values):
                setattr(request, name, values)
        request.num_samples = len(items)
        return request

    def plan(
        self,
        model_args: AOGPTModelArgs,
        encode: Callable[[str], list[int]] | None,
        device: torch.device | str,
        dtype: torch.dtype,
        spell: Callable[[str], str] = flag_name,
    ) -> SamplePlan:
        """The checked run for a model with `model_args` whose weights will be `dtype` on `device`;
        `encode` tokenizes prompt text (called only when there is some); `spell` names an option in
        messages as the caller writes it. Raises UserError naming the first bad value; reads no weights."""
        import torch

        from .choices import resolve_choices
        from .generation import SampleConfig, check_length
        from .prompt import order_specs, sample_orders, sample_prompts
        from .sampling import SamplingParams
        from .speculative import check_sampling_flags

        self._check_types(spell)
        draft = check_sampling_flags(self.speculative, self.steps, self.schedule, self.counts, spell=spell)
        batch = self._batch_size(spell)
        # one length and one prompt for every sample unless a list gives one per sample (made once, not B times)
        ragged = any(self._listed(name) is not None for name in ("prompt", "infill", "length"))
        rows = range(batch if ragged else 1)
        lengths = tuple(model_args.max_seq_len if n is None else n for n in (self._item("length", b) for b in rows))
        for n_b in lengths:
            check_length(n_b, model_args.max_seq_len)
        prompts = tuple(self._prompt(b, batch, lengths[b], encode, model_args.vocab_size, spell) for b in rows)
        seeds = tuple(self._per_sample("seed", batch)) if isinstance(self.seed, list) else None
        orders = self.order if isinstance(self.order, (str, torch.Tensor)) else self._per_sample("order", batch)
        named = orders if isinstance(orders, str) else "random"
        if isinstance(orders, list):
            orders = [named if o is None else o for o in orders]
        given = {"schedule": self.schedule, "counts": self.counts}  # left out: SampleConfig's defaults
        config = SampleConfig(
            length=max(lengths),
            steps=self.steps,
            num_samples=batch,
            order=named,
            sampling=SamplingParams(self.temperature, self.top_p, self.top_k),
            seed=self.seed if seeds is None else seeds[0],
            backend=self.backend,
            graphs=self.graphs,
            decode_attention=self.decode_attention,
            lengths=lengths if ragged and len(set(lengths)) > 1 else None,
            seeds=seeds,
            **{k: v for k, v in given.items() if v is not None},
        )
        prompts = prompts if ragged else prompts[0]
        config.validate(model_args.max_seq_len, prompts, model_args.vocab_size, speculative=draft is not None)
        choices = resolve_choices(
            config.graphs, config.backend, config.linears, device, dtype, model_args.head_dim, config.decode_attention,
        )  # fmt: skip
        order = None if isinstance(orders, str) else orders
        if order is not None:  # checked here, before any weight is used
            with about("order"):
                sample_orders(
                    config.length, config.sample_lengths(), sample_prompts(prompts, batch), order_specs(order, batch)
                )
        return SamplePlan(config, prompts, choices, draft, order)

    def _check_types(self, spell: Callable[[str], str]) -> None:
        """Each option's type, before its value is looked at: `length='8'` is refused here, naming what it takes."""
        check_types({name: getattr(self, name) for name in TYPES}, TYPES, spell)

    def _batch_size(self, spell: Callable[[str], str]) -> int:
        """num_samples, or the length of the per-sample lists (which must agree)."""
        sizes = {name: len(v) for name in PER_SAMPLE if isinstance(v := self._listed(name), list)}
        for name, size in sizes.items():
            if size == 0:
                raise UserError(
                    f"{spell(name)} is an empty list; allowed: one value for every sample, or a list with one per sample",
                    name,
                )
        if self.num_samples is not None and self.num_samples < 1:
            raise UserError(f"num_samples={self.num_samples} must be >= 1", "num_samples")
        first = next(iter(sizes), None)
        expected = self.num_samples if self.num_samples is not None else sizes.get(first, 1)
        for name, size in sizes.items():
            if size != expected:
                what = (
                    f"for {spell('num_samples')} {expected}"
                    if self.num_samples is not None
                    else f"and {spell(first)} has {expected}"
                )
                raise UserError(f"{spell(name)} has {size} items {what}; allowed: one value, or one per sample", name)
        return expected

    def _listed(self, name: str):
        """The field's per-sample list, or None when it holds one value (an infill's own list of spans is one)."""
        from .prompt import is_span_list

        value = getattr(self, name)
        if not isinstance(value, list) or (name == "infill" and is_span_list(value)):
            return None
        if name == "order" and value and all(is_int(x) for x in value):
            return None  # one order, given as a list of positions
        return value

    def _per_sample(self, name: str, batch: int) -> list:
        return [self._item(name, b) for b in range(batch)]

    def _item(self, name: str, b: int):
        """Sample b's value of per-sample field `name`."""
        listed = self._listed(name)
        return listed[b] if listed is not None else getattr(self, name)

    def _prompt(self, b: int, batch: int, length: int, encode, vocab_size: int, spell: Callable[[str], str]) -> Prompt:
        """Sample b of `batch`'s given tokens: its `prompt` (at position 0) and `infill` spans, checked against
        its length."""
        from .prompt import PromptBuilder, parse_infill

        builder = PromptBuilder()
        prompt, infill = self._item("prompt", b), self._item("infill", b)
        of = f" (sample {b})" if batch > 1 and any(self._listed(n) is not None for n in ("prompt", "infill")) else ""
        with about("prompt"):
            if prompt is not None:
                if not prompt:
                    raise UserError(f"{spell('prompt')} is empty{of}; leave it out to sample unconditionally")
                tokens = encode(prompt)
                if len(tokens) >= length:
                    raise UserError(
                        f"{spell('prompt')} has {len(tokens)} tokens{of}, and length={length} leaves no position "
                        f"to generate; allowed: a prompt of at most {length - 1} tokens, or a longer length"
                    )
                builder.add(0, tokens)
        with about("infill"):
            if infill is not None:
                parse_infill(infill, encode, builder, spell)
        given = builder.build()
        with about("infill" if infill is not None else "prompt"):
            if infill is not None and given.positions and given.positions[-1] >= length:
                raise UserError(
                    f"{spell('infill')} gives {len(given)} token{'s' * (len(given) > 1)}{of}, up to position {given.positions[-1]}, and "
                    f"length={length} ends at {length - 1}; allowed: spans within 0..{length - 1}, or a longer length"
                )
            given.validate(length, vocab_size, of)
        return given


@dataclass
class SamplePlan:
    """A checked sampling run: the sampler's config, the given tokens (one Prompt for every sample, or a
    tuple with one per sample), what the run runs with (resolved once), the speculative draft size (None:
    the parallel sampler) and the fill orders when not a name (a tensor, or one per sample; None:
    config.order)."""

    config: SampleConfig
    prompts: Prompt | tuple[Prompt, ...]
    choices: SamplerChoices
    draft: int | str | None = None
    order: torch.Tensor | list | None = None

    @property
    def speculative(self) -> bool:
        """Whether the run is speculative sampling (its draft size set) rather than the parallel sampler."""
        return self.draft is not None

    def prompt_of(self, b: int) -> Prompt:
        """Sample b's given tokens."""
        return self.prompts[b] if isinstance(self.prompts, tuple) else self.prompts

    def fewest_given(self) -> int:
        """The fewest tokens a sample of the batch is given (the memory estimate's worst case)."""
        return min(len(p) for p in self.prompts) if isinstance(self.prompts, tuple) else len(self.prompts)

    def fewest_to_fill(self) -> int:
        """The fewest tokens a sample of the batch generates (its length less its given tokens), without a loop
        over the samples when they share one length and one prompt (a batch too large to run is still refused
        at once)."""
        if self.config.lengths is None and not isinstance(self.prompts, tuple):
            return self.config.length - len(self.prompts)
        return min(n - len(self.prompt_of(b)) for b, n in enumerate(self.config.sample_lengths()))


@dataclass
class Samples:
    """What a run drew: `tokens` (B, n) in position order on the CPU (-1 past a sample's length when the
    samples' lengths differ), their `texts`, the sampler's result (orders, steps, forward passes, time)
    and, for a speculative run, its statistics."""

    tokens: torch.Tensor
    texts: list[str]
    result: GenerationResult
    speculative: dict = field(default_factory=dict)


def run_plan(model: AOGPT, plan: SamplePlan, decode: Callable[[list[int]], str], progress: bool = False) -> Samples:
    """Sample `plan` with `model` (its weights on the device and dtype it was planned for) and decode every
    row (its own length) with `decode`."""
    from .generation import generate, speculative_generate

    config, choices, speculative = plan.config, plan.choices, {}
    if plan.speculative:
        result, stats = speculative_generate(
            model, config, plan.draft, plan.prompts, order=plan.order, progress=progress, choices=choices
        )
        generated = result.generated_tokens / config.num_samples  # per sample; a forward serves the whole batch
        speculative = {"speculative": plan.draft, **stats.as_dict(generated, result.forward_passes)}
    else:
        result = generate(model, config, plan.prompts, order=plan.order, progress=progress, choices=choices)
    texts = [decode(result.sample_tokens(b)) for b in range(config.num_samples)]
    return Samples(result.tokens, texts, result, speculative)


def check_requests(
    requests: list[RequestLine], base: SampleRequest, plan: Callable[..., SamplePlan], path: str
) -> None:
    """Every request planned alone against the model (no weights): the first bad one is one UserError naming
    `path`, its line and the field (spelled as the request spells it), before any sampling. `base`: the
    options the requests leave out; `plan(request, spell)`: its checked plan."""
    for request in requests:
        try:
            plan(SampleRequest.from_requests([request.seeded(base.seed)], **_options(base)), keyword_name)
        except UserError as e:
            raise UserError(f"{request.where(path, e.field)}: {e}", e.field) from None


TOKEN_OPTIONS = (
    "seed",
    "length",
    "order",
    "steps",
    "schedule",
    "counts",
    "temperature",
    "top_p",
    "top_k",
    "speculative",
)


def token_options(request: RequestLine, base: SampleRequest, max_positions: int) -> dict:
    """The options that shape `request`'s tokens, as it is sampled: its own fields, else `base`'s (its seed
    derived from base's), the length resolved (prompt and infill are the request's own fields)."""
    seeded = request.seeded(base.seed)
    options = {name: seeded.get(name, getattr(base, name)) for name in TOKEN_OPTIONS}
    options["length"] = options["length"] or max_positions
    return options


def _options(request: SampleRequest) -> dict:
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}


def sample_batches(
    model: AOGPT,
    requests: list[RequestLine],
    base: SampleRequest,
    plan: Callable[[SampleRequest], SamplePlan],
    decode: Callable[[list[int]], str],
    size: int,
) -> Iterator[tuple[list[RequestLine], Samples]]:
    """The requests sampled `size` at a time, each batch requests that share their run options (`batches`):
    yields each batch's requests and its Samples, row b of which is the batch's request b. `base`: the
    options the requests leave out (checked first: `check_requests`); `plan`: a request's checked plan.
    Where the plan runs the static step, a short batch is padded to `size` with copies of its first request
    (their results dropped), so the step keeps one batch shape (its buffers, its graphs)."""

    def planned(rows: list[RequestLine]) -> SamplePlan:
        return plan(SampleRequest.from_requests([r.seeded(base.seed) for r in rows], **_options(base)))

    for group in batches(requests, size):
        batch = planned(group)
        if batch.choices.static_step and len(group) < size:
            batch = planned(group + [group[0]] * (size - len(group)))
        yield group, run_plan(model, batch, decode)


def sample_in_slots(
    engine,
    requests: list[RequestLine],
    base: SampleRequest,
    plan: Callable[[SampleRequest], SamplePlan],
    path: str = "requests",
) -> Iterator[tuple]:
    """The requests sampled by the continuous-batching `engine` (an engine.Engine), each planned alone (its own
    options; its seed its own or sample `index` of base's), as many queued as the engine has slots: yields each
    request and its sample (an engine.SampleOutput) as it finishes (not in input order), its tokens those of the
    request sampled alone.
    A request whose step fails is one UserError naming it (`path`: where the requests came from)."""
    from collections import deque

    finished: deque = deque()

    class Collect:
        def drawn(self, job, sample, pairs):
            pass

        def finished(self, job, sample, output):
            finished.append((job.request, output))

        def failed(self, job, message):
            raise UserError(f"{job.request.where(path)}: {message}")

    listener, todo = Collect(), iter(requests)
    more = True
    while more or not engine.idle():
        while more and engine.queued < engine.slots:
            request = next(todo, None)
            if request is None:
                more = False
                break
            one = SampleRequest.from_requests([request.seeded(base.seed)], **_options(base))
            engine.submit(plan(one), listener).request = request
        engine.step()
        while finished:
            yield finished.popleft()


def sample_requests(
    model: AOGPT,
    requests: list[RequestLine],
    base: SampleRequest,
    plan: Callable[[SampleRequest], SamplePlan],
    decode: Callable[[list[int]], str],
) -> Samples:
    """Every request sampled with its own options (those sharing their run options in one batch), as one
    Samples in the requests' order: row i is request i, its tokens those of the request sampled alone."""
    import torch

    from .generation import GenerationResult

    parts = list(sample_batches(model, requests, base, plan, decode, len(requests)))
    if len(parts) == 1:
        return parts[0][1]
    n = max(samples.tokens.shape[1] for _, samples in parts)
    where = {request.index: (p, b) for p, (group, _) in enumerate(parts) for b, request in enumerate(group)}
    rows = [where[i] for i in range(len(requests))]

    def merged(get, pad) -> torch.Tensor:
        out = []
        for p, b in rows:
            row = get(parts[p][1].result)[b]
            out.append(torch.cat([row, pad(row.shape[0])]) if row.dim() else row)
        return torch.stack(out)

    results = [samples.result for _, samples in parts]
    tokens = merged(lambda r: r.tokens, lambda m: torch.full((n - m,), -1, dtype=torch.long))
    result = GenerationResult(
        tokens=tokens,
        orders=merged(lambda r: r.orders, lambda m: torch.arange(m, n)),
        given=merged(lambda r: r.given, None),
        lengths=merged(lambda r: r.lengths, None),
        steps=max(r.steps for r in results),
        forward_passes=sum(r.forward_passes for r in results),
        seconds=sum(r.seconds for r in results),
        compile_seconds=sum(r.compile_seconds for r in results),
    )
    texts = [parts[p][1].texts[b] for p, b in rows]
    speculative = {}
    if parts[0][1].speculative:  # exact totals over the batches, from each one's counts
        stats = [samples.speculative for _, samples in parts]
        sample_forwards = sum(r.forward_passes * r.tokens.shape[0] for r in results)
        checked, accepted = (sum(st[key] for st in stats) for key in ("drafts_checked", "drafts_accepted"))
        speculative = {
            "speculative": stats[0]["speculative"],
            "tokens_per_forward": round(result.generated_tokens / max(sample_forwards, 1), 4),
            "draft_acceptance_rate": round((accepted + 1) / (checked + 2), 4),
            "drafts_checked": checked,
            "drafts_accepted": accepted,
            "draft_sizes": sorted({k for st in stats for k in st["draft_sizes"]}),
        }
    return Samples(tokens, texts, result, speculative)
