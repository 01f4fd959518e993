"""A token source whose entropy is known exactly: a sparse k-th order Markov chain over V symbols.

Why: on text nobody knows the best achievable NLL, so a study cannot tell a slow optimiser from a
hard objective. For a source with a computable joint entropy H(X_1..X_n), every order of the
any-order objective has the same optimum, H/n nats per token, so each variant's gap to it is decisive
at any scale.

The source (all drawn from `seed`): every length-k context c has `branching` possible next symbols,
chosen without replacement, with Dirichlet(`alpha`) probabilities P(. | c). A sequence starts from
the chain's stationary distribution pi over k-grams, so the process is stationary and

    H(X_1..X_n) = H(pi) + (n - k) * sum_c pi(c) H(P(. | c))      (chain rule, exact for n >= k).

`spec` strings (the `--training.dataset_path` of `--training.dataset synthetic`):
    "markov:vocab=32,order=2,branching=4,alpha=0.5,seed=0"     (any subset; these are the defaults)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from ..errors import ConfigError

DEFAULTS = {"vocab": 32, "order": 2, "branching": 4, "alpha": 0.5, "seed": 0}


@dataclass(frozen=True)
class MarkovSpec:
    vocab: int = 32
    order: int = 2
    branching: int = 4
    alpha: float = 0.5
    seed: int = 0

    @classmethod
    def parse(cls, spec: str, key: str = "training.dataset_path") -> MarkovSpec:
        kind, _, body = (spec or "").partition(":")
        if kind != "markov":
            raise ConfigError(f"{key}={spec!r} is not a synthetic source; allowed: 'markov:vocab=32,order=2,...'")
        values: dict = {}
        names = {f.name: f.type for f in fields(cls)}
        for item in filter(None, body.split(",")):
            name, _, value = item.partition("=")
            if name not in names:
                raise ConfigError(f"{key}={spec!r}: unknown field {name!r}; allowed: {', '.join(names)}")
            try:
                values[name] = float(value) if name == "alpha" else int(value)
            except ValueError:
                raise ConfigError(f"{key}={spec!r}: {name}={value!r} is not a number") from None
        made = cls(**values)
        if made.vocab < 2 or made.order < 1 or not 1 <= made.branching <= made.vocab or made.alpha <= 0:
            raise ConfigError(f"{key}={spec!r}: needs vocab >= 2, order >= 1, 1 <= branching <= vocab, alpha > 0")
        if made.vocab**made.order > 1_000_000:
            raise ConfigError(f"{key}={spec!r}: vocab**order = {made.vocab**made.order} contexts is too many (<= 1e6)")
        return made

    def __str__(self) -> str:
        return "markov:" + ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


class MarkovSource:
    def __init__(self, spec: MarkovSpec):
        self.spec = spec
        V, k, b = spec.vocab, spec.order, spec.branching
        g = torch.Generator().manual_seed(spec.seed)
        contexts = V**k
        self.next_symbols = torch.stack([torch.randperm(V, generator=g)[:b] for _ in range(contexts)])  # (C, b)
        weights = torch.from_numpy(np.random.default_rng(spec.seed).gamma(spec.alpha, size=(contexts, b)))
        self.next_probs = weights / weights.sum(dim=1, keepdim=True)  # (C, b) float64, Dirichlet(alpha) rows
        self.transition = torch.zeros(contexts, V, dtype=torch.float64).scatter_(1, self.next_symbols, self.next_probs)
        self.stationary = self._stationary()

    # a context is the integer c = x_1 * V^(k-1) + ... + x_k; the next context drops x_1 and appends x
    def _next_context(self, c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        V, k = self.spec.vocab, self.spec.order
        return (c % V ** (k - 1)) * V + x

    def step_distribution(self, pi: torch.Tensor) -> torch.Tensor:
        """pi P: the distribution over contexts one symbol later."""
        contexts = self.spec.vocab**self.spec.order
        c = torch.arange(contexts).unsqueeze(1).expand(-1, self.spec.branching)
        targets = self._next_context(c, self.next_symbols)  # (C, b)
        return torch.zeros_like(pi).index_add_(0, targets.flatten(), (pi.unsqueeze(1) * self.next_probs).flatten())

    def _stationary(self) -> torch.Tensor:
        """pi with pi P = pi over contexts, reached from the uniform start by the lazy chain (P + I) / 2:
        it has the same stationary distributions (and absorption probabilities) as P but no period,
        so its power iterates converge geometrically; iterated until |pi P - pi|_1 < 1e-13."""
        contexts = self.spec.vocab**self.spec.order
        pi = torch.full((contexts,), 1.0 / contexts, dtype=torch.float64)
        for t in range(1, 100_001):
            pi = 0.5 * (pi + self.step_distribution(pi))
            if t % 50 == 0 and float((self.step_distribution(pi) - pi).abs().sum()) < 1e-13:
                break
        return pi / pi.sum()

    # ---- exact quantities -----------------------------------------------------------------------
    def entropy_rate(self) -> float:
        """sum_c pi(c) H(P(. | c)) in nats."""
        p = self.next_probs
        h = -(p * p.log()).sum(dim=1)
        return float((self.stationary * h).sum())

    def sequence_entropy(self, n: int) -> float:
        """H(X_1..X_n) in nats (n >= order)."""
        if n < self.spec.order:
            raise ConfigError(f"sequence length {n} is shorter than the chain's order {self.spec.order}")
        pi = self.stationary[self.stationary > 0]
        return float(-(pi * pi.log()).sum()) + (n - self.spec.order) * self.entropy_rate()

    def optimum_nll(self, n: int) -> float:
        """The best any model can do, in every order: H(X_1..X_n) / n nats per token."""
        return self.sequence_entropy(n) / n

    def unigram_entropy(self) -> float:
        """Entropy of one symbol's marginal: what a model ignoring all context can reach."""
        k, V = self.spec.order, self.spec.vocab
        last = torch.zeros(V, dtype=torch.float64).index_add_(0, torch.arange(V**k) % V, self.stationary)
        last = last[last > 0]
        return float(-(last * last.log()).sum())

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """(B,) exact log p(x) of sequences x (B, n)."""
        k, V = self.spec.order, self.spec.vocab
        c = torch.zeros(x.shape[0], dtype=torch.long)
        for j in range(k):
            c = c * V + x[:, j]
        logp = self.stationary[c].log()
        for j in range(k, x.shape[1]):
            logp = logp + self.transition[c, x[:, j]].log()
            c = self._next_context(c, x[:, j])
        return logp

    # ---- sampling -------------------------------------------------------------------------------
    def sample(self, count: int, n: int, generator: torch.Generator) -> torch.Tensor:
        """(count, n) sequences from the stationary process."""
        k, V = self.spec.order, self.spec.vocab
        c = torch.multinomial(self.stationary.float(), count, replacement=True, generator=generator)
        out = torch.empty(count, max(n, k), dtype=torch.long)
        for j in range(k - 1, -1, -1):
            out[:, j] = (c // V ** (k - 1 - j)) % V
        for j in range(k, n):
            pick = torch.multinomial(self.next_probs[c].float(), 1, generator=generator).squeeze(1)
            x = self.next_symbols[c, pick]
            out[:, j] = x
            c = self._next_context(c, x)
        return out[:, :n]
