"""The AO training loss in torchtitan's contract, and the per-token NLL evaluation shares.

Training: labels are x[sigma] (the dataloader gathers them), so the any-order loss is the plain
summed cross-entropy of slot j's logits against x[sigma(j)] over all n slots (the [None] slot
predicts the first). torchtitan divides the sum by the global token count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def ao_cross_entropy(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed CE over the padded vocabulary, as the authors train."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum", ignore_index=IGNORE_INDEX)


def token_nll(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """-log p(label) per slot, normalised over the real vocabulary only (padding rows excluded).

    Used by validation and evaluation, so reported perplexities are proper distributions over the
    tokenizer's tokens. Returns float32 with the shape of `labels`.
    """
    logp = torch.log_softmax(logits[..., :vocab_size].float(), dim=-1)
    return -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def build_ao_loss(job_config, **kwargs):
    """torchtitan `build_loss_fn`: the summed AO cross-entropy, optionally compiled, NaN-watched."""
    from .optimizer import LOSS_WATCH

    loss_fn = ao_cross_entropy
    if job_config.compile.enable and "loss" in job_config.compile.components:
        loss_fn = torch.compile(loss_fn, backend=job_config.compile.backend)

    def watched(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(pred, labels)
        LOSS_WATCH.record(loss)
        return loss

    return watched
