"""Pruning: structural head/layer pruning against masking and hand-run blocks, gradient importance against
finite differences, unstructured pruning against ``torch.nn.utils.prune``'s own threshold."""

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import GPT, CachedSelfAttention, GPTConfig, GroupedQueryAttention, MultiHeadAttention
from transformer_lib.compression import pruning as P
from transformer_lib.serving.generation import generate


def tiny_gpt(n_layers=3, n_heads=4, d_model=32, positional="learned", seed=0):
    torch.manual_seed(seed)
    return GPT(
        GPTConfig(
            vocab_size=23, block_size=16, n_layers=n_layers, n_heads=n_heads, d_model=d_model, positional=positional
        )
    ).eval()


def batch(seed=1, B=3, T=12, V=23):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen)


def zero_heads_by_hand(attn: MultiHeadAttention, x: torch.Tensor, dead: list[int]) -> torch.Tensor:
    """Independent reference: run the full attention, zero the dead heads' outputs, then apply W_O."""
    q, k, v = attn.project_qkv(x)  # (B, H, T, d_head)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # PyTorch's own kernel
    y[:, dead] = 0.0
    return attn.out(y.transpose(1, 2).flatten(2))


# ----------------------------------------------------------------------------- masks and structural pruning
@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_pruned_model_equals_original_with_removed_heads_masked(positional):
    model = tiny_gpt(positional=positional)
    plan = {0: [1, 3], 2: [0]}
    pruned = P.prune_heads(model, plan)
    assert P.head_counts(pruned) == [2, 4, 3]
    x, _ = batch()
    with torch.no_grad(), P.head_mask(model, P.mask_from_heads(P.head_counts(model), plan)):
        masked = model(x)[0]
    full = model(x)[0]
    got = pruned(x)[0]
    torch.testing.assert_close(got, masked, atol=1e-6, rtol=1e-6)
    assert (got - full).abs().max() > 1e-3  # the heads did matter: the check is not vacuous


def test_head_mask_zeroes_exactly_the_chosen_heads_outputs():
    model = tiny_gpt(n_layers=1)
    attn = model.blocks[0].self_attn
    x = torch.randn(2, 7, 32)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    with torch.no_grad(), P.head_mask(model, mask):
        got = attn(x, is_causal=True)[0]
    torch.testing.assert_close(got, zero_heads_by_hand(attn, x, [1, 3]), atol=1e-6, rtol=1e-5)
    # the hooks are gone after the block
    torch.testing.assert_close(attn(x, is_causal=True)[0], zero_heads_by_hand(attn, x, []), atol=1e-6, rtol=1e-5)


def test_pruned_attention_module_matches_the_kept_heads_by_hand():
    attn = CachedSelfAttention(24, 4, layer_idx=2).eval()
    small = P.prune_attention_heads(attn, [0, 2])
    assert (small.n_heads, small.d_head, small.qkv.weight.shape, small.out.weight.shape, small.layer_idx) == (
        2,
        6,
        (36, 24),
        (24, 12),
        2,
    )
    x = torch.randn(2, 5, 24)
    with torch.no_grad():
        torch.testing.assert_close(
            small(x, is_causal=True)[0], zero_heads_by_hand(attn, x, [1, 3]), atol=1e-6, rtol=1e-5
        )


def test_pruned_model_decodes_like_the_masked_model_with_a_cache():
    model = tiny_gpt()
    plan = {1: [0, 1, 2], 2: [3]}
    pruned = P.prune_heads(model, plan)
    prompt = batch(B=1, T=4)[0]
    with P.head_mask(model, P.mask_from_heads(P.head_counts(model), plan)):
        want = generate(model, prompt, 10, use_cache=False)
    assert torch.equal(generate(pruned, prompt, 10, cache_implementation="dynamic"), want)
    assert torch.equal(generate(pruned, prompt, 10, cache_implementation="static"), want)


def test_prune_heads_leaves_the_original_unchanged():
    model = tiny_gpt()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    P.prune_heads(model, {0: [0]})
    assert P.head_counts(model) == [4, 4, 4]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_pruning_all_heads_of_a_layer_raises():
    with pytest.raises(ValueError, match=r"len\(heads\[1\]\) must be an int <= 3 \(one of layer 1's 4 heads stays"):
        P.prune_heads(tiny_gpt(), {1: [0, 1, 2, 3]})


@pytest.mark.parametrize(
    "plan, error, match",
    [
        ({0: [4]}, ValueError, r"heads\[0\]\[0\] must be an int in \[0, 3\] \(layer 0's heads\), got 4"),
        ({0: [-1]}, ValueError, r"heads\[0\]\[0\] must be an int in \[0, 3\] \(layer 0's heads\), got -1"),
        ({3: [0]}, ValueError, r"heads' layer index must be an int in \[0, 2\] \(3 layers\), got 3"),
        ({0: [1, 1]}, ValueError, r"heads\[0\] must not repeat an item, got \[1, 1\]"),
        ([0, 1], TypeError, r"heads must be a dict \{layer: \[head, ...\]\}, got list \[0, 1\]"),
    ],
)
def test_bad_head_index_raises(plan, error, match):
    with pytest.raises(error, match=match):
        P.prune_heads(tiny_gpt(), plan)


def test_pruning_an_alibi_or_grouped_query_model_raises():
    with pytest.raises(ValueError, match="ALiBi"):
        P.prune_heads(tiny_gpt(positional="alibi"), {0: [0]})
    with pytest.raises(ValueError, match="n_kv_heads"):
        P.prune_attention_heads(GroupedQueryAttention(32, 4, n_kv_heads=2), [0])


def test_head_mask_with_wrong_shape_raises():
    with pytest.raises(
        ValueError, match=r"mask\[0\] must be a tensor of shape \(..., 4\) .*head counts \[4, 4, 4\]\), got \(3,\)"
    ):
        with P.head_mask(tiny_gpt(), torch.ones(3, 3)):
            pass


# ----------------------------------------------------------------------------- layer dropping
def test_dropping_layers_equals_running_the_remaining_blocks_by_hand():
    model = tiny_gpt(n_layers=4)
    dropped = P.drop_layers(model, [1, 2])
    assert dropped.cfg.n_layers == 2 and [b.self_attn.layer_idx for b in dropped.blocks] == [0, 1]
    x, _ = batch()
    with torch.no_grad():
        h = model.pos(model.tok_emb(x))
        for i in (0, 3):
            h = model.blocks[i](h)
        want = model.lm_head(model.norm(h))
        torch.testing.assert_close(dropped(x)[0], want, atol=1e-6, rtol=1e-6)
    assert len(model.blocks) == 4  # original unchanged


def test_dropped_model_decodes_with_a_static_cache():
    dropped = P.drop_layers(tiny_gpt(n_layers=4), [0])
    prompt = batch(B=1, T=4)[0]
    assert torch.equal(
        generate(dropped, prompt, 8, cache_implementation="static"), generate(dropped, prompt, 8, use_cache=False)
    )


@pytest.mark.parametrize(
    "layers, match",
    [
        ([0, 1, 2], r"len\(layers\) must be an int <= 2 \(cannot drop all 3 layers: one stays\), got 3"),
        ([3], r"layers\[0\] must be an int in \[0, 2\], got 3"),
        ([1, 1], r"layers must not repeat an item, got \[1, 1\]"),
    ],
)
def test_bad_layer_drop_raises(layers, match):
    with pytest.raises(ValueError, match=match):
        P.drop_layers(tiny_gpt(), layers)


# ----------------------------------------------------------------------------- importance scores
def float64_gpt(model: GPT) -> GPT:
    """``model`` in float64 throughout: the library's LayerNorm computes its statistics in float32, so swap
    in ``torch.nn.LayerNorm`` (same weights), which keeps float64. Finite differences need that precision."""
    model = model.double()
    for owner in [model] + [r for b in model.blocks for r in (b.res_self, b.res_ffn)]:
        ours = owner.norm
        theirs = torch.nn.LayerNorm(ours.weight.shape[0], eps=ours.eps, dtype=torch.float64)
        theirs.load_state_dict(ours.state_dict())
        owner.norm = theirs
    return model


def test_gradient_importance_equals_finite_differences():
    """I[l, h] = mean over sequences of |dL(x) / d xi[l, h]|, each sequence's derivative by central differences."""
    model = float64_gpt(tiny_gpt(n_layers=2, n_heads=3, d_model=24))
    batches = [batch(seed=1, B=3), batch(seed=2, B=2)]

    def loss64(m, b):  # GPT's own loss casts logits to float32; keep float64
        return F.cross_entropy(m(b[0])[0].flatten(0, 1), b[1].flatten())

    got = P.head_importance(model, batches, loss_fn=loss64)
    eps = 1e-5
    want = torch.zeros(2, 3, dtype=torch.float64)
    sequences = [(x[i : i + 1], y[i : i + 1]) for x, y in batches for i in range(x.shape[0])]
    for seq in sequences:
        for layer in range(2):
            for head in range(3):
                losses = []
                for sign in (+1, -1):
                    mask = torch.ones(2, 3, dtype=torch.float64)
                    mask[layer, head] += sign * eps
                    with torch.no_grad(), P.head_mask(model, mask):
                        losses.append(loss64(model, seq).item())
                want[layer, head] += abs(losses[0] - losses[1]) / (2 * eps) / len(sequences)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-9)
    assert want.min() > 0


def test_per_sequence_gates_mask_each_sequence_separately():
    model = tiny_gpt()
    x, _ = batch(B=2)
    gates = torch.ones(3, 2, 4)  # (L, B, H)
    gates[1, 0, 2] = 0.0  # sequence 0 loses head 2 of layer 1; sequence 1 keeps everything
    single = torch.ones(3, 4)
    single[1, 2] = 0.0
    with torch.no_grad():
        with P.head_mask(model, gates):
            both = model(x)[0]
        with P.head_mask(model, single):
            first = model(x[:1])[0]
        torch.testing.assert_close(both[:1], first, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(both[1:], model(x[1:])[0], atol=1e-6, rtol=1e-5)


def test_importance_scores_are_deterministic_and_normalized_per_layer():
    model = tiny_gpt()
    batches = [batch(seed=s) for s in (1, 2, 3)]
    a, b = P.head_importance(model, batches, normalize=True), P.head_importance(model, batches, normalize=True)
    assert torch.equal(a, b)
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(3))
    assert all(p.grad is None for p in model.parameters())  # the model's parameters got no gradient


def test_magnitude_importance_is_the_norm_of_each_heads_slices():
    attn = MultiHeadAttention(12, 3)
    w_q, w_k, w_v = attn.qkv.weight.detach().split(12)
    w_o = attn.out.weight.detach()
    want = torch.stack(
        [
            torch.cat(
                [
                    w_q[4 * h : 4 * h + 4].flatten(),
                    w_k[4 * h : 4 * h + 4].flatten(),
                    w_v[4 * h : 4 * h + 4].flatten(),
                    w_o[:, 4 * h : 4 * h + 4].flatten(),
                ]
            ).norm()
            for h in range(3)
        ]
    )
    torch.testing.assert_close(P.head_weight_norms(attn), want)


def test_heads_to_prune_takes_the_lowest_and_keeps_one_head_per_layer():
    scores = torch.tensor([[0.1, 0.2, 0.9], [0.05, 0.06, 0.07]])
    assert P.heads_to_prune(scores, 2) == {1: [0, 1]}
    assert P.heads_to_prune(scores, 3) == {0: [0], 1: [0, 1]}  # 0.07 would empty layer 1: 0.1 goes instead
    assert P.heads_to_prune(scores, 4) == {0: [0, 1], 1: [0, 1]}
    assert P.heads_to_prune(scores, 2, per_layer=True) == {0: [0, 1], 1: [0, 1]}
    assert P.heads_to_prune(scores, 1, per_layer=True) == {0: [0], 1: [0]}
    with pytest.raises(ValueError, match=r"n must be an int in \[0, 4\] \(one head stays in each of the 2 layers\)"):
        P.heads_to_prune(scores, 5)
    with pytest.raises(ValueError, match=r"n must be an int in \[0, 2\] \(per layer: one of its 3 heads stays\)"):
        P.heads_to_prune(scores, 3, per_layer=True)


# ----------------------------------------------------------------------------- unstructured pruning
def test_magnitude_prune_zeroes_the_smallest_weights_globally():
    model = tiny_gpt()
    pruned = P.magnitude_prune(model, 0.4)
    assert P.sparsity(pruned) == pytest.approx(0.4, abs=1e-3)
    mags = torch.cat([m.weight.detach().abs().flatten() for m, _ in P.prunable_weights(model)])
    threshold = mags.kthvalue(int(round(0.4 * mags.numel()))).values  # the largest weight removed
    for (orig, _), (new, _) in zip(P.prunable_weights(model), P.prunable_weights(pruned)):
        w, w2 = orig.weight.detach(), new.weight.detach()
        assert torch.equal(w2 == 0, w.abs() <= threshold)
        assert torch.equal(w2[w2 != 0], w[w2 != 0])
    assert P.sparsity(model) == 0.0


def test_magnitude_prune_with_mask_attached_computes_the_same():
    model = tiny_gpt()
    x, _ = batch()
    a, b = P.magnitude_prune(model, 0.5), P.magnitude_prune(model, 0.5, permanent=False)
    with torch.no_grad():
        torch.testing.assert_close(a(x)[0], b(x)[0])
    with pytest.raises(ValueError, match=r"amount must be a number in \[0, 1\] \(the fraction of block weights"):
        P.magnitude_prune(model, 1.5)


def test_count_parameters_counts_removed_heads_and_zeros():
    model = tiny_gpt()
    assert P.count_parameters(model) == model.num_params()
    d, d_head = 32, 8
    pruned = P.prune_heads(model, {0: [0, 1]})  # per head: 3 d_head rows (+ bias) of qkv, d_head columns of W_O
    assert P.count_parameters(model) - P.count_parameters(pruned) == 2 * (3 * d_head * (d + 1) + d * d_head)
    sparse = P.magnitude_prune(model, 0.5)
    n_block = sum(m.weight.numel() for m, _ in P.prunable_weights(model))
    assert P.count_parameters(model, nonzero=True) - P.count_parameters(sparse, nonzero=True) == n_block // 2
    masked = P.magnitude_prune(model, 0.5, permanent=False)  # weight_orig stays dense; the weight used is not
    assert P.count_parameters(masked, nonzero=True) == P.count_parameters(sparse, nonzero=True)


def test_magnitude_prune_takes_a_model_whose_weights_generate_packed():
    """generate packs a model's weights in place (column-major, not contiguous); torch's prune flattens weights with
    .view, so magnitude_prune works on a row-major copy and leaves the model it was given as it was."""
    from transformer_lib.serving.weight_layout import is_packed

    model = tiny_gpt().eval()
    generate(model, batch()[0][:1, :4], 2)  # on a CPU: packs the model's weights
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(is_packed(m.weight) for m in linears)
    pruned = P.magnitude_prune(model, 0.5)
    assert all(is_packed(m.weight) for m in linears)  # the original is untouched
    weights = [m.weight for m, _ in P.prunable_weights(pruned)]
    zeros, total = sum(int((w == 0).sum()) for w in weights), sum(w.numel() for w in weights)
    assert abs(zeros - total // 2) <= 1
