"""Sliding-window attention (``GPTConfig(window=...)``) and its cache.

The windowed attention is checked against PyTorch's ``F.scaled_dot_product_attention`` given a band mask built
here element by element; the windowed model decodes with every cache (``'sliding'`` keeps only the last ``window``
positions) exactly as it recomputes the whole sequence without a cache, well past the window.
"""

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.serving.decoding import decode_step
from transformer_lib.serving.generation import generate
from transformer_lib.serving.kv_cache import SlidingWindowCache, kv_cache_bytes
from transformer_lib.blocks.layers import DecoderLayer
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT, init_weights
from transformer_lib.blocks.cached_attention import CachedSelfAttention
from transformer_lib.blocks.grouped_query import GroupedQueryAttention
from transformer_lib.compression.pruning import prune_heads

V, BLOCK, WINDOW = 23, 48, 5
TOL = dict(rtol=1e-4, atol=1e-4)


def band(t: int, window: int) -> torch.Tensor:
    """The reference mask, one element at a time: query i sees key j when j <= i and i - j < window."""
    return torch.tensor([[j <= i and i - j < window for j in range(t)] for i in range(t)])


def windowed_gpt(positional="learned", window=WINDOW, n_kv_heads=None, seed=0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(
        GPTConfig(
            vocab_size=V,
            block_size=BLOCK,
            n_layers=2,
            n_heads=4,
            d_model=32,
            positional=positional,
            n_kv_heads=n_kv_heads,
            window=window,
        )
    )
    model.apply(lambda m: init_weights(m, std=0.3))  # peaked attention: a wrong key shows
    return model.eval()


def ids(shape, seed):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("window", [1, 3, 7, 12])
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_windowed_attention_equals_sdpa_with_an_explicit_band_mask(window, n_kv_heads):
    torch.manual_seed(1)
    if n_kv_heads is None:
        attn = CachedSelfAttention(16, 4, window=window).eval()
    else:
        attn = GroupedQueryAttention(16, 4, n_kv_heads, window=window).eval()
    x = torch.randn(2, 12, 16)
    q, k, v = attn.project_qkv(x)  # (B, H, T, d_head), k/v (B, H_kv, T, d_head)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=band(12, window), enable_gqa=n_kv_heads is not None)
    want = attn.out(want.transpose(1, 2).reshape(2, 12, 16))
    fast, _ = attn(x, is_causal=True)
    taught, weights = attn(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(fast, want, **TOL)
    torch.testing.assert_close(taught, want, **TOL)
    assert torch.all(weights[:, :, ~band(12, window)] == 0)  # no weight outside the band


def test_windowed_block_equals_a_full_block_given_the_band_as_its_mask():
    torch.manual_seed(2)
    attn = CachedSelfAttention(16, 4, window=4)
    windowed = DecoderLayer(16, 4, 32, norm_first=True, cross_attention=False, self_attn=attn).eval()
    full = DecoderLayer(16, 4, 32, norm_first=True, cross_attention=False).eval()
    full.load_state_dict(windowed.state_dict())
    x = torch.randn(3, 10, 16)
    torch.testing.assert_close(windowed(x), full(x, self_mask=band(10, 4), is_causal=False), **TOL)


def test_a_window_changes_only_the_positions_that_reach_past_it():
    windowed, full = windowed_gpt(), windowed_gpt(window=None)  # same seed: same weights
    x = ids((2, 20), seed=3)
    a, b = windowed(x)[0], full(x)[0]
    torch.testing.assert_close(a[:, :WINDOW], b[:, :WINDOW], **TOL)  # these see their whole past anyway
    assert (a[:, WINDOW:] - b[:, WINDOW:]).abs().amax(-1).min() > 1e-3  # every later position differs
    big = windowed_gpt(window=BLOCK)  # a window as long as the context is full causal attention
    torch.testing.assert_close(big(x)[0], b, **TOL)


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True])
def test_bad_window_raises_a_value_error_naming_it(bad):
    """An int below 1 is a ValueError; another type (a float, a string, a bool) a TypeError naming the type."""
    error, got = (ValueError, f"got {bad!r}") if type(bad) is int else (TypeError, f"got {type(bad).__name__} {bad!r}")
    with pytest.raises(error, match=rf"GPTConfig.window must be an int >= 1 or None \(full attention\), {got}$"):
        GPTConfig(vocab_size=V, window=bad)
    with pytest.raises(error, match=rf"window must be an int >= 1 .* or None \(full attention\), {got}$"):
        CachedSelfAttention(16, 4, window=bad)
    with pytest.raises(error, match=rf"window must be an int >= 1 .*, {got}$"):
        SlidingWindowCache(bad)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "none"])
@pytest.mark.parametrize("cache", ["sliding", "static", "dynamic"])
def test_windowed_model_decodes_with_a_cache_as_it_recomputes(positional, cache):
    model = windowed_gpt(positional)
    prompt = ids((2, 7), seed=4)  # 7 + 30 tokens: six windows past the prompt
    want, want_logits = generate(model, prompt, 30, use_cache=False, return_logits=True)
    got, got_logits = generate(model, prompt, 30, cache_implementation=cache, return_logits=True)
    assert torch.equal(got, want)
    torch.testing.assert_close(got_logits, want_logits, **TOL)


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_left_padded_windowed_rows_generate_what_each_prompt_generates_alone(positional):
    model = windowed_gpt(positional)
    long, short = ids((1, 8), seed=9), ids((1, 3), seed=10)
    prompts = torch.cat([long, torch.cat([torch.zeros(1, 5, dtype=torch.long), short], dim=1)])  # (2, 8)
    mask = torch.tensor([[True] * 8, [False] * 5 + [True] * 3])
    got = generate(model, prompts, 20, attention_mask=mask)
    assert torch.equal(got[0, 8:], generate(model, long, 20, use_cache=False)[0, 8:])
    assert torch.equal(got[1, 8:], generate(model, short, 20, use_cache=False)[0, 3:])


@pytest.mark.cuda
@pytest.mark.parametrize("cache", ["sliding", "static"])
def test_windowed_model_decodes_as_it_recomputes_on_cuda(cache):
    model = GPT(windowed_gpt("rope").cfg).cuda().eval()
    model.load_state_dict(windowed_gpt("rope").state_dict())
    prompt = ids((2, 7), seed=4).cuda()
    want, want_logits = generate(model, prompt, 30, use_cache=False, return_logits=True)
    got, got_logits = generate(model, prompt, 30, cache_implementation=cache, return_logits=True)
    assert torch.equal(got, want)
    torch.testing.assert_close(got_logits, want_logits, **TOL)


def test_alibi_windowed_model_decodes_with_a_full_cache():
    model = windowed_gpt("alibi", n_kv_heads=2)
    prompt = ids((2, 3), seed=5)
    assert torch.equal(generate(model, prompt, 25), generate(model, prompt, 25, use_cache=False))


def test_sliding_cache_keeps_only_the_window_and_counts_every_position():
    model = windowed_gpt()
    cache, x = SlidingWindowCache(WINDOW), ids((2, 9), seed=6)
    model(x, cache=cache)
    for t in range(11):
        model(ids((2, 1), seed=t), cache=cache)
    layers, heads, d_head = model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_model // model.cfg.n_heads
    assert [cache.get_seq_length(i) for i in range(layers)] == [20] * layers
    assert [cache.held(i) for i in range(layers)] == [WINDOW] * layers
    assert cache.nbytes() == kv_cache_bytes(layers, heads, d_head, WINDOW, batch_size=2, bytes_per_element=4)


def test_decode_step_on_a_windowed_model_equals_its_forward():
    model = windowed_gpt()
    x = ids((2, 12), seed=7)
    cache = SlidingWindowCache(WINDOW)
    model(x[:, :11], cache=cache)
    torch.testing.assert_close(decode_step(model, x[:, 11:], cache), model(x)[0][:, -1], **TOL)


def test_sliding_cache_refuses_what_it_cannot_serve():
    with pytest.raises(ValueError, match=r"cache_implementation='sliding' needs a model with sliding-window attention"):
        generate(windowed_gpt(window=None), ids((1, 3), seed=8), 4, cache_implementation="sliding")
    with pytest.raises(ValueError, match=r"cache_implementation='sliding' takes no attention_mask and no ALiBi"):
        generate(
            windowed_gpt(),
            ids((2, 3), seed=8),
            4,
            cache_implementation="sliding",
            attention_mask=torch.tensor([[False, True, True], [True, True, True]]),
        )
    with pytest.raises(ValueError, match=r"cache_implementation='sliding' takes no attention_mask and no ALiBi"):
        generate(windowed_gpt("alibi"), ids((1, 3), seed=8), 4, cache_implementation="sliding")


def test_pruning_heads_keeps_the_window():
    model = windowed_gpt()
    pruned = prune_heads(model, {0: [1], 1: [0, 2]})
    assert all(block.self_attn.window == WINDOW for block in pruned.blocks)
    prompt = ids((1, 4), seed=11)
    assert torch.equal(generate(pruned, prompt, 20), generate(pruned, prompt, 20, use_cache=False))
