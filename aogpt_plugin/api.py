"""The Python API: `aogpt_plugin.load(path)` gives a model to sample from, score, and differentiate.

    import aogpt_plugin

    lm = aogpt_plugin.load("outputs/aogpt_debug_model")   # model folder, `aogpt export` folder or DCP checkpoint
    out = lm.generate(num_samples=4, length=64, steps=16, seed=0)   # = `aogpt sample ... --seed 0`
    logp = lm.logprob(out.tokens, order="random", seed=0)   # (4,) exact log p(x | sigma), one forward
    (-logp.mean()).backward()                               # gradients reach lm.module's weights
    report = lm.score(texts, order="random", orders=4)      # = `aogpt eval ppl`: report.nll, report.ppl

Each method runs the code its command runs: `generate` the sampler's request path (sampler/request.py,
which `aogpt sample` takes), `logprob` likelihood.py (the NLL training, validation and evaluation share),
`score` eval/perplexity.py's report (what `aogpt eval ppl` prints). Bad input raises `InputError` (a
ValueError; errors.py) naming the value and what is allowed, before any forward pass; a value of the wrong
type names the keyword, the type given and the types allowed (`length '8' is a str; allowed: an integer`).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import torch

from .errors import InputError, UserError, check_types, is_int, keyword_name
from .seeding import MAX_SEED

if TYPE_CHECKING:
    from .eval.perplexity import PerplexityReport
    from .model import AOGPT, AOGPTModelArgs
    from .model_dir import ModelDirConfig
    from .sampler.request import Samples


@contextlib.contextmanager
def input_errors():
    """A UserError raised inside (by the checks the commands share) leaves as an InputError: one
    exception type, a ValueError, with the same one-line message."""
    try:
        yield
    except InputError:
        raise
    except UserError as e:
        raise InputError(str(e)) from None


def _integers(value, name: str, expected: str, held: str) -> torch.Tensor:
    """`value` (a tensor or nested lists) as an integer tensor, or one InputError naming `name`."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.tensor(value)
        except (TypeError, ValueError, RuntimeError) as e:
            raise InputError(f"{name} must be {expected} ({e})") from None
    if value.numel() == 0:
        raise InputError(f"{name} is empty (shape {tuple(value.shape)}); allowed: {expected}, at least one token")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise InputError(f"{name} must hold {held}; got dtype {value.dtype}")
    return value


def _device_and_dtype(device: str | torch.device | None, dtype: str | torch.dtype | None):
    from .devices import resolve_device, resolve_dtype

    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    return resolve_device(None if device is None else str(device)), resolve_dtype(dtype or "float32")


def _optional(check):
    return lambda v: v is None or check(v)


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _is_str(value) -> bool:
    return isinstance(value, str)


# what each keyword of the API takes from Python, checked before its value is (errors.check_types)
LOAD_TYPES = {
    "path": (lambda v: isinstance(v, (str, os.PathLike)), "a path (a str or os.PathLike)"),
    "device": (lambda v: v is None or isinstance(v, (str, torch.device)), "None, a device name or a torch.device"),
    "dtype": (lambda v: v is None or isinstance(v, (str, torch.dtype)), "None, a dtype name or a torch.dtype"),
    "weights": (_optional(_is_str), "None, ema or raw"),
    "step": (_optional(is_int), "None or an integer"),
    "tokenizer": (_optional(_is_str), "None or a tokenizer name"),
    "verify": (_is_bool, "True or False"),
}
LOGPROB_TYPES = {
    "tokens": (lambda v: isinstance(v, (torch.Tensor, list, tuple)), "token ids: a (B, n) or (n,) tensor or list"),
    "order": (
        lambda v: v is None or isinstance(v, (str, torch.Tensor, list, tuple)),
        "None, random, l2r, or permutations as a tensor or list",
    ),
    "seed": (is_int, "an integer"),
    "per_token": (_is_bool, "True or False"),
}
SEED_RANGE = {"seed": (lambda v: 0 <= v <= MAX_SEED, "an integer in 0..2**64-1 (seeds are 64-bit)")}
SCORE_TYPES = {
    "texts_or_tokens": (
        lambda v: isinstance(v, (str, list, tuple, torch.Tensor)),
        "a string, a list of strings, or token chunks (C, n) as a tensor or list of lists",
    ),
    "order": (_is_str, "random or l2r"),
    "orders": (is_int, "an integer"),
    "ensemble": (is_int, "an integer"),
    "seq_len": (_optional(is_int), "None or an integer"),
    "max_chunks": (_optional(is_int), "None or an integer"),
    "seed": (is_int, "an integer"),
    "batch_size": (is_int, "an integer"),
    "progress": (_is_bool, "True or False"),
}
GENERATE_TYPES = {  # the sampler's own options are SampleRequest's (sampler/request.py: TYPES)
    "requests": (lambda v: v is None or isinstance(v, list), "None, or a list of dicts (one per sample)"),
    "progress": (_is_bool, "True or False"),
}


@input_errors()
def load(
    path: str | os.PathLike,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    *,
    weights: str | None = None,
    step: int | None = None,
    tokenizer: str | None = None,
    verify: bool = True,
) -> LoadedModel:
    """The model at `path`: a model folder (`aogpt convert`), an exported Hugging Face folder (`aogpt
    export`; also a model folder), or a torchtitan DCP checkpoint folder (a run's `checkpoint/` folder,
    whose newest complete step is read, or one `step-N` folder), read as `aogpt convert` reads it,
    in memory (nothing is written).

    device: "auto" / None (cuda if available, else cpu), "cpu", "cuda", "cuda:N" or a torch.device.
    dtype: float32 (None), bfloat16 or float16, as a name or a torch.dtype.
    weights, step, tokenizer: for a checkpoint only, as `aogpt convert --weights/--step/--tokenizer`:
    "ema" (the default) or "raw" weights, which step-N folder, and (for checkpoints older than their
    aogpt.json record) the tokenizer the run trained with.
    verify: check a model folder's model.safetensors against the sha256 in its config.json.

    The module is in eval mode with gradients enabled on its parameters (so `logprob` can be
    differentiated); `generate` and `score` run without building a graph."""
    from .model_dir import MODEL_FOLDER, load_model_dir, model_from_state, source_kind

    check_types(
        dict(path=path, device=device, dtype=dtype, weights=weights, step=step, tokenizer=tokenizer, verify=verify),
        LOAD_TYPES,
    )
    path = os.fspath(path)
    kind = source_kind(path)
    if kind == MODEL_FOLDER:
        given = [k for k, v in (("weights", weights), ("step", step), ("tokenizer", tokenizer)) if v is not None]
        if given:
            raise InputError(
                f"{given[0]} applies to a checkpoint folder; {path!r} is a model folder, which holds one set of weights"
            )
    device, dtype = _device_and_dtype(device, dtype)
    if kind == MODEL_FOLDER:
        loaded = load_model_dir(path, device=device, dtype=dtype, verify=verify)
        module, config, tokenizer_dir = loaded.model, loaded.config, os.path.abspath(path)
    else:
        from .convert import read_checkpoint

        state, config = read_checkpoint(path, weights or "ema", step, tokenizer)
        module = model_from_state(
            state, config.model_args, device, dtype, f"checkpoint {config.source!r}", "its model args"
        )
        tokenizer_dir = os.getcwd()  # a tokenizer.json of the record is named relative to here
    module.requires_grad_(True)
    return LoadedModel(module, config, path, kind, tokenizer_dir)


class LoadedModel:
    """A loaded AO-GPT: `.module` (the torch module: fine-tune or inspect it), `.tokenizer`, `.config`
    (the model folder's config.json, typed), and the methods below. Slot j of the module scores the
    token at position order[j] from the tokens at order[:j]; slot 0 reads the [None] start."""

    def __init__(self, module: AOGPT, config: ModelDirConfig, source: str, kind: str, tokenizer_dir: str):
        self.module = module
        self.config = config
        self.source = source  # the path given to `load`
        self.kind = kind  # model_dir.MODEL_FOLDER or CHECKPOINT
        self._tokenizer_dir = tokenizer_dir
        self._tokenizer = None

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Free what `generate` keeps between calls for this model: the decode view and its static step (a
        KV cache over every position, and on a GPU its CUDA graphs), which can be most of the memory a model
        uses after it samples. The model stays usable; the next `generate` builds them again. `with
        aogpt_plugin.load(path) as lm:` closes it at the end of the block."""
        from .sampler.decoder import release_decode_state

        release_decode_state(self.module)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def __repr__(self) -> str:
        a = self.model_args
        return (
            f"LoadedModel({self.source!r}, {self.kind}, step {self.config.step}, {self.config.weights} weights, "
            f"{a.n_layers}L/{a.dim}d, {a.max_seq_len} positions, vocabulary {a.vocab_size}, {self.dtype} on {self.device})"
        )

    @property
    def model_args(self) -> AOGPTModelArgs:
        return self.module.model_args

    @property
    def device(self) -> torch.device:
        return self.module.tok_embeddings.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.module.tok_embeddings.weight.dtype

    @property
    def tokenizer(self):
        """The tokenizer the model was trained with (data/tokenizer.py): encode(text) -> ids, decode(ids)."""
        if self._tokenizer is None:
            with input_errors():
                self._tokenizer = self.config.build_tokenizer(self._tokenizer_dir, check_vocab=False)
        return self._tokenizer

    # ---- sampling ------------------------------------------------------------------------------
    def generate(
        self,
        *,
        num_samples: int | None = None,
        length: int | list[int] | None = None,
        steps: int | None = None,
        order: str | torch.Tensor | list = "random",
        schedule: str | None = None,
        counts: str | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        prompt: str | list[str | None] | None = None,
        infill: str | dict | list | None = None,
        speculative: int | str | None = None,
        seed: int | list[int] = 0,
        backend: str = "auto",
        graphs: str = "auto",
        decode_attention: str = "auto",
        requests: list[dict] | None = None,
        progress: bool = False,
    ) -> Samples:
        """Draw `num_samples` sequences of `length` tokens (default: all positions); every option is
        `aogpt sample`'s flag of the same name, and the same options and seed give the same tokens.

        steps: parallel denoising steps (default one per token); schedule "linear" | "cosine"; counts
        "deterministic" | "binomial"; order "random" | "l2r" | a tensor of the positions to generate,
        (m,) or (num_samples, m), in the order to generate them; temperature > 0, top_p in (0, 1],
        top_k >= 1; prompt: text at position 0; infill: given spans, {"spans": [{"start": 40, "text":
        "..."}, {"start": 90, "tokens": [464]}]} (or that list, or its JSON, or "@FILE"); speculative:
        a draft size 1..16 or "auto" (exact T = N samples in fewer forwards; excludes steps, schedule
        and counts); seed: 0..2**64-1, sample i's seed is a mix of seed and i (sample 0's is seed itself:
        its order, counts and noise), so calls with different seeds share no sample; backend "auto" | "sdpa"
        | "flex"; graphs "auto" | "on" | "off" | "compile" | "static": how each step runs
        (sampler/choices.py; auto: the static step replayed from CUDA graphs on a GPU, the dynamic
        sampler on a CPU; same samples); decode_attention "auto" | a setting such as "partial,split=4"
        (the static step's FlexAttention layout and kernel options, with backend flex; same samples).

        Each sample may ask for its own: prompt, infill, length, order and seed also take a list with one
        value per sample (num_samples then defaults to its length), or `requests` gives one dict per
        sample with the fields of an `aogpt sample --requests` line ({"prompt" | "infill", "seed",
        "length", "order", and run options all of them share}); the keywords fill what they leave out.
        Each request is sampled with its own options: requests that differ in a run option (steps,
        temperature, ...) run in batches of their own. A sample's tokens depend on its own options and seed
        only, never on the batch it ran in or what else was asked for in the same call.

        Returns Samples: `.tokens` (num_samples, length) on the CPU (-1 past a sample's own length),
        `.texts`, `.result` (orders, forward passes, seconds) and, when speculative, `.speculative` (its
        statistics)."""
        from .sampler.request import SampleRequest, check_requests, run_plan, sample_requests
        from .sampler.requests_file import request_lines

        options = dict(
            num_samples=num_samples,
            length=length,
            steps=steps,
            order=order,
            schedule=schedule,
            counts=counts,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            prompt=prompt,
            infill=infill,
            speculative=speculative,
            seed=seed,
            backend=backend,
            graphs=graphs,
            decode_attention=decode_attention,
        )

        def plan(request, spell=keyword_name):
            return request.plan(
                self.model_args, lambda text: self.tokenizer.encode(text), self.device, self.dtype, spell
            )

        with input_errors():  # every option is checked before the first forward
            check_types(dict(requests=requests, progress=progress), GENERATE_TYPES)
            if requests is None:
                samples = run_plan(
                    self.module, plan(SampleRequest(**options)), self.tokenizer.decode, progress=progress
                )
            else:
                lines = request_lines(requests)
                base = SampleRequest.for_requests(**options)
                check_requests(lines, base, plan, "requests")
                samples = sample_requests(self.module, lines, base, plan, self.tokenizer.decode)
        # the sampler runs in inference mode; normal tensors can be fed back to logprob and autograd
        samples.tokens = samples.result.tokens = samples.tokens.clone()
        samples.result.orders = samples.result.orders.clone()
        return samples

    # ---- exact likelihoods -----------------------------------------------------------------------
    def logprob(
        self,
        tokens: torch.Tensor | list,
        order: str | torch.Tensor | list | None = None,
        *,
        seed: int = 0,
        per_token: bool = False,
    ) -> torch.Tensor:
        """Exact log p(x | order) of each sequence, in nats, from one forward pass: (B,) for tokens
        (B, n), a scalar for one sequence (n,). Differentiable: gradients reach `.module`'s weights
        (run it under torch.no_grad() to build no graph).

        order: None or "l2r" (left to right), "random" (row b reads the permutation `aogpt eval ppl
        --order random --seed SEED` draws for chunk b, its first order), or permutations of 0..n-1 as a
        tensor (B, n), or (n,) for every row. per_token: return log p of every token given the tokens
        before it in the order, (B, n) in position order (its sum over the last axis is the total)."""
        from .likelihood import token_nlls

        with input_errors():
            check_types(dict(tokens=tokens, order=order, seed=seed, per_token=per_token), LOGPROB_TYPES)
            check_types(dict(seed=seed), SEED_RANGE)
            batch, one = self._checked_tokens(tokens, "tokens")
            sigma = self._checked_order(order, batch.shape, seed)
        batch = batch.to(self.device)
        sigma = None if sigma is None else sigma.to(self.device)
        logp = -token_nlls(self.module, batch, sigma)  # slot j scores the token at sigma[:, j]
        if per_token:
            if sigma is not None:
                logp = torch.zeros_like(logp).scatter(1, sigma, logp)  # back to position order
            return logp[0] if one else logp
        total = logp.sum(dim=-1)
        return total[0] if one else total

    def _checked_tokens(self, tokens, name: str) -> tuple[torch.Tensor, bool]:
        """(B, n) int64 ids (on the device they came on) checked against the vocabulary and positions,
        and whether one sequence (n,) was given."""
        a = self.model_args
        tokens = _integers(tokens, name, "token ids, a (B, n) tensor or list of lists", "integer token ids")
        one = tokens.dim() == 1
        if one:
            tokens = tokens.unsqueeze(0)
        if tokens.dim() != 2 or tokens.shape[0] < 1:
            raise InputError(f"{name} has shape {tuple(tokens.shape)}; allowed: (n,) or (B, n) with B >= 1")
        n = tokens.shape[1]
        if not 1 <= n <= a.max_seq_len:
            raise InputError(
                f"{name} have length {n}, outside the model's positions; allowed: 1..{a.max_seq_len} tokens per sequence"
            )
        tokens = tokens.detach().long()
        if tokens.is_inference():  # made under torch.inference_mode(): autograd cannot save it
            tokens = tokens.clone()
        bad = ((tokens < 0) | (tokens >= a.vocab_size)).nonzero()
        if bad.numel():
            row, pos = (int(i) for i in bad[0])
            raise InputError(
                f"token id {int(tokens[row, pos])} ({name} row {row}, position {pos}) is outside the vocabulary; "
                f"allowed: 0..{a.vocab_size - 1}"
            )
        return tokens, one

    def _checked_order(self, order, shape: torch.Size, seed: int) -> torch.Tensor | None:
        """(B, n) int64 permutations, or None for left to right."""
        from .eval.perplexity import base_order
        from .orders import L2R, RANDOM, READ_ORDERS

        batch, n = shape
        if order is None or (isinstance(order, str) and order == L2R):
            return None
        if isinstance(order, str):
            if order != RANDOM:
                raise InputError(
                    f"order {order!r} is not supported; allowed: None, {', '.join(READ_ORDERS)}, or a (B, n) tensor of permutations"
                )
            return torch.stack([base_order(RANDOM, n, seed, row, 0) for row in range(batch)])
        order = _integers(order, "order", "a name or a (B, n) tensor of permutations", "integer positions")
        if tuple(order.shape) not in ((batch, n), (n,)):
            raise InputError(f"order has shape {tuple(order.shape)}; allowed: ({batch}, {n}) or ({n},), as the tokens")
        order = order.detach().long().expand(batch, n)
        wrong = (order.sort(dim=1).values != torch.arange(n, device=order.device)).any(dim=1).nonzero()
        if wrong.numel():
            row = int(wrong[0])
            shown = order[row, :12].tolist()
            raise InputError(
                f"order row {row} is not a permutation of 0..{n - 1} (each position exactly once): "
                f"{shown}{' ...' if n > 12 else ''}"
            )
        return order.clone()  # a tensor of its own (also when the caller's came from inference mode)

    # ---- perplexity as `aogpt eval ppl` reports it ------------------------------------------------
    def score(
        self,
        texts_or_tokens: str | list[str] | torch.Tensor | list[list[int]],
        *,
        order: str = "random",
        orders: int = 1,
        ensemble: int = 1,
        seq_len: int | None = None,
        max_chunks: int | None = None,
        seed: int = 0,
        batch_size: int = 8,
        progress: bool = False,
    ) -> PerplexityReport:
        """The NLL and perplexity `aogpt eval ppl` reports for the same chunks, options and seed.

        texts_or_tokens: documents (a string or a list), packed as `aogpt eval ppl --dataset FILE` packs
        a file's documents (the tokenizer's ids, EOS after each, cut into chunks of `seq_len` tokens,
        default min(1024, the model's positions), the final partial chunk dropped), or chunks of token
        ids (C, n) scored as they are. order "random" (K = `orders` per chunk) or "l2r"; ensemble M:
        context orders per conditional (paper Eq. 4); max_chunks: the first N chunks only.

        Returns a PerplexityReport: `.nll` (nats per token), `.ppl`, `.final` (with its standard
        errors), `.estimates` and `.bits_per_byte` per ensemble size, `.per_chunk_nll` (C, K)."""
        from .eval.benchmarks import pack_documents
        from .eval.perplexity import perplexity_report, score_chunks
        from .eval.ppl_command import check_options, chunk_length

        with input_errors():
            given = dict(texts_or_tokens=texts_or_tokens, order=order, orders=orders, ensemble=ensemble)
            given |= dict(seq_len=seq_len, max_chunks=max_chunks, seed=seed, batch_size=batch_size, progress=progress)
            check_types(given, SCORE_TYPES)
            check_types(dict(seed=seed), SEED_RANGE)
            check_options(order, orders, ensemble, max_chunks, seq_len, batch_size, spell=keyword_name)
            tokenizer = self.tokenizer
            if tokenizer.get_vocab_size() != self.model_args.vocab_size:  # its text is not this model's
                self.config.build_tokenizer(self._tokenizer_dir, check_vocab=True)  # raises, naming both
            texts = [texts_or_tokens] if isinstance(texts_or_tokens, str) else texts_or_tokens
            if isinstance(texts, (list, tuple)) and not texts:
                raise InputError("texts_or_tokens is empty; allowed: documents (strings) or token chunks (C, n)")
            if isinstance(texts, (list, tuple)) and any(isinstance(t, str) for t in texts):
                i = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
                if i is not None:
                    raise InputError(
                        f"texts_or_tokens[{i}] is {texts[i]!r:.60} (a {type(texts[i]).__name__}); allowed: a string, "
                        "as every item of a list of documents"
                    )
            if isinstance(texts, (list, tuple)) and texts and all(isinstance(t, str) for t in texts):
                n = chunk_length(seq_len, self.model_args.max_seq_len, self.source, spell=keyword_name)
                packed = pack_documents(list(texts), tokenizer, n)
                if packed.num_chunks == 0:
                    raise InputError(f"the texts have {packed.tokens} tokens, fewer than one chunk of seq_len {n}")
                chunks = packed.chunks
            else:
                chunks = self._checked_tokens(texts_or_tokens, "texts_or_tokens")[0].cpu()
                if seq_len is not None and seq_len != chunks.shape[1]:
                    raise InputError(
                        f"seq_len {seq_len} differs from the chunks' length {chunks.shape[1]}; leave it out"
                    )
        chunks = chunks[:max_chunks]
        scores = score_chunks(self.module, chunks, order, orders, ensemble, seed, batch_size, progress)
        return perplexity_report(scores, chunks, tokenizer.byte_lengths())
