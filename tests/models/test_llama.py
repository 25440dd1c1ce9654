"""The LLaMA pieces against independent references (PyTorch built-ins, written-out formulas) and the whole
LLaMA-style decoder against Hugging Face's ``LlamaForCausalLM`` on the same (random) weights, offline."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.blocks.activations import SwiGLU, gelu, silu, swiglu_hidden
from transformer_lib.serving.generation import generate
from transformer_lib.serving.kv_cache import DynamicCache, StaticCache, kv_cache_bytes
from transformer_lib.models.llama import (
    HalfSplitRotary,
    Llama,
    LlamaConfig,
    config_from_hf,
    half_split_order,
    hf_llama_to_ours,
    rotate_half,
)
from transformer_lib.blocks.grouped_query import GroupedQueryAttention
from transformer_lib.blocks.norms import RMSNorm, rms_norm
from transformer_lib.blocks.positional import RotaryEmbedding

transformers = pytest.importorskip("transformers")


# ----------------------------------------------------------------------------- GELU, SiLU, SwiGLU
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    assert torch.allclose(gelu(x, approximate), F.gelu(x, approximate=approximate), atol=1e-12)


def test_gelu_tanh_is_close_to_exact_but_not_equal():
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    diff = (gelu(x, "tanh") - gelu(x)).abs().max()
    assert 1e-5 < diff < 1e-3


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate must be one of"):
        gelu(torch.zeros(3), "erf")


def test_silu_matches_torch():
    x = torch.randn(1000, dtype=torch.float64) * 4
    assert torch.allclose(silu(x), F.silu(x))


def test_swiglu_equals_written_out_formula():
    ffn = SwiGLU(16, 40)
    x = torch.randn(2, 5, 16)
    wg, wu, wd = ffn.gate.weight, ffn.up.weight, ffn.down.weight
    h = x @ wg.T
    expected = ((h * torch.sigmoid(h)) * (x @ wu.T)) @ wd.T
    assert torch.allclose(ffn(x), expected, atol=1e-6)
    assert ffn.gate.bias is None and ffn.up.bias is None and ffn.down.bias is None


def test_swiglu_hidden_gives_llama_7b_and_13b_sizes():
    # Touvron et al. 2023, table 2 dimensions; Meta's model.py rounds 2/3 * 4d up to a multiple of 256
    assert swiglu_hidden(4096) == 11008
    assert swiglu_hidden(5120) == 13824


def test_swiglu_has_the_parameters_of_a_4x_ffn_at_two_thirds_width():
    d = 96
    gated = SwiGLU(d, 2 * 4 * d // 3)
    plain = 2 * d * 4 * d
    assert sum(p.numel() for p in gated.parameters()) == plain


def test_swiglu_matches_hf_llama_mlp():
    cfg = transformers.LlamaConfig(hidden_size=16, intermediate_size=40, num_attention_heads=2)
    ref = transformers.models.llama.modeling_llama.LlamaMLP(cfg)
    ffn = SwiGLU(16, 40)
    ffn.gate.weight.data.copy_(ref.gate_proj.weight)
    ffn.up.weight.data.copy_(ref.up_proj.weight)
    ffn.down.weight.data.copy_(ref.down_proj.weight)
    x = torch.randn(3, 7, 16)
    assert torch.allclose(ffn(x), ref(x), atol=1e-6)


# ----------------------------------------------------------------------------- RMSNorm
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_matches_torch(dtype):
    x = torch.randn(4, 9, 32, dtype=dtype) * 3 + 1
    ref = torch.nn.RMSNorm(32, eps=1e-6, dtype=dtype)
    ref.weight.data.uniform_(0.5, 1.5)
    ours = RMSNorm(32, eps=1e-6).to(dtype)
    ours.weight.data.copy_(ref.weight)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    assert torch.allclose(ours(x), ref(x), atol=tol)
    assert torch.allclose(rms_norm(x, ref.weight, 1e-6), ref(x), atol=tol)


def test_rms_norm_does_not_centre_unlike_layer_norm():
    x = torch.randn(5, 64) + 3.0  # a large mean
    y = rms_norm(x, torch.ones(64))
    assert torch.allclose(y.pow(2).mean(-1), torch.ones(5), atol=1e-4)  # unit root mean square
    assert (y.mean(-1) > 0.5).all()  # the mean is kept; LayerNorm would remove it
    assert torch.allclose(F.layer_norm(x, (64,)).mean(-1), torch.zeros(5), atol=1e-5)


def test_rms_norm_is_fp32_inside_for_bf16():
    x = (torch.randn(2, 3, 64) * 100).bfloat16()
    ours = RMSNorm(64).bfloat16()
    ref = torch.nn.RMSNorm(64, eps=1e-6)
    out = ours(x)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert torch.allclose(out.float(), ref(x.float()), atol=2e-2)


def test_rms_norm_rejects_wrong_width():
    with pytest.raises(
        ValueError, match=r"x must be a tensor of shape \(\.\.\., 8\) \(\.\.\., d_model\), got \(2, 7\)"
    ):
        RMSNorm(8)(torch.zeros(2, 7))


# ----------------------------------------------------------------------------- RoPE, half-split
def test_half_split_rope_matches_hf_llama_rotary():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=128)
    hf_rope = LlamaRotaryEmbedding(cfg)
    q, k = torch.randn(2, 4, 50, 16), torch.randn(2, 4, 50, 16)
    pos = torch.arange(7, 57)[None].expand(2, -1)  # an offset, as after a cache of 7 tokens
    cos, sin = hf_rope(q, pos)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    rope = HalfSplitRotary(16)
    assert torch.allclose(rope(q, offset=7), q_ref, atol=1e-5)
    assert torch.allclose(rope(k, offset=7), k_ref, atol=1e-5)


def test_half_split_is_interleaved_rope_on_permuted_features():
    d = 16
    x = torch.randn(2, 3, 10, d)
    order = half_split_order(d)
    interleaved = RotaryEmbedding(d)(x[..., order], offset=3)[..., torch.argsort(order)]
    assert torch.allclose(HalfSplitRotary(d)(x, offset=3), interleaved, atol=1e-6)
    assert not torch.allclose(HalfSplitRotary(d)(x), RotaryEmbedding(d)(x), atol=1e-3)  # the layouts differ


def test_half_split_scores_depend_only_on_distance():
    rope = HalfSplitRotary(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    s1 = rope(q, offset=10) @ rope(k, offset=4).transpose(-1, -2)
    s2 = rope(q, offset=36) @ rope(k, offset=30).transpose(-1, -2)
    assert torch.allclose(s1, s2, atol=1e-5)


def test_rotate_half():
    assert torch.equal(rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([-3.0, -4.0, 1.0, 2.0]))


def test_half_split_rope_rejects_wrong_head_size():
    with pytest.raises(ValueError, match="d_head=8"):
        HalfSplitRotary(8)(torch.zeros(1, 1, 3, 6))


# ----------------------------------------------------------------------------- grouped-query attention
def _reference_gqa(q, k, v, group):
    """softmax(q k^T / sqrt(d) + causal) v with every group of query heads reading one kv head, written out."""
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return s.softmax(-1) @ v


@pytest.mark.parametrize("n_kv_heads", [8, 2, 1])  # multi-head, grouped-query, multi-query
def test_grouped_query_attention_matches_written_out_reference(n_kv_heads):
    mha = GroupedQueryAttention(64, 8, n_kv_heads, bias=False)
    x = torch.randn(2, 11, 64)
    q, k, v = mha.project_qkv(x)
    assert k.shape == (2, n_kv_heads, 11, 8)
    expected = mha.out(mha.merge_heads(_reference_gqa(q, k, v, 8 // n_kv_heads)))
    assert torch.allclose(mha(x, is_causal=True)[0], expected, atol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_kv_heads != 8)
    assert torch.allclose(mha(x, is_causal=True)[0], mha.out(mha.merge_heads(sdpa)), atol=1e-5)


def test_grouped_query_attention_shrinks_parameters_and_cache():
    full, gqa, mqa = (GroupedQueryAttention(64, 8, h, bias=False) for h in (8, 2, 1))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(full) - count(gqa) == 2 * 64 * (64 - 16)  # W_K and W_V lose 6 of 8 heads
    assert count(mqa) == 2 * 64 * 64 + 2 * 64 * 8
    cache = DynamicCache()
    mqa(torch.randn(1, 5, 64), is_causal=True, cache=cache)
    assert cache.nbytes() == kv_cache_bytes(1, 1, 8, 5, bytes_per_element=4)


# ----------------------------------------------------------------------------- the decoder against Hugging Face
def _hf_pair(n_kv_heads=2, seed=0, **extra):
    torch.manual_seed(seed)
    hc = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=n_kv_heads,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        **extra,
    )
    hf = transformers.LlamaForCausalLM(hc).eval()
    with torch.no_grad():  # every weight away from its initial value (norms included)
        for p in hf.parameters():
            p.normal_(0, 0.1) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    hf.generation_config.eos_token_id = None  # random weights: token 2 (</s>) must not end Hugging Face's generate
    ours = Llama(config_from_hf(hc)).eval()
    ours.load_state_dict(hf_llama_to_ours(hf.state_dict(), hc.num_hidden_layers), strict=True)
    return hf, ours


@pytest.mark.parametrize("n_kv_heads", [2, 1, 4])
def test_logits_match_hf_llama(n_kv_heads):
    hf, ours = _hf_pair(n_kv_heads)
    ids = torch.randint(0, 97, (3, 33))
    with torch.no_grad():
        theirs = hf(ids).logits
        mine = ours(ids)[0]
    assert (mine - theirs).abs().max() < 1e-5
    assert theirs.abs().max() > 0.1  # not trivially zero


def test_logits_match_hf_llama_with_tied_embeddings_and_other_rope_base():
    hf, ours = _hf_pair(2, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    assert ours.lm_head.weight is ours.tok_emb.weight and ours.cfg.rope_base == 500000.0
    ids = torch.randint(0, 97, (2, 20))
    with torch.no_grad():
        assert (ours(ids)[0] - hf(ids).logits).abs().max() < 1e-5


def test_loss_matches_hf_llama():
    hf, ours = _hf_pair()
    ids = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        theirs = hf(ids, labels=ids).loss  # HF shifts labels inside
        mine = ours(ids[:, :-1], ids[:, 1:])[1]
    assert abs(float(mine) - float(theirs)) < 1e-5


def test_rename_table_places_every_weight():
    hf, ours = _hf_pair()
    renamed = hf_llama_to_ours(hf.state_dict(), 2)
    assert set(renamed) == set(ours.state_dict())
    with pytest.raises(ValueError, match="cannot place"):
        hf_llama_to_ours({**hf.state_dict(), "model.extra.weight": torch.zeros(1)}, 2)


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_cached_greedy_generation_equals_recomputation_and_hf(cache):
    hf, ours = _hf_pair()
    prompt = torch.randint(0, 97, (2, 6))
    cached = generate(ours, prompt, 24, use_cache=True, cache_implementation=cache)
    recomputed = generate(ours, prompt, 24, use_cache=False)
    assert torch.equal(cached, recomputed)
    theirs = hf.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False, pad_token_id=0
    )
    assert torch.equal(cached, theirs)


def test_cache_holds_kv_heads_only():
    _, ours = _hf_pair(n_kv_heads=1)
    cache = StaticCache.for_model(ours, 1, 16)
    ours(torch.randint(0, 97, (1, 5)), cache=cache)
    assert cache.keys[0].shape == (1, 1, 16, 16) and cache.get_seq_length(0) == 5


def test_cached_step_logits_equal_full_forward():
    _, ours = _hf_pair()
    ids = torch.randint(0, 97, (2, 12))
    cache = DynamicCache()
    with torch.no_grad():
        full = ours(ids)[0]
        first = ours(ids[:, :8], cache=cache)[0]
        steps = [ours(ids[:, t : t + 1], cache=cache)[0] for t in range(8, 12)]
    assert torch.allclose(torch.cat([first] + steps, dim=1), full, atol=1e-5)


def test_llama_has_no_biases_and_runs_in_bf16():
    model = Llama(LlamaConfig(vocab_size=50, n_layers=1, d_model=32, n_heads=4, n_kv_heads=2))
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    model = model.to(torch.bfloat16)
    logits, loss = model(torch.randint(0, 50, (2, 9)), torch.randint(0, 50, (2, 9)))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(loss)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(d_model=30, n_heads=4),
            r"d_model must be an int, a multiple of 8 \(n_heads=4 times an even d_head.*got 30",
        ),
        (dict(n_heads=4, n_kv_heads=3), r"n_heads must be an int, a multiple of 3 \(n_kv_heads=3 .*got 4"),
        (dict(n_experts=2, top_k=3), r"top_k must be an int in \[1, 2\] .*got 3"),
        (dict(n_layers=0), "n_layers"),
    ],
)
def test_config_errors_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LlamaConfig(vocab_size=10, **kwargs)


def test_bad_ids_raise():
    model = Llama(LlamaConfig(vocab_size=10, n_layers=1, d_model=16, n_heads=2))
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        model(torch.tensor([[3, 11]]))


def test_config_from_hf_refuses_biases_and_scaled_rope():
    with pytest.raises(ValueError, match="biases"):
        config_from_hf(transformers.LlamaConfig(attention_bias=True))
    with pytest.raises(ValueError, match="rope_type"):
        config_from_hf(
            transformers.LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
        )


@pytest.mark.cuda
def test_llama_matches_hf_on_cuda():
    hf, ours = _hf_pair()
    hf, ours = hf.cuda(), ours.cuda()
    ids = torch.randint(0, 97, (2, 20), device="cuda")
    with torch.no_grad():
        assert (ours(ids)[0] - hf(ids).logits).abs().max() < 1e-4


# ----------------------------------------------------------------------------- a refused call changes nothing
def _snapshot(cache):
    return [t.clone() for t in cache.keys + cache.values]


def _unchanged(cache, lengths, snapshot):
    held = [cache.get_seq_length(i) for i in range(len(lengths))]
    return held == lengths and all(torch.equal(a, b) for a, b in zip(cache.keys + cache.values, snapshot))


def test_failed_mask_check_leaves_the_cache_unchanged_and_a_retry_decodes():
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=50, n_layers=3, n_heads=4, n_kv_heads=2, d_model=32)).eval()
    prompt, token = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 1))
    cache, clean = DynamicCache(), DynamicCache()
    model(prompt, cache=cache)
    model(prompt, cache=clean)
    before = _snapshot(cache)
    with pytest.raises(ValueError, match=r"attention_mask must be a torch.bool tensor, got torch.int64"):
        model(token, cache=cache, attention_mask=torch.ones(2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask must be a tensor of shape \(2, 9\), got \(2, 8\)"):
        model(token, cache=cache, attention_mask=torch.ones(2, 8, dtype=torch.bool))
    assert _unchanged(cache, [8, 8, 8], before)
    mask = torch.ones(2, 9, dtype=torch.bool)
    torch.testing.assert_close(
        model(token, cache=cache, attention_mask=mask)[0], model(token, cache=clean, attention_mask=mask)[0]
    )
    assert [cache.get_seq_length(i) for i in range(3)] == [9, 9, 9]


def test_float_targets_are_refused_naming_targets():
    model = Llama(LlamaConfig(vocab_size=50, n_layers=1, n_heads=2, d_model=16))
    idx = torch.randint(0, 50, (2, 5))
    with pytest.raises(ValueError, match=r"targets must be an integer tensor.*got torch.float32"):
        model(idx, targets=idx.float())
    with pytest.raises(ValueError, match=r"targets must hold ids in \[0, 50\) or -100 \(ignored\), got 50"):
        model(idx, targets=torch.full((2, 5), 50))
    assert model(idx, targets=idx.masked_fill(idx > 25, -100))[1].isfinite()


@pytest.mark.parametrize("eps", [-1.0, 0.0, float("nan")])
def test_rms_norm_refuses_a_non_positive_eps(eps):
    with pytest.raises(ValueError, match=r"eps must be a finite number > 0 .*got"):
        rms_norm(torch.randn(2, 4), torch.ones(4), eps=eps)


def test_rms_norm_and_half_split_rope_refuse_integer_input():
    with pytest.raises(ValueError, match=r"x must be a floating-point tensor, got torch.int64"):
        rms_norm(torch.ones(2, 4, dtype=torch.long), torch.ones(4))
    with pytest.raises(ValueError, match=r"weight must be a tensor of shape \(4,\), got \(3,\)"):
        rms_norm(torch.ones(2, 4), torch.ones(3))
    with pytest.raises(ValueError, match=r"x must be a floating-point tensor, got torch.int64"):
        HalfSplitRotary(8)(torch.ones(1, 2, 3, 8, dtype=torch.long))
