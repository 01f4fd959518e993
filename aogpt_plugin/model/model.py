"""The AO-GPT decoder: a GPT whose slot j is told, through adaLN, which position it must predict.

Training reads a sequence x in a permutation sigma. With n tokens the decoder sees n slots:

    slot 0      : [None] start embedding            + input-position row 0
    slot j >= 1 : token x[sigma(j-1)]               + input-position row sigma(j-1)+1

and slot j predicts x[sigma(j)], conditioned on target position sigma(j). (The authors feed n+1
slots and drop the last one's output; under causal attention the last slot cannot influence the
others, so n slots give identical logits for less work.)

`conditioning` selects how the target position enters:
  adaln  - a 128-d target table -> SiLU -> per-block Linear(128, 6d) shift/scale/gate (AO-GPT). A slot's
           modulation depends on nothing but its target position, so each Linear runs on the positions
           (a table, once a layer per forward) and the slots' rows are gathered from it (`modulation_rows`):
           the per-slot numbers, without a (slots, 6d) tensor of the Linear's output
  concat - a d-wide target table added to the input embedding (sigma-GPT style baseline)
  none   - no target information: with the identity order this is a plain causal GPT

The backbone's norms, query/key norm, GELU and head follow the model args (args.py): the paper's by
default, GPT-2's with `GPT2_BACKBONE`. With a tied head there is no `output` module: the head
multiplies by the token embedding, so no parameter is shared between two modules (state dicts,
safetensors and FSDP see each tensor once).

`forward(tokens, order)` returns the logits; given `labels` it returns the summed training cross-entropy
instead, the head's GEMM chunked with the loss (cross_entropy.fused_head_cross_entropy: no logits tensor).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..cross_entropy import fused_head_cross_entropy
from .args import AOGPTModelArgs

# attend(q, k, v) -> y, all (batch, heads, slots, head_dim); the default is causal SDPA.
AttendFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def causal_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class Conditioning(NamedTuple):
    """What adaLN conditions slots on: each slot's target position, and adaLN's input for every position."""

    targets: torch.Tensor  # (...) long: the target position of each slot
    features: torch.Tensor  # (positions, target_pe_dim): `position_features`, one row per target position


def position_features(target_embeddings: nn.Embedding, positions: int | None = None) -> torch.Tensor:
    """adaLN's input for each of the first `positions` target positions (all if None): SiLU of their rows."""
    weight = target_embeddings.weight
    return F.silu(weight if positions is None else weight[:positions])


def modulation_rows(adaln: nn.Linear, cond: Conditioning, chunks: int) -> list[torch.Tensor]:
    """`adaln(features[targets]).chunk(chunks, -1)`, each (..., width / chunks), as a table gathered by target:
    the Linear runs once on every position's features (positions x width) and each chunk's rows are looked up
    on their own, so no (slots, width) tensor of the Linear's output is written (a compiled block reads the
    rows inside the kernels that apply them). The backward sums each position's rows (an embedding's
    gradient) before the Linear's backward, which runs on the positions too."""
    table = adaln(cond.features)
    return [F.embedding(cond.targets, part) for part in table.chunk(chunks, dim=-1)]


def make_norm(args: AOGPTModelArgs, width: int) -> nn.Module:
    """The backbone's norm over `width` features: RMSNorm (the paper's) or LayerNorm with a bias (GPT-2's)."""
    if args.norm == "layernorm":
        return nn.LayerNorm(width, eps=args.norm_eps)
    return nn.RMSNorm(width, eps=args.norm_eps)


class Attention(nn.Module):
    def __init__(self, args: AOGPTModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.head_dim
        self.wqkv = nn.Linear(args.dim, 3 * args.dim, bias=args.bias)
        self.wo = nn.Linear(args.dim, args.dim, bias=args.bias)
        self.q_norm = nn.RMSNorm(args.head_dim, eps=args.norm_eps) if args.qk_norm else None
        self.k_norm = nn.RMSNorm(args.head_dim, eps=args.norm_eps) if args.qk_norm else None

    def forward(self, x: torch.Tensor, attend: AttendFn | None = None) -> torch.Tensor:
        bsz, slots, dim = x.shape
        qkv = self.wqkv(x).view(bsz, slots, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, S, Dh)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        # `is None`, not `or`: Dynamo 2.11 cannot take the truthiness of a closure (a graph break)
        y = (causal_attend if attend is None else attend)(q, k, v)
        return self.wo(y.transpose(1, 2).reshape(bsz, slots, dim))


class FeedForward(nn.Module):
    def __init__(self, args: AOGPTModelArgs):
        super().__init__()
        hidden = args.mlp_ratio * args.dim
        self.w1 = nn.Linear(args.dim, hidden, bias=args.bias)
        self.w2 = nn.Linear(hidden, args.dim, bias=args.bias)
        self.approximate = "tanh" if args.gelu == "tanh" else "none"  # F.gelu's spelling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x), approximate=self.approximate))


class TransformerBlock(nn.Module):
    """Pre-norm block; with adaLN the two norms are modulated and both branches gated per slot."""

    def __init__(self, args: AOGPTModelArgs):
        super().__init__()
        self.attention_norm = make_norm(args, args.dim)
        self.attention = Attention(args)
        self.ffn_norm = make_norm(args, args.dim)
        self.feed_forward = FeedForward(args)
        self.adaln = nn.Linear(args.target_pe_dim, 6 * args.dim, bias=True) if args.conditioning == "adaln" else None

    def forward(
        self, x: torch.Tensor, cond: Conditioning | None = None, attend: AttendFn | None = None
    ) -> torch.Tensor:
        if self.adaln is None:
            x = x + self.attention(self.attention_norm(x), attend)
            return x + self.feed_forward(self.ffn_norm(x))
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = modulation_rows(self.adaln, cond, 6)
        x = x + gate_a * self.attention(modulate(self.attention_norm(x), shift_a, scale_a), attend)
        return x + gate_f * self.feed_forward(modulate(self.ffn_norm(x), shift_f, scale_f))


class AOGPT(nn.Module):
    """Decoder-only any-order LM. `forward(tokens, order)` returns logits for x[order[:, j]] at slot j."""

    def __init__(self, model_args: AOGPTModelArgs):
        super().__init__()
        args = self.model_args = model_args
        self.tok_embeddings = nn.Embedding(args.padded_vocab_size, args.dim)
        # input positions: row 0 belongs to the [None] slot, row p+1 to a token from position p
        self.pos_embeddings = nn.Embedding(args.max_seq_len + 1, args.dim)
        self.none_embedding = nn.Parameter(torch.empty(1, args.dim))  # 2-D like the authors' wnonee
        if args.conditioning == "adaln":
            self.target_embeddings = nn.Embedding(args.max_seq_len, args.target_pe_dim)
        elif args.conditioning == "concat":
            self.target_embeddings = nn.Embedding(args.max_seq_len, args.dim)
        else:
            self.target_embeddings = None
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = make_norm(args, args.dim)
        self.final_adaln = (
            nn.Linear(args.target_pe_dim, 2 * args.dim, bias=True) if args.conditioning == "adaln" else None
        )
        # tied (GPT-2): the head reads tok_embeddings.weight, see `head`
        self.output = None if args.tie_head else nn.Linear(args.dim, args.padded_vocab_size, bias=True)

    # ---- initialisation (works from the meta device after `to_empty`) ---------------------
    def init_weights(self, buffer_device: torch.device | None = None) -> None:
        """Truncated normal (std 0.02, cut at 3 std) everywhere, residual outputs scaled by
        1/sqrt(2L), biases zero, norms one -- the authors' init (adaLN is not zero-initialised)."""
        std = 0.02
        out_std = std / math.sqrt(2 * self.model_args.n_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                s = out_std if name.endswith(("attention.wo", "feed_forward.w2")) else std
                nn.init.trunc_normal_(module.weight, std=s, a=-3 * s, b=3 * s)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.trunc_normal_(module.weight, std=std, a=-3 * std, b=3 * std)
            elif isinstance(module, nn.RMSNorm | nn.LayerNorm):
                module.reset_parameters()
        nn.init.trunc_normal_(self.none_embedding, std=std, a=-3 * std, b=3 * std)

    # ---- pieces shared with the sampler ---------------------------------------------------
    def embed_tokens(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Input embedding of real tokens sitting at original positions `positions`."""
        return self.tok_embeddings(tokens) + self.pos_embeddings(positions + 1)

    def start_embedding(self) -> torch.Tensor:
        """The [None] slot's input, shape (dim,)."""
        return self.none_embedding[0] + self.pos_embeddings.weight[0]

    def condition(self, targets: torch.Tensor, positions: int | None = None) -> Conditioning | None:
        """adaLN's conditioning of slots with target positions `targets`, all below `positions` (default: every
        position of the model), else None."""
        if self.model_args.conditioning != "adaln":
            return None
        return Conditioning(targets, position_features(self.target_embeddings, positions))

    def input_shift(self, targets: torch.Tensor) -> torch.Tensor | float:
        """What `concat` conditioning adds to the slot inputs (0 otherwise)."""
        if self.model_args.conditioning != "concat":
            return 0.0
        return self.target_embeddings(targets)

    def head(self, h: torch.Tensor, cond: Conditioning | None) -> torch.Tensor:
        return self.project(self.head_input(h, cond))

    def head_input(self, h: torch.Tensor, cond: Conditioning | None) -> torch.Tensor:
        """What the head multiplies: the final norm of the states, modulated per slot under adaLN."""
        h = self.norm(h)
        if self.final_adaln is None:
            return h
        shift, scale = modulation_rows(self.final_adaln, cond, 2)
        return modulate(h, shift, scale)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Logits of normed final states: the output Linear, or the token embedding (tied head)."""
        if self.output is None:  # tied head
            return F.linear(h, self.tok_embeddings.weight)
        return self.output(h)

    def head_loss(self, h: torch.Tensor, cond: Conditioning | None, labels: torch.Tensor) -> torch.Tensor:
        """The summed cross-entropy of `head(h, cond)` against `labels` over the real vocabulary, the head's
        GEMM chunked with the loss: no logits tensor. It reads the head's weights itself, where `project` calls
        the output module (under FSDP the head then shares the root's unit: training/parallelize.py)."""
        weight, bias = (
            (self.tok_embeddings.weight, None) if self.output is None else (self.output.weight, self.output.bias)
        )
        return fused_head_cross_entropy(self.head_input(h, cond), weight, bias, labels, self.model_args.vocab_size)

    # ---- training / scoring forward -------------------------------------------------------
    def hidden(self, tokens: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, Conditioning | None]:
        """Final states (B, L, dim) and conditioning of the slots for an order prefix `order` (B, L),
        L <= n: slot j holds x[order[j-1]] ([None] for j = 0) and targets order[j]. With causal
        attention a slot never depends on later slots, so any prefix length gives the same states."""
        bsz = tokens.shape[0]
        read = torch.gather(tokens, 1, order[:, :-1])  # tokens fed to slots 1..L-1
        h = torch.cat([self.start_embedding().expand(bsz, 1, -1), self.embed_tokens(read, order[:, :-1])], dim=1)
        h = h + self.input_shift(order)
        cond = self.condition(order, positions=tokens.shape[1])
        for layer in self.layers.values():
            h = layer(h, cond)
        return h, cond

    def forward(
        self, tokens: torch.Tensor, order: torch.Tensor | None = None, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        """tokens: (B, n) in original order; order: (B, n) permutation (None = left to right).

        Returns logits (B, n, padded_vocab) where slot j scores x[order[:, j]]; given `labels` (B, n), what
        slot j should score (x[order[:, j]] in training, IGNORE_INDEX for none), the summed cross-entropy
        over the real vocabulary instead (`head_loss`: the logits are never held whole).
        """
        bsz, n = tokens.shape
        if order is None:
            order = torch.arange(n, device=tokens.device).expand(bsz, n)
        h, cond = self.hidden(tokens, order)
        return self.head(h, cond) if labels is None else self.head_loss(h, cond, labels)
