"""Generation perplexity: how likely a causal scorer finds generated samples, and how varied they are.

Per sample, ppl_s = exp(mean NLL of its scored tokens); the paper's Table 1 (and the authors' and
SEDD's scripts) report the mean of ppl_s over samples. The token-level aggregate exp(sum NLL / sum
tokens) weighs every token equally and is reported next to it. Low-temperature sampling can reach
a low perplexity with repetitive text, so the unigram entropy of each sample's own tokens (nats,
-sum_v p_v log p_v over its token frequencies, as MDLM/ReMDM report) is averaged too.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ..data.tokenizer import load_tokenizer
from ..errors import UserError
from ..likelihood import perplexity
from .samples import SampleSet


@dataclass
class PreparedSamples:
    ids: list[list[int]]  # what the scorer reads
    own_tokens: list[list[int]]  # each sample's own tokens (entropy); the scorer's ids if it had none
    mode: str  # "direct" or "retokenized"


def prepare(sample_set: SampleSet, scorer, mode: str = "auto") -> PreparedSamples:
    """Token ids for the scorer: the samples' own when the tokenizers agree, else their text re-encoded."""
    samples = sample_set.samples
    missing = next((i for i, s in enumerate(samples) if s.tokens is None), None)
    same_vocab = scorer.speaks(sample_set.tokenizer)
    if mode == "direct" and (missing is not None or not same_vocab):
        why = (
            f"sample {missing} has no token ids"
            if missing is not None
            else f"scorer {scorer.name!r} does not use the samples' {sample_set.tokenizer} vocabulary"
        )
        raise UserError(f"--tokens direct: {why}; use --tokens retokenize (or auto)")
    if mode != "retokenize" and missing is None and same_vocab:
        ids = [list(s.tokens) for s in samples]
        used = "direct"
    else:
        ids = scorer.encode([_text_of(s, i, sample_set) for i, s in enumerate(samples)])
        used = "retokenized"
    _check_fits(ids, scorer)
    own = [list(s.tokens) if s.tokens is not None else ids[i] for i, s in enumerate(samples)]
    return PreparedSamples(ids, own, used)


def _text_of(sample, index: int, sample_set: SampleSet) -> str:
    if sample.text is not None:
        return sample.text
    try:
        tokenizer = load_tokenizer(sample_set.tokenizer)
    except UserError:
        raise UserError(
            f"--samples {sample_set.path!r}: sample {index} has only {sample_set.tokenizer!r} token ids, which this "
            "scorer does not use and which cannot be decoded here (gpt2, symbols:V or an existing tokenizer.json "
            "path can be); add text"
        ) from None
    return tokenizer.decode(sample.tokens)


def _check_fits(ids: list[list[int]], scorer) -> None:
    for i, seq in enumerate(ids):
        if len(seq) < scorer.min_len:
            raise UserError(f"sample {i} has {len(seq)} tokens; scorer {scorer.name!r} needs >= {scorer.min_len}")
        if len(seq) > scorer.max_len:
            raise UserError(
                f"sample {i} has {len(seq)} tokens, above the {scorer.max_len} positions of scorer {scorer.name!r}"
            )
        if min(seq) < 0 or max(seq) >= scorer.vocab_size:
            raise UserError(
                f"sample {i} holds token id {max(seq) if max(seq) >= scorer.vocab_size else min(seq)}, outside "
                f"the {scorer.vocab_size}-token vocabulary of scorer {scorer.name!r}"
            )


def nll_per_sample(scorer, ids: list[list[int]], batch_size: int, progress: bool = False):
    """(sums, counts): NLL summed over each sample's scored tokens, and how many were scored."""
    sums, counts = [], []
    for start in tqdm(range(0, len(ids), batch_size), desc="scoring", unit="batch", disable=not progress):
        s, c = scorer.nll_sums(ids[start : start + batch_size])
        sums.append(s)
        counts.append(c)
    return torch.cat(sums), torch.cat(counts)


def unigram_entropy(tokens: list[int]) -> float:
    """Entropy (nats) of the token frequency distribution within one sample."""
    total = len(tokens)
    return -sum(c / total * math.log(c / total) for c in Counter(tokens).values())


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summarize(sums: torch.Tensor, counts: torch.Tensor, own_tokens: list[list[int]]) -> dict:
    """Token-level ppl/nll, mean ± std (n-1) of per-sample ppl, and mean ± std of unigram entropy."""
    per_sample = [perplexity(s / c) for s, c in zip(sums.tolist(), counts.tolist(), strict=True)]
    ppl_mean, ppl_std = _mean_std(per_sample)
    entropies = [unigram_entropy(t) for t in own_tokens]
    ent_mean, ent_std = _mean_std(entropies)
    nll = sums.sum().item() / counts.sum().item()
    return {
        "ppl": perplexity(nll),
        "nll": nll,
        "tokens": int(counts.sum().item()),
        "samples": len(per_sample),
        "sample_ppl_mean": ppl_mean,
        "sample_ppl_std": ppl_std,
        "unigram_entropy_mean": ent_mean,
        "unigram_entropy_std": ent_std,
        "sample_ppls": per_sample,
    }
