"""Documents -> fixed-length chunks, the SEDD/RADD/AO-GPT way: GPT-2 BPE, EOS after every document,
concatenate, cut into n-token chunks; every token of a chunk is scored.

One difference, on purpose: the authors pack inside each `datasets.map` batch (1000 documents per
batch within each of 8 worker shards) and drop each batch's remainder, so their token stream has
gaps whose places depend on the worker count. Here the whole split is one stream and only the final
partial chunk (fewer than n tokens) is dropped; `dropped_tokens` says how many.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedTokens:
    chunks: torch.Tensor  # (num_chunks, seq_len) int64
    documents: int
    tokens: int  # all tokens of the split, EOS included
    dropped_tokens: int  # the final partial chunk, not scored

    @property
    def num_chunks(self) -> int:
        return self.chunks.shape[0]


def pack_documents(texts: list[str], tokenizer, seq_len: int) -> PackedTokens:
    ids = tokenizer.encode_batch(texts, add_eos=True)
    stream = torch.tensor([t for doc in ids for t in doc], dtype=torch.long)
    usable = stream.numel() // seq_len * seq_len
    return PackedTokens(
        chunks=stream[:usable].view(-1, seq_len),
        documents=len(texts),
        tokens=stream.numel(),
        dropped_tokens=stream.numel() - usable,
    )
