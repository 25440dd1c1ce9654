"""The encoder-decoder Transformer and GPT: no position sees the future (and the test notices when it can), cached
decoding equals a full recompute, the Transformer's stacks equal torch's, bad input is rejected, dtypes are kept."""

import functools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.blocks.layers import load_decoder_layer_from_torch, load_encoder_layer_from_torch
from transformer_lib.blocks.masking import causal_mask
from transformer_lib.models.configs import POSITIONAL, GPTConfig, TransformerConfig
from transformer_lib.models.transformer import GPT, Transformer, init_weights
from transformer_lib.blocks.cached_attention import CachedSelfAttention
from transformer_lib.blocks.multihead import MultiHeadAttention

V, T_MAX = 11, 12  # vocabulary and context of the toy models
GPT_VARIANTS = list(POSITIONAL)


def sharpen_(model: nn.Module) -> nn.Module:
    """Re-initialise with std 0.3 instead of 0.02: attention is then far from uniform, so a leak is large."""
    model.apply(lambda m: init_weights(m, std=0.3))
    return model


@functools.lru_cache(maxsize=None)
def toy_gpt(positional: str) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=V, block_size=T_MAX, n_layers=2, n_heads=2, d_model=16, positional=positional)
    return sharpen_(GPT(cfg)).eval()


@functools.lru_cache(maxsize=None)
def toy_transformer(norm_first: bool = False) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(
        src_vocab_size=13,
        tgt_vocab_size=V,
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        max_len=T_MAX,
        norm_first=norm_first,
    )
    return sharpen_(Transformer(cfg)).eval()


def random_ids(shape, vocab, seed, low=0):
    return torch.randint(low, vocab, shape, generator=torch.Generator().manual_seed(seed))


def perturb_after(ids: torch.Tensor, t: int, seed: int) -> torch.Tensor:
    """A copy of ``ids`` in which every token after position t is replaced by a different token."""
    out = ids.clone()
    shift = random_ids(ids[:, t + 1 :].shape, V - 1, seed + 1) + 1  # in [1, V): never the same token
    out[:, t + 1 :] = (ids[:, t + 1 :] + shift) % V
    return out


def past_change(logits_fn, ids, t, seed):
    """Largest change of the outputs at positions <= t when the tokens after t change."""
    with torch.no_grad():
        a, b = logits_fn(ids), logits_fn(perturb_after(ids, t, seed))
    return (a[:, : t + 1] - b[:, : t + 1]).abs().max().item()


def gpt_logits(positional):
    return lambda ids: toy_gpt(positional)(ids)[0]


def transformer_logits(norm_first=False):
    src = random_ids((2, 7), 13, seed=99, low=1)
    return lambda tgt: toy_transformer(norm_first)(src, tgt)


def without_causal_mask(monkeypatch):
    """Make every MultiHeadAttention, cached or not, ignore ``is_causal`` (the bug the causality tests must catch)."""
    for cls in (MultiHeadAttention, CachedSelfAttention):
        forward = cls.forward

        def leaky_forward(self, *args, forward=forward, **kwargs):
            kwargs["is_causal"] = False
            return forward(self, *args, **kwargs)

        monkeypatch.setattr(cls, "forward", leaky_forward)


# ----------------------------------------------------------------------------- causality
@pytest.mark.parametrize("positional", GPT_VARIANTS)
@settings(max_examples=6, deadline=None)
@given(t=st.integers(0, T_MAX - 2), seed=st.integers(0, 2**16))
def test_gpt_positions_never_see_the_future(positional, t, seed):
    ids = random_ids((2, T_MAX), V, seed)
    assert past_change(gpt_logits(positional), ids, t, seed) <= 1e-6


@pytest.mark.parametrize("norm_first", [False, True])
@settings(max_examples=6, deadline=None)
@given(t=st.integers(0, T_MAX - 2), seed=st.integers(0, 2**16))
def test_transformer_decoder_positions_never_see_the_future(norm_first, t, seed):
    ids = random_ids((2, T_MAX), V, seed)
    assert past_change(transformer_logits(norm_first), ids, t, seed) <= 1e-6


@pytest.mark.parametrize("model", [f"gpt-{p}" for p in GPT_VARIANTS] + ["transformer"])
def test_causality_check_detects_a_missing_mask(model, monkeypatch):
    # Without the causal mask the same measurement must see the future leak in; otherwise the tests above prove nothing.
    fn = transformer_logits() if model == "transformer" else gpt_logits(model.removeprefix("gpt-"))
    ids = random_ids((2, T_MAX), V, seed=3)
    assert past_change(fn, ids, 4, seed=3) <= 1e-6
    without_causal_mask(monkeypatch)
    assert past_change(fn, ids, 4, seed=3) > 1e-3


# ----------------------------------------------------------------------------- cached decoding
@pytest.mark.parametrize("positional", GPT_VARIANTS)
def test_gpt_cached_decoding_matches_full_recompute(positional, make_cache):
    model = toy_gpt(positional)
    ids = random_ids((2, 9), V, seed=5)
    with torch.no_grad():
        full, _ = model(ids)
        cache, steps = make_cache(), []
        for chunk in (ids[:, :4], ids[:, 4:5], ids[:, 5:7], ids[:, 7:8], ids[:, 8:]):  # a prompt, then new tokens
            steps.append(model(chunk, cache=cache)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_transformer_cached_decoding_matches_full_recompute(make_cache):
    model = toy_transformer()
    src = random_ids((2, 7), 13, seed=6, low=1)
    src[1, 5:] = model.cfg.pad_id  # a padded source sentence
    tgt = random_ids((2, 8), V, seed=7)
    with torch.no_grad():
        attention_mask = src != model.cfg.pad_id
        memory = model.encode(src)
        full = model.decode(tgt, memory, attention_mask)
        torch.testing.assert_close(full, model(src, tgt))
        cache = make_cache()
        steps = [model.decode(tgt[:, i : i + 1], memory, attention_mask, cache=cache) for i in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- against torch.nn
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_stacks_match_torch(norm_first):
    model = toy_transformer(norm_first)
    c = model.cfg
    make = dict(
        d_model=c.d_model, nhead=c.n_heads, dim_feedforward=c.d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    torch.manual_seed(1)
    final = (lambda: nn.LayerNorm(c.d_model)) if norm_first else (lambda: None)  # pre-norm stacks end with a norm
    enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**make), c.n_encoder_layers, norm=final(), enable_nested_tensor=False
    ).eval()
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**make), c.n_decoder_layers, norm=final()).eval()
    with torch.no_grad():
        for p in [*enc.parameters(), *dec.parameters()]:
            p.add_(torch.randn(p.shape) * 0.1)  # layers must differ from each other (the stacks deep-copy one)
    ours = Transformer(c).eval()
    ours.load_state_dict(model.state_dict())
    for mine, theirs in zip(ours.encoder, enc.layers):
        load_encoder_layer_from_torch(mine, theirs)
    for mine, theirs in zip(ours.decoder, dec.layers):
        load_decoder_layer_from_torch(mine, theirs)
    if norm_first:
        ours.enc_norm.load_state_dict(enc.norm.state_dict())
        ours.dec_norm.load_state_dict(dec.norm.state_dict())

    src = random_ids((2, 7), 13, seed=8, low=1)
    src[0, 4:] = c.pad_id
    tgt = random_ids((2, 6), V, seed=9)
    src_mask = src != c.pad_id
    with torch.no_grad():
        x_src, x_tgt = ours.embed(ours.src_emb, src), ours.embed(ours.tgt_emb, tgt)
        memory = enc(x_src, src_key_padding_mask=~src_mask)
        hidden = dec(x_tgt, memory, tgt_mask=~causal_mask(6), memory_key_padding_mask=~src_mask)
        expected = ours.generator(hidden)
        torch.testing.assert_close(ours.encode(src), memory, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours(src, tgt), expected, atol=1e-5, rtol=1e-5)


def test_gpt_loss_is_the_mean_cross_entropy_ignoring_minus_100():
    model = toy_gpt("learned")
    ids, targets = random_ids((2, 8), V, seed=10), random_ids((2, 8), V, seed=11)
    targets[0, :3] = -100
    with torch.no_grad():
        logits, loss = model(ids, targets)
    logp = logits.double().log_softmax(-1)
    keep = targets != -100
    expected = -logp[keep].gather(-1, targets[keep][:, None]).mean()
    torch.testing.assert_close(loss.double(), expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_gpt_rejects_a_sequence_longer_than_block_size(positional, make_cache):
    model = toy_gpt(positional)
    with pytest.raises(
        ValueError, match=r"sequence length past \+ T must be an int <= 12 \(block_size, .*past=0, T=13\), got 13"
    ):
        model(random_ids((1, T_MAX + 1), V, seed=0))
    cache = make_cache()
    model(random_ids((1, 10), V, seed=0), cache=cache)
    with pytest.raises(
        ValueError, match=r"sequence length past \+ T must be an int <= 12 \(block_size, .*past=10, T=3\), got 13"
    ):
        model(random_ids((1, 3), V, seed=0), cache=cache)


def test_transformer_rejects_a_sequence_longer_than_max_len():
    model = toy_transformer()
    with pytest.raises(ValueError, match=r"offset \+ T must be an int <= 12 \(the sinusoidal table's max_len.*got 13"):
        model(random_ids((1, 5), 13, seed=0, low=1), random_ids((1, T_MAX + 1), V, seed=0))
    with pytest.raises(ValueError, match=r"offset \+ T must be an int <= 12 \(the sinusoidal table's max_len.*got 13"):
        model.encode(random_ids((1, T_MAX + 1), 13, seed=0, low=1))


def test_bad_configs_are_rejected():
    with pytest.raises(
        ValueError, match=r"GPTConfig\.d_model must be an int >= 1, a multiple of 4 \(n_heads=4 .*\), got 30"
    ):
        GPTConfig(vocab_size=V, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match=r"positional must be one of .*got 'bogus'"):
        GPTConfig(vocab_size=V, positional="bogus")
    with pytest.raises(
        ValueError, match=r"TransformerConfig\.d_model must be .*a multiple of 4 \(n_heads=4 .*\), got 30"
    ):
        Transformer(TransformerConfig(5, 5, d_model=30, n_heads=4, d_ff=8, n_encoder_layers=1, n_decoder_layers=1))


def test_bad_token_ids_are_rejected():
    model = toy_gpt("learned")
    with pytest.raises(ValueError, match=r"idx must hold ids in \[0, 11\), got 11"):
        model(torch.tensor([[0, 11]]))
    with pytest.raises(ValueError, match=r"idx must be an integer tensor \(int64, int32, ...\), got torch.float32"):
        model(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"idx must be a tensor of shape \(B, T\), got \(3,\)"):
        model(torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"src must hold ids in \[0, 13\), got 13"):
        toy_transformer()(torch.tensor([[13]]), torch.tensor([[1]]))


# ----------------------------------------------------------------------------- dtypes and devices
@pytest.mark.parametrize("positional", GPT_VARIANTS)
def test_gpt_runs_in_bf16_and_keeps_the_dtype(positional):
    model = toy_gpt(positional)
    ids = random_ids((2, 8), V, seed=12)
    with torch.no_grad():
        expected, _ = model(ids)
        half = GPT(model.cfg).eval()
        half.load_state_dict(model.state_dict())
        logits, _ = half.to(torch.bfloat16)(ids, need_weights=True)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), expected, atol=5e-2, rtol=5e-2)


def test_transformer_runs_in_bf16_and_keeps_the_dtype():
    model = toy_transformer()
    src, tgt = random_ids((2, 7), 13, seed=13, low=1), random_ids((2, 6), V, seed=14)
    with torch.no_grad():
        expected = model(src, tgt)
        half = Transformer(model.cfg).eval()
        half.load_state_dict(model.state_dict())
        logits = half.to(torch.bfloat16)(src, tgt)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), expected, atol=5e-2, rtol=5e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_multihead_and_gpt_on_cuda_match_fp32(dtype):
    device = torch.device("cuda")
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4).eval().to(device)
    x = torch.randn(2, 33, 64, device=device)
    keep = torch.ones(2, 33, dtype=torch.bool, device=device)
    keep[1, 20:] = False
    with torch.no_grad():
        ref, _ = mha(x, attention_mask=keep, is_causal=True)
        low = MultiHeadAttention(64, 4).eval().to(device, dtype)
        low.load_state_dict(mha.state_dict())
        for need_weights in (False, True):
            out, _ = low(x.to(dtype), attention_mask=keep, is_causal=True, need_weights=need_weights)
            assert out.dtype == dtype and out.device.type == "cuda"
            torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    for positional in GPT_VARIANTS:
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layers=2, n_heads=4, d_model=64, positional=positional)
        torch.manual_seed(0)
        model = GPT(cfg).eval().to(device)
        ids = torch.randint(0, V, (2, 32), device=device)
        with torch.no_grad():
            ref, _ = model(ids)
            low = GPT(cfg).eval().to(device, dtype)
            low.load_state_dict(model.state_dict())
            logits, _ = low(ids)
        assert logits.dtype == dtype and logits.device.type == "cuda"
        torch.testing.assert_close(logits.float(), ref, atol=5e-2, rtol=5e-2)


# ----------------------------------------------------------------------------- shared embeddings (paper, section 3.4)
def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # a shared tensor counted once


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's pre-norm encoder notice
@pytest.mark.parametrize("norm_first", [False, True])
def test_shared_model_counts_torch_transformer_core_plus_one_embedding(norm_first):
    d, h, d_ff, n_enc, n_dec, vocab = 512, 8, 2048, 6, 6, 37000  # the paper's base model (table 3, section 5.1)
    with torch.device("meta"):  # shapes only
        ours = Transformer(
            TransformerConfig(vocab, vocab, d, h, d_ff, n_enc, n_dec, norm_first=norm_first, share_embeddings=True)
        )
        core = nn.Transformer(d, h, n_enc, n_dec, d_ff, norm_first=norm_first, batch_first=True)  # biases on, as ours
    # What differs from torch's core, each listed:
    # - nn.Transformer always ends both stacks with a LayerNorm (weight and bias, d each); ours does only when
    #   pre-norm (a post-norm stack's output has just been normalized).
    torch_final_norms = 2 * 2 * d
    ours_final_norms = torch_final_norms if norm_first else 0
    # - the one matrix shared by both embeddings and the pre-softmax linear layer;
    embedding = vocab * d
    # - that pre-softmax linear layer's bias (one per token): nn.Transformer has no output layer;
    generator_bias = vocab
    # - positions are the sinusoidal table, a buffer: no parameters.
    assert not [name for name, _ in ours.named_parameters() if "pos" in name]
    assert n_params(ours) == n_params(core) - torch_final_norms + ours_final_norms + embedding + generator_bias


def test_shared_embeddings_are_one_matrix_whose_gradient_sums_its_three_uses():
    small = dict(d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    torch.manual_seed(0)
    shared = Transformer(TransformerConfig(9, 9, share_embeddings=True, **small))
    separate = Transformer(TransformerConfig(9, 9, **small))
    assert shared.src_emb.weight is shared.tgt_emb.weight is shared.generator.weight
    assert n_params(separate) - n_params(shared) == 2 * 9 * 16
    separate.load_state_dict(shared.state_dict())  # three separate copies of the one matrix
    src, tgt = random_ids((2, 5), 9, seed=0, low=1), random_ids((2, 4), 9, seed=1)
    out_shared, out_separate = shared(src, tgt), separate(src, tgt)
    torch.testing.assert_close(out_shared, out_separate)
    out_shared.square().sum().backward()
    out_separate.square().sum().backward()
    summed = separate.src_emb.weight.grad + separate.tgt_emb.weight.grad + separate.generator.weight.grad
    torch.testing.assert_close(shared.src_emb.weight.grad, summed)


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(
        ValueError, match=r"tgt_vocab_size must be 13 \(share_embeddings=True: .*src_vocab_size=13\), got 11"
    ):
        TransformerConfig(13, 11, share_embeddings=True)


def test_gpt_refuses_targets_outside_the_vocabulary_but_not_the_ignore_index():
    model = toy_gpt("learned")
    idx = random_ids((2, 5), V, seed=3)
    with pytest.raises(ValueError, match=rf"targets must hold ids in \[0, {V}\) or -100 \(ignored\), got {V}"):
        model(idx, targets=idx.masked_fill(idx == idx[0, 0], V))
    with pytest.raises(ValueError, match=r"targets must hold ids in .*, got -1"):
        model(idx, targets=idx - 1 - idx.max())
    with pytest.raises(ValueError, match=r"targets must be an integer tensor.*got torch.float32"):
        model(idx, targets=idx.float())
    with pytest.raises(ValueError, match=r"targets must be a tensor of shape \(2, 5\).*got \(2, 4\)"):
        model(idx, targets=idx[:, :4])
    ignored = idx.clone()
    ignored[:, :2] = -100
    logits, loss = model(idx, targets=ignored)
    torch.testing.assert_close(loss, F.cross_entropy(logits[:, 2:].flatten(0, 1), idx[:, 2:].flatten()))
    assert model(idx, targets=idx.int())[1] == model(idx, targets=idx)[1]  # int32 targets work as int64 ones
