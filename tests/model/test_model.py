"""The decoder's equivalences: identity order without conditioning is a causal LM; the AO loss is a
sum of one-slot-at-a-time conditionals; permuting the input and the order together changes nothing."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model


def plain_gpt_forward(model, tokens):
    """A textbook pre-norm GPT written independently, reading the AO model's weights:
    [BOS] + x[:-1], learned absolute positions, causal attention with QK-norm, GELU MLP."""
    bsz, n = tokens.shape
    bos = model.none_embedding[0] + model.pos_embeddings.weight[0]
    x = model.tok_embeddings.weight[tokens[:, :-1]] + model.pos_embeddings.weight[1:n]
    h = torch.cat([bos.expand(bsz, 1, -1), x], dim=1)
    heads, hd = model.model_args.n_heads, model.model_args.head_dim
    for block in model.layers.values():
        a = block.attention
        y = F.rms_norm(h, (h.shape[-1],), block.attention_norm.weight, 1e-5)
        q, k, v = (y @ a.wqkv.weight.T + a.wqkv.bias).split(h.shape[-1], dim=-1)
        q, k, v = (t.view(bsz, n, heads, hd).transpose(1, 2) for t in (q, k, v))
        q = F.rms_norm(q, (hd,), a.q_norm.weight, 1e-5)
        k = F.rms_norm(k, (hd,), a.k_norm.weight, 1e-5)
        scores = (q @ k.transpose(-1, -2)) / hd**0.5
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(bsz, n, -1)
        h = h + y @ a.wo.weight.T + a.wo.bias
        f = block.feed_forward
        y = F.rms_norm(h, (h.shape[-1],), block.ffn_norm.weight, 1e-5)
        h = h + F.gelu(y @ f.w1.weight.T + f.w1.bias) @ f.w2.weight.T + f.w2.bias
    h = F.rms_norm(h, (h.shape[-1],), model.norm.weight, 1e-5)
    return h @ model.output.weight.T + model.output.bias


def test_identity_order_without_conditioning_is_a_causal_lm():
    model = tiny_model("none")
    tokens = torch.randint(0, 61, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), plain_gpt_forward(model, tokens), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(tokens, order=torch.arange(20).expand(3, 20)), model(tokens))


def test_ao_loss_is_the_sum_of_per_slot_conditionals_and_causal():
    from aogpt_plugin.cross_entropy import ao_cross_entropy

    model = tiny_model("adaln")
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 61, (2, 12), generator=g)
    order = torch.stack([torch.randperm(12, generator=g) for _ in range(2)])
    with torch.no_grad():
        loss = ao_cross_entropy(model(tokens, order=order), torch.gather(tokens, 1, order), 61)
        expected = torch.zeros(())
        for b in range(2):
            for j in range(12):
                # slots after j must not matter: scramble them and check slot j is unchanged
                scrambled = order[b].clone()
                rest = scrambled[j + 1 :]
                scrambled[j + 1 :] = rest[torch.randperm(len(rest), generator=g)]
                tok2 = tokens[b].clone()
                tok2[scrambled[j + 1 :]] = torch.randint(0, 61, (len(rest),), generator=g)
                logits = model(tok2[None], order=scrambled[None])[0, j]
                expected -= logits[:61].log_softmax(-1)[tokens[b, order[b, j]]]  # real vocabulary only
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-4)


def test_slot_j_depends_on_its_target_position_through_adaln():
    model = tiny_model("adaln")
    tokens = torch.randint(0, 61, (1, 10))
    o1 = torch.arange(10)[None]
    o2 = o1.clone()
    o2[0, [5, 6]] = o2[0, [6, 5]]  # same context for slot 5, different target position
    with torch.no_grad():
        l1, l2 = model(tokens, order=o1), model(tokens, order=o2)
    torch.testing.assert_close(l1[0, :5], l2[0, :5])
    assert not torch.allclose(l1[0, 5], l2[0, 5])


def test_concat_conditioning_adds_target_embedding_at_input():
    model = tiny_model("concat")
    tokens = torch.randint(0, 61, (2, 10))
    order = torch.stack([torch.randperm(10) for _ in range(2)])
    with torch.no_grad():
        out = model(tokens, order=order)
        model.target_embeddings.weight.zero_()
        no_target = model(tokens, order=order)
        none_model = tiny_model("none")
        none_model.load_state_dict({k: v for k, v in model.state_dict().items() if "target" not in k})
        torch.testing.assert_close(no_target, none_model(tokens, order=order))
    assert not torch.allclose(out, no_target)


def test_init_from_meta_device_is_deterministic_and_scaled():
    a, b = tiny_model(seed=3), tiny_model(seed=3)
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb), na
    w = a.layers["0"].attention.wo.weight
    assert w.abs().max() <= 3 * 0.02 / (2 * 2) ** 0.5 + 1e-7  # truncated, residual-scaled
    assert torch.all(a.layers["0"].attention.wqkv.bias == 0)
    assert torch.all(a.norm.weight == 1)


def test_padded_vocab_and_shapes():
    model = tiny_model(vocab_size=61)
    assert model.output.out_features == 64 and model.tok_embeddings.num_embeddings == 64
    assert model.pos_embeddings.num_embeddings == model.model_args.max_seq_len + 1


def _training_step_inputs(model, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.model_args.vocab_size, (2, 12), generator=g)
    order = torch.stack([torch.randperm(12, generator=g) for _ in range(2)])
    return tokens, order


def test_the_training_forward_attends_causally_with_no_mask_tensor(monkeypatch):
    """Slots attend causally in slot order, so SDPA gets is_causal=True and no mask: the condition for
    the flash kernels (CUDA, and aten's flash kernel for CPU, which the profiler sees running here)."""
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        calls.append((attn_mask, kwargs))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    model = tiny_model("adaln")
    tokens, order = _training_step_inputs(model)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    for o in (order, None):
        calls.clear()
        model(tokens, o).sum().backward()
        assert len(calls) == model.model_args.n_layers
        assert all(mask is None and kwargs == {"is_causal": True} for mask, kwargs in calls), calls
    monkeypatch.undo()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(tokens, order).sum().backward()
    ran = {e.name for e in prof.events()}
    assert {
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    } <= ran
    assert not any("math" in name or "efficient" in name for name in ran if "scaled_dot_product" in name)


def _forward_and_loss(model):
    from aogpt_plugin.cross_entropy import ao_cross_entropy
    from aogpt_plugin.likelihood import order_labels

    vocab = model.model_args.vocab_size
    return lambda tokens, order: ao_cross_entropy(
        model(tokens, order), order_labels(tokens, order), vocab, chunk_rows=8
    )


@pytest.mark.parametrize("conditioning", ["adaln", "concat", "none"])
def test_forward_and_training_loss_trace_in_one_graph_without_breaks(conditioning):
    """What `TORCH_LOGS=graph_breaks` would list for a compiled training forward + loss (adaLN, the
    order gathers, the chunked cross-entropy): nothing, for every conditioning and both order paths."""
    model = tiny_model(conditioning)
    tokens, order = _training_step_inputs(model)
    forward_and_loss = _forward_and_loss(model)
    for o in (order, None):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(forward_and_loss)(tokens, o)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_the_graph_break_check_sees_a_break():
    """The case the test above must be able to fail: `.item()` in the traced step splits the graph."""
    model = tiny_model("adaln")
    tokens, order = _training_step_inputs(model)
    forward_and_loss = _forward_and_loss(model)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda t, o: forward_and_loss(t, o) * forward_and_loss(t, o).item())(
        tokens, order
    )
    assert explained.graph_break_count >= 1


# ---- adaLN per target position: the table and its gathers against the per-slot Linear ----------------------


def per_slot_modulation_rows(adaln, cond, chunks):
    """The reference formula: adaLN's Linear on every slot's own features (a (slots, width) output)."""
    return adaln(cond.features[cond.targets]).chunk(chunks, dim=-1)


ORDER_KINDS = ("random", "identity", "mixed")


def _orders(kind: str, bsz: int, n: int, g: torch.Generator) -> torch.Tensor:
    identity = torch.arange(n).expand(bsz, n)
    if kind == "identity":
        return identity.clone()
    random = torch.stack([torch.randperm(n, generator=g) for _ in range(bsz)])
    if kind == "random":
        return random
    mixed = random.clone()  # one row left to right, one reversed, one repeating a target a row below
    mixed[0], mixed[1] = identity[0], identity[0].flip(0)
    return mixed


def _loss_and_gradients(model, tokens, order, autocast: torch.dtype | None = None):
    from aogpt_plugin.cross_entropy import ao_cross_entropy

    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=autocast is not None):
        loss = ao_cross_entropy(model(tokens, order), torch.gather(tokens, 1, order), model.model_args.vocab_size)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-300)).item()


@pytest.mark.parametrize("kind", ORDER_KINDS)
def test_the_adaln_table_gives_the_per_slot_loss_and_every_gradient_in_float64(kind, monkeypatch):
    """Training's adaLN (one table a layer, gathered by target; its gradient summed per position) against
    the per-slot Linear: the loss and every parameter's gradient to 1e-12 relative, in float64."""
    import aogpt_plugin.model.model as model_module

    model = tiny_model("adaln", scale=4.0).double()
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, 61, (4, 20), generator=g)
    order = _orders(kind, 4, 20, g)
    loss, grads = _loss_and_gradients(model, tokens, order)
    monkeypatch.setattr(model_module, "modulation_rows", per_slot_modulation_rows)
    ref_loss, ref_grads = _loss_and_gradients(model, tokens, order)
    assert _relative_error(loss, ref_loss) <= 1e-12
    assert grads.keys() == ref_grads.keys() and any("adaln" in name for name in grads)
    for name, grad in grads.items():
        assert _relative_error(grad, ref_grads[name]) <= 1e-12, name
    # the comparison can fail: a table one position off is caught
    monkeypatch.setattr(
        model_module,
        "modulation_rows",
        lambda a, c, k: per_slot_modulation_rows(a, c._replace(targets=c.targets.roll(1, -1)), k),
    )
    shifted, _ = _loss_and_gradients(model, tokens, order)
    assert _relative_error(shifted, ref_loss) > 1e-6


@pytest.mark.parametrize("kind", ORDER_KINDS)
def test_the_adaln_table_under_bfloat16_autocast_is_the_per_slot_formula_to_its_rounding(kind, monkeypatch):
    """bfloat16 autocast: the table's rows are the per-slot Linear's rows (the same bf16 GEMM rows, at most one
    bf16 step apart where accumulation orders differ), so the loss and gradients agree to bf16 rounding."""
    import aogpt_plugin.model.model as model_module

    model = tiny_model("adaln", scale=4.0)
    g = torch.Generator().manual_seed(12)
    tokens = torch.randint(0, 61, (4, 20), generator=g)
    order = _orders(kind, 4, 20, g)
    cond = model.condition(order, positions=20)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        rows = torch.cat(model_module.modulation_rows(model.layers["0"].adaln, cond, 6), -1)
        per_slot = torch.cat(per_slot_modulation_rows(model.layers["0"].adaln, cond, 6), -1)
    assert (
        rows.dtype == torch.bfloat16
        and ((rows.float() - per_slot.float()).abs() <= 2**-7 * per_slot.float().abs()).all()
    )
    loss, grads = _loss_and_gradients(model, tokens, order, torch.bfloat16)
    monkeypatch.setattr(model_module, "modulation_rows", per_slot_modulation_rows)
    ref_loss, ref_grads = _loss_and_gradients(model, tokens, order, torch.bfloat16)
    assert _relative_error(loss, ref_loss) <= 1e-3
    for name, grad in grads.items():
        assert _relative_error(grad, ref_grads[name]) <= 1e-2, name  # measured: 4e-3, about one bf16 step


def test_a_block_with_its_adaln_table_compiles_in_one_graph():
    """The block torchtitan compiles (per block): the table, the gathers and their backward trace without a break."""
    model = tiny_model("adaln")
    block = model.layers["0"]
    g = torch.Generator().manual_seed(13)
    order = torch.stack([torch.randperm(12, generator=g) for _ in range(2)])
    x = torch.randn(2, 12, 32, generator=g, requires_grad=True)
    cond = model.condition(order, positions=12)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(x, cond)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    compiled(x, cond).square().sum().backward()
    assert model.layers["0"].adaln.weight.grad is not None and model.target_embeddings.weight.grad is not None


def _compiled_step_buffer_sizes(model, tokens, order) -> list[int]:
    """The element counts of every buffer inductor's code for one AO training step (the whole model compiled,
    forward + loss + backward) allocates."""
    import re

    from torch._inductor.utils import run_and_get_code

    from aogpt_plugin.cross_entropy import ao_cross_entropy

    torch._dynamo.reset()
    compiled = torch.compile(model)
    labels = torch.gather(tokens, 1, order)

    def step():
        ao_cross_entropy(compiled(tokens, order), labels, model.model_args.vocab_size).backward()

    _, code = run_and_get_code(step)
    shapes = re.findall(r"empty_strided(?:_\w+)?\(\(([\d, ]+)\)", "\n".join(code))
    return [math.prod(int(d) for d in shape.split(",") if d.strip()) for shape in shapes]


def test_the_compiled_ao_training_step_allocates_no_slots_by_6d_tensor(monkeypatch):
    """Inductor's code for a compiled AO training step holds no (micro-batch x seq x 6d) buffer: the adaLN rows
    are read from the table inside the kernels that apply them, forward and backward. The per-slot Linear (the
    case that must fail) writes its output, and its gradient, as such buffers."""
    import aogpt_plugin.model.model as model_module

    model = tiny_model("adaln", n_layers=1)
    g = torch.Generator().manual_seed(14)
    bsz, n = 3, 20
    tokens = torch.randint(0, 61, (bsz, n), generator=g)
    order = _orders("random", bsz, n, g)
    slots_by_6d = bsz * n * 6 * model.model_args.dim
    sizes = _compiled_step_buffer_sizes(model, tokens, order)
    assert sizes and slots_by_6d not in sizes
    monkeypatch.setattr(model_module, "modulation_rows", per_slot_modulation_rows)
    assert slots_by_6d in _compiled_step_buffer_sizes(model, tokens, order)


# ---- the head fused with the loss: forward(tokens, order, labels) ----------------------------------------------


@pytest.mark.parametrize("backbone", ["paper", "gpt2"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forward_with_labels_is_the_logits_paths_loss_with_every_gradient(dtype, backbone):
    """`model(tokens, order, labels)` (the fused head and loss) against `ao_cross_entropy(model(tokens, order),
    labels)`: the loss and every parameter's gradient to 1e-12 relative in float64, 1e-5 in float32; untied
    head with a bias (the paper's) and tied (GPT-2's)."""
    from aogpt_plugin.model.args import GPT2_BACKBONE

    model = tiny_model("adaln", scale=4.0, **(GPT2_BACKBONE if backbone == "gpt2" else {})).to(dtype)
    g = torch.Generator().manual_seed(15)
    tokens = torch.randint(0, 61, (4, 20), generator=g)
    order = _orders("mixed", 4, 20, g)
    ref_loss, ref_grads = _loss_and_gradients(model, tokens, order)
    model.zero_grad(set_to_none=True)
    loss = model(tokens, order, labels=torch.gather(tokens, 1, order))
    loss.backward()
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    assert loss.dtype == dtype and _relative_error(loss, ref_loss) <= tolerance
    for name, p in model.named_parameters():
        assert _relative_error(p.grad, ref_grads[name]) <= tolerance, name


def test_the_fused_forward_traces_in_one_graph():
    """`--compile model` with the fused loss path: forward and loss in one graph, no break."""
    model = tiny_model("adaln")
    tokens, order = _training_step_inputs(model)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(tokens, order, torch.gather(tokens, 1, order))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
