"""The int8 KV cache: its rounding (against PyTorch's own per-channel int8 quantizer and the half-step bound), its
bytes (closed form against the float caches), and what it does to the committed book GPT's next-token
distributions on held-out text (small but non-zero KL, nearly always the same top token)."""

import pytest
import torch

from transformer_lib.book_models.checkpoints import load_shakespeare_gpt
from transformer_lib.data.corpus import shakespeare_split
from transformer_lib.serving.kv_cache import DynamicCache
from transformer_lib.serving.quantized_cache import (
    QuantizedCache,
    dequantize_kv,
    kv_quantization_effect,
    quantize_kv,
    quantized_kv_cache_bytes,
)

B, H_KV, D, L = 2, 3, 16, 2
CHUNKS = (5, 1, 2, 1)


def vectors(shape, seed):
    """Vectors of very different sizes (as keys are), one of them all zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-3, 2, shape[-2])[:, None]
    x[..., 0, :] = 0.0
    return x


def test_int8_cache_rounds_as_pytorchs_per_channel_fake_quantizer():
    x = vectors((B, H_KV, 7, D), seed=0)
    q, scale = quantize_kv(x)
    assert q.dtype == torch.int8 and scale.shape == (B, H_KV, 7, 1)  # one scale per (batch, head, position)
    assert int(q.abs().max()) == 127
    flat = x.reshape(-1, D)  # one "channel" per vector, symmetric int8 in [-127, 127]
    scales = (flat.abs().amax(-1) / 127).clamp_min(1e-30)
    ref = torch.fake_quantize_per_channel_affine(
        flat, scales, torch.zeros(len(flat), dtype=torch.int32), 0, -127, 127
    )  # quantize then dequantize, PyTorch's kernel
    assert torch.equal(dequantize_kv(q, scale).reshape(-1, D), ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dequantized_error_is_at_most_half_a_step(dtype):
    x = vectors((B, H_KV, 9, D), seed=1).to(dtype)
    q, scale = quantize_kv(x)
    back = dequantize_kv(q, scale, torch.float32)
    err = (back - x.float()).abs()  # (B, H, T, D)
    assert torch.all(err <= scale / 2 + x.float().abs() * 1e-6)  # half a step, plus fp32 rounding of scale * q
    assert torch.all(back[..., 0, :] == 0)  # a zero vector stays zero (no 0/0)
    assert dequantize_kv(q, scale, dtype).dtype == dtype


@pytest.mark.cuda
def test_int8_cache_on_cuda_stays_within_half_a_step():
    x = vectors((B, H_KV, 9, D), seed=1).to("cuda", torch.bfloat16)
    k, _ = QuantizedCache().update(x, x, 0)
    q, scale = quantize_kv(x)
    assert k.device.type == "cuda" and k.dtype == torch.bfloat16 and q.device.type == "cuda"
    assert torch.all((dequantize_kv(q, scale) - x.float()).abs() <= scale / 2 + x.float().abs() * 1e-6)


def test_quantized_cache_returns_every_position_dequantized():
    cache, written = QuantizedCache(), [[] for _ in range(L)]
    for step, t in enumerate(CHUNKS):
        for layer in range(L):
            k, v = vectors((B, H_KV, t, D), seed=10 * step + layer), vectors((B, H_KV, t, D), seed=99 + step)
            written[layer].append((k, v))
            got_k, got_v = cache.update(k, v, layer)
            all_k = torch.cat([kk for kk, _ in written[layer]], dim=2)
            all_v = torch.cat([vv for _, vv in written[layer]], dim=2)
            assert torch.equal(got_k, dequantize_kv(*quantize_kv(all_k)))
            assert torch.equal(got_v, dequantize_kv(*quantize_kv(all_v)))
    assert cache.get_seq_length(1) == sum(CHUNKS)
    with pytest.raises(ValueError, match=r"layer_idx must be an int in \[0, 2\] \(no layer skipped: 2 held\), got 3"):
        cache.update(torch.zeros(B, H_KV, 1, D), torch.zeros(B, H_KV, 1, D), 3)


@pytest.mark.parametrize("float_dtype, float_bytes", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_int8_cache_bytes_against_the_float_cache(float_dtype, float_bytes):
    T = sum(CHUNKS)
    int8, plain = QuantizedCache(), DynamicCache()
    for t in CHUNKS:
        for layer in range(L):
            k = torch.randn(B, H_KV, t, D, dtype=float_dtype)
            int8.update(k, k, layer)
            plain.update(k, k, layer)
    vectors_held = 2 * L * B * H_KV * T  # K and V, every layer, batch row, head and position
    assert int8.nbytes() == vectors_held * (D * 1 + 4) == quantized_kv_cache_bytes(L, H_KV, D, T, B)
    assert plain.nbytes() == vectors_held * D * float_bytes
    assert int8.nbytes() / plain.nbytes() == pytest.approx((D + 4) / (D * float_bytes))


def test_int8_cache_barely_moves_the_book_gpts_next_token_distribution():
    model, tok = load_shakespeare_gpt(device="cpu")
    val_text = shakespeare_split()[1]
    ids = torch.stack([tok.encode_tensor(val_text[start : start + 600])[:96] for start in (0, 40_000)])  # held out
    effect = kv_quantization_effect(model, ids, prefill=8)
    assert effect.positions == 2 * (96 - 8)
    assert 1e-8 < effect.kl_mean < 1e-3  # not free, but tiny (4.4e-5 nats when written)
    assert effect.kl_max < 1e-2
    assert effect.top1_agreement >= 0.95  # 1.0 when written (0.99 over other held-out windows)
    d_head = model.cfg.d_model // model.cfg.n_heads
    held = 2 * model.cfg.n_layers * 2 * model.cfg.n_heads * 95  # vectors after the last step (95 positions)
    assert effect.float_bytes == held * d_head * 4 and effect.int8_bytes == held * (d_head + 4)


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match=r"x must be a floating-point tensor, got torch.int64"):
        quantize_kv(torch.ones(2, 3, dtype=torch.long))
    ids = torch.zeros(1, 5, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"prefill must be an int in \[1, 4\] \(T=5: at least one token left to decode\)"
    ):
        kv_quantization_effect(None, ids, prefill=5)
    with pytest.raises(ValueError, match=r"ids must be a tensor of shape \(B, T\) \(token ids\), got \(5,\)"):
        kv_quantization_effect(None, torch.zeros(5))
    with pytest.raises(ValueError, match="seq_len must be an int >= 0, got -1"):
        quantized_kv_cache_bytes(1, 1, 1, -1)


def test_a_refused_update_leaves_every_store_as_it_was():
    cache = QuantizedCache()
    k, v = vectors((2, 3, 4, 8), seed=1), vectors((2, 3, 4, 8), seed=2)
    cache.update(k, v, 0)
    before = [t.clone() for t in cache.keys + cache.values + cache.key_scales + cache.value_scales]
    new_k, new_v = vectors((2, 3, 1, 8), seed=3), vectors((2, 3, 1, 8), seed=4)
    with pytest.raises(
        ValueError, match=r"v must be a tensor of shape \(2, 3, any, 8\) \(layer 0's .*\), got \(2, 3, 1, 7\)"
    ):
        cache.update(new_k, new_v[..., :7], 0)
    with pytest.raises(
        ValueError, match=r"k must be a tensor of shape \(2, 3, any, 8\) \(layer 0's .*\), got \(1, 3, 1, 8\)"
    ):
        cache.update(new_k[:1], new_v[:1], 0)
    after = cache.keys + cache.values + cache.key_scales + cache.value_scales
    assert cache.get_seq_length(0) == 4 and all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
    got_k, got_v = cache.update(new_k, new_v, 0)
    assert got_k.shape == got_v.shape == (2, 3, 5, 8) and cache.get_seq_length(0) == 5
