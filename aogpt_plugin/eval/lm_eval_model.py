"""An lm-evaluation-harness model for converted AO-GPT folders (`pip install -e '.[eval]'`).

    aogpt lm-eval --model aogpt --model_args pretrained=OUT_DIR,order=random,orders=4 --tasks lambada_openai
    python -c "import aogpt_plugin.eval.lm_eval_model, lm_eval; lm_eval.simple_evaluate(model='aogpt', ...)"

Importing this module registers the model under the name "aogpt" (lm_eval has no plugin entry points,
so `aogpt lm-eval ARGS` imports it and then runs lm_eval's own command line with ARGS unchanged).

model_args: pretrained (the folder), order (l2r | random; default l2r), orders (K random orders per
request, default 1; their NLLs are averaged like `aogpt eval ppl --orders K`), seed, dtype,
max_gen_toks (default 64), max_length (positions used, default all: a model trained on shorter
windows should be read at that length), verify (default true: model.safetensors must match the sha256
in config.json); lm_eval's own --batch_size and --device reach the model too (`aogpt lm-eval` makes
the device default auto, the machine's, instead of lm_eval's cuda:0). Any other key is refused.
  loglikelihood          log p(continuation | context): the context's tokens come first (their own
                         order random under order=random), then the continuation's tokens, each
                         scored given the context and the continuation tokens before it in the order.
  loglikelihood_rolling  the estimator of `aogpt eval ppl` on the text's tokens plus EOS, cut into
                         windows of the model's length: every token scored, the first with no context (the start slot),
                         the same orders per (window, draw), so the two agree on the same text.
  generate_until         the sampler (T = tokens to generate): left to right, or any order after the
                         context with order=random; greedy (top-k 1) unless do_sample; stops honoured.
                         Requests are sampled in batch_size slots of the continuous-batching engine (a
                         request joins as another ends), request i seeded as sample i of seed: its text is
                         the same at any batch size.
"""

from __future__ import annotations

import lm_eval.models  # noqa: F401  (lm_eval adds its own models only to an empty registry: before "aogpt")
import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from ..devices import resolve_device, resolve_dtype
from ..errors import UserError
from ..likelihood import token_nll
from ..orders import L2R, READ_ORDERS
from ..seeding import stream_generator
from .perplexity import score_chunks

MODEL_ARGS = ("pretrained", "order", "orders", "seed", "batch_size", "device", "dtype", "max_gen_toks", "max_length")
MODEL_ARGS += ("verify",)
LM_EVAL_PASSES = ("max_batch_size",)  # lm_eval hands every model these too; aogpt does not use them


def _flag(key: str, value) -> bool:
    """A true/false model_arg: lm_eval turns `true`/`false` into bools, a caller may pass a string."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes"):
        return True
    if str(value).lower() in ("false", "0", "no"):
        return False
    raise UserError(f"model_args {key}={value!r} is not allowed; allowed: true, false")


def _int(key: str, value, low: int = 1) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < low or isinstance(value, float) and value != number:
        raise UserError(f"model_args {key}={value!r} is not allowed; allowed: an integer >= {low}")
    return number


@register_model("aogpt")
class AOGPTLM(LM):
    def __init__(
        self,
        pretrained: str | None = None,
        order: str = L2R,
        orders: int = 1,
        seed: int = 0,
        batch_size: int | str = 8,
        device: str | None = "auto",
        dtype: str = "float32",
        max_gen_toks: int = 64,
        max_length: int | None = None,
        verify: bool | str = True,
        **others,
    ):
        """Every model_arg is checked before the weights load: a misspelt key is named (lm_eval would
        report a TypeError about `__init__`), and the folder is read before the device is resolved,
        so a missing folder is blamed as such."""
        super().__init__()
        from ..model_dir import load_model_dir, read_config

        for key, value in others.items():
            if key not in LM_EVAL_PASSES:
                raise UserError(
                    f"model_args {key}={value!r} is not an aogpt model argument; allowed: {', '.join(MODEL_ARGS)}"
                )
        if pretrained is None or pretrained == "":
            raise UserError("model_args has no pretrained=OUT_DIR: name the converted model folder (aogpt convert)")
        if order not in READ_ORDERS:
            raise UserError(f"model_args order={order!r} is not allowed; allowed: {', '.join(READ_ORDERS)}")
        orders, batch_size = _int("orders", orders), _int("batch_size", batch_size)
        max_gen_toks, seed = _int("max_gen_toks", max_gen_toks), _int("seed", seed, low=0)
        if orders < 1 or (order == L2R and orders != 1):
            raise UserError(f"model_args orders={orders} is not allowed; allowed: 1 with l2r, >= 1 with random")
        verify = _flag("verify", verify)
        read_config(pretrained)  # a missing or bad folder, before the device is looked at
        self.model_dir = load_model_dir(pretrained, resolve_device(device), resolve_dtype(dtype), verify=verify)
        self.model = self.model_dir.model
        self.tok = self.model_dir.tokenizer(check_vocab=False)
        self.order, self.orders, self.seed = order, orders, int(seed)
        self.batch_size, self.max_gen_toks = batch_size, max_gen_toks
        positions = self.model.model_args.max_seq_len
        self.max_length = positions if max_length is None else int(max_length)
        if not 1 <= self.max_length <= positions:
            raise UserError(f"model_args max_length={max_length} is not allowed; allowed: 1..{positions}")
        self.vocab = self.model.model_args.vocab_size
        self._device = self.model.tok_embeddings.weight.device
        self._engine = None  # generate_until's continuous-batching engine (batch_size slots), made on first use

    # ---- loglikelihood -----------------------------------------------------------------------------
    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm_eval's rule: trailing spaces of the context belong to the continuation, and the
        continuation's tokens are those of context + continuation after the context's."""
        spaces = len(context) - len(context.rstrip(" "))
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.tok.encode(context + continuation)
        ctx = self.tok.encode(context) if context else []
        return whole[: len(ctx)], whole[len(ctx) :]

    def _orders(self, lengths: list[tuple[int, int]], width: int, draw: int, index: int) -> torch.Tensor | None:
        """Per row (context, continuation) lengths -> its order over `width` slots: the context
        positions, then the continuation's, each part shuffled under order=random; padding last."""
        if self.order == L2R:
            return None
        rows = []
        for r, (c, k) in enumerate(lengths):
            g = stream_generator("eval_order", self.seed, index + r, draw)
            rows.append(
                torch.cat(
                    [torch.randperm(c, generator=g), c + torch.randperm(k, generator=g), torch.arange(c + k, width)]
                )
            )
        return torch.stack(rows)

    @torch.inference_mode()
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = []
        for req in requests:
            ctx, cont = self._encode_pair(*req.args)
            if not cont:
                raise UserError(f"lm_eval request {req.args!r}: the continuation has no tokens")
            if len(cont) > self.max_length:
                raise UserError(f"a continuation of {len(cont)} tokens exceeds the model's {self.max_length} positions")
            pairs.append(
                (ctx[-(self.max_length - len(cont)) :] if len(ctx) + len(cont) > self.max_length else ctx, cont)
            )
        results = []
        for start in tqdm(range(0, len(pairs), self.batch_size), disable=disable_tqdm, desc="loglikelihood"):
            batch = pairs[start : start + self.batch_size]
            width = max(len(c) + len(k) for c, k in batch)
            tokens = torch.zeros(len(batch), width, dtype=torch.long)
            for r, (c, k) in enumerate(batch):
                tokens[r, : len(c) + len(k)] = torch.tensor(c + k)
            tokens = tokens.to(self._device)
            lengths = [(len(c), len(k)) for c, k in batch]
            logp = torch.zeros(len(batch), dtype=torch.float64)
            greedy = [True] * len(batch)
            for draw in range(self.orders):
                order = self._orders(lengths, width, draw, start)
                order_dev = None if order is None else order.to(self._device)
                logits = self.model(tokens, order=order_dev)[..., : self.vocab].float()
                labels = tokens if order_dev is None else tokens.gather(1, order_dev)
                nll = token_nll(logits, labels, self.vocab).double().cpu()
                best = (logits.argmax(-1) == labels).cpu()
                for r, (c, k) in enumerate(lengths):
                    logp[r] -= nll[r, c : c + k].sum() / self.orders
                    if draw == 0:  # greedy: the argmax of every continuation slot, in the first order
                        greedy[r] = bool(best[r, c : c + k].all())
            results += [(float(v), g) for v, g in zip(logp.tolist(), greedy, strict=True)]
        return results

    @torch.inference_mode()
    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        for req in tqdm(requests, disable=disable_tqdm, desc="loglikelihood_rolling"):
            (text,) = req.args
            ids = self.tok.encode(text, add_eos=self.tok.eos_id is not None)
            stream = torch.tensor(ids, dtype=torch.long)
            n = self.max_length
            full = stream.numel() // n * n
            total = 0.0
            for part in (stream[:full].view(-1, n), stream[full:].view(1, -1)):
                if part.numel() == 0:
                    continue
                scores = score_chunks(self.model, part, self.order, self.orders, 1, self.seed, self.batch_size)
                total -= float(scores.per_draw_nll[:, :, 0].mean(dim=1).sum()) * part.shape[1]
            out.append(total)
        return out

    # ---- generation --------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Every request a sample of its own (its context given at positions 0.., T = its new tokens, seeded
        as sample `index` of seed), sampled in `batch_size` slots of the continuous-batching engine
        (sampler/engine.py): a request's text does not depend on the batch size or its neighbours."""
        from ..sampler import Engine, RequestLine, SampleRequest, sample_in_slots
        from ..sampler.choices import resolve_choices

        lines, stops = [], []
        for i, req in enumerate(requests):
            context, kwargs = req.args
            kwargs = dict(kwargs or {})
            until = kwargs.pop("until", None) or []
            stops.append([until] if isinstance(until, str) else list(until))
            new = int(kwargs.pop("max_gen_toks", self.max_gen_toks))
            sample = bool(kwargs.pop("do_sample", False)) and float(kwargs.get("temperature", 1.0) or 0) > 0
            if sample:
                fields = {
                    "temperature": float(kwargs.get("temperature", 1.0)),
                    "top_p": float(kwargs.get("top_p", 1.0)),
                }
            else:
                fields = {"top_k": 1}  # greedy
            ctx = self.tok.encode(context) if context else []
            new = max(1, min(new, self.max_length - 1))
            ctx = ctx[max(0, len(ctx) - (self.max_length - new)) :]
            fields["length"] = len(ctx) + new
            if ctx:
                fields["infill"] = {"spans": [{"start": 0, "tokens": ctx}]}
            lines.append(RequestLine(i, None, fields))
        base = SampleRequest(order=self.order, seed=self.seed)
        dtype = self.model.tok_embeddings.weight.dtype

        def plan(request):
            return request.plan(self.model.model_args, None, self._device, dtype)

        if self._engine is None:  # kept: its static step's compiled shapes serve every later call
            choices = resolve_choices(
                base.graphs, base.backend, "auto", self._device, dtype, self.model.model_args.head_dim
            )
            self._engine = Engine(self.model, self.batch_size, choices)
        out: list[str | None] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="generate_until")
        for line, sample in sample_in_slots(self._engine, lines, base, plan):
            text = self.tok.decode(sample.tokens[sample.given :])
            cut = min((text.find(s) for s in stops[line.index] if s and s in text), default=len(text))
            out[line.index] = text[:cut]
            bar.update(1)
        bar.close()
        return out
