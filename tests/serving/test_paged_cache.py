"""The paged KV cache and the continuous-batching toy.

References: a ``DynamicCache`` (plain concatenation) for what the cache returns; ``generate(..., use_cache=False)``
(each prompt alone, recomputed from scratch at every step) for what continuous batching decodes; closed-form
arithmetic and a ``StaticCache``'s allocated tensors for the memory a paged cache saves.
"""

import math

import pytest
import torch

from transformer_lib.serving.continuous_batching import Request, serve
from transformer_lib.serving.decoding import decode_step
from transformer_lib.serving.generation import generate
from transformer_lib.serving.kv_cache import DynamicCache, StaticCache
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT, init_weights
from transformer_lib.serving.paged_cache import PagedKVCache, memory_held

V, BLOCK = 23, 64
H_KV, D, L = 2, 4, 2


def toy_gpt(positional="learned", n_kv_heads=None, window=None) -> GPT:
    torch.manual_seed(0)
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
    model.apply(lambda m: init_weights(m, std=0.3))  # peaked attention: a wrong key or position shows
    return model.eval()


def kv(t, seed, b=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, H_KV, t, D, generator=g).to(dtype), torch.randn(b, H_KV, t, D, generator=g).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_cache_returns_what_a_concatenating_cache_returns(dtype):
    paged, plain = PagedKVCache(L, H_KV, D, n_blocks=8, block_size=3, dtype=dtype), DynamicCache()
    for seq in ("a", "b"):
        paged.add_sequence(seq)
    paged.set_active(["a", "b"])
    for step, t in enumerate((5, 1, 2, 1, 3)):  # chunks that cross block boundaries
        for layer in range(L):
            k, v = kv(t, seed=10 * step + layer, b=2, dtype=dtype)
            got, want = paged.update(k, v, layer), plain.update(k, v, layer)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert paged.get_seq_length(1) == 12 and paged.blocks_in_use() == 2 * math.ceil(12 / 3)


def test_rows_of_different_lengths_come_back_right_aligned_with_their_padding_mask():
    cache = PagedKVCache(1, H_KV, D, n_blocks=6, block_size=2)
    keys = {}
    for seq, t in (("long", 5), ("short", 2)):
        cache.add_sequence(seq)
        cache.set_active([seq])
        keys[seq] = kv(t, seed=t)[0]
        cache.update(keys[seq], keys[seq], 0)
    cache.set_active(["long", "short"])
    new = kv(1, seed=9, b=2)[0]
    mask = cache.attention_mask(1)
    got, _ = cache.update(new, new, 0)  # (2, H_kv, 6, d_head)
    assert got.shape == (2, H_KV, 6, D)
    assert torch.equal(got[0], torch.cat([keys["long"][0], new[0]], dim=1))
    assert torch.equal(got[1, :, 3:], torch.cat([keys["short"][0], new[1]], dim=1))
    assert torch.all(got[1, :, :3] == 0)
    assert mask.tolist() == [[True] * 6, [False] * 3 + [True] * 3]
    assert cache.positions().tolist() == [[6], [3]]


def test_freed_blocks_are_handed_out_again_and_the_pool_never_grows():
    cache = PagedKVCache(1, H_KV, D, n_blocks=3, block_size=4)
    cache.add_sequence("a")
    cache.set_active(["a"])
    cache.update(*kv(9, seed=1), 0)  # 9 positions: 3 blocks, the whole pool
    a_blocks = list(cache.block_tables["a"])
    cache.add_sequence("b")
    cache.set_active(["b"])
    with pytest.raises(
        ValueError,
        match=r"the block pool is full: seq_id='b' needs 1 more block\(s\) of 4 "
        r"positions for 2 positions, 0 of n_blocks=3 are free",
    ):
        cache.update(*kv(2, seed=2), 0)
    cache.free_sequence("a")
    assert cache.blocks_in_use() == 0
    cache.set_active(["b"])
    cache.update(*kv(2, seed=2), 0)
    assert cache.block_tables["b"][0] in a_blocks  # a freed block, handed out again
    assert cache.key_pools[0].shape[0] == 3 and cache.blocks_in_use() == 1


def _step(model, cache, seq_ids, tokens):
    """One batched decoding step of ``seq_ids``: logits ``(B, V)``."""
    cache.set_active(seq_ids)
    token = torch.tensor(tokens)[:, None]  # (B, 1)
    return decode_step(model, token, cache, position=cache.positions(), attention_mask=cache.attention_mask(1))


def _prefilled(model, prompts: dict) -> PagedKVCache:
    cache = PagedKVCache.for_model(model, n_blocks=4, block_size=4)
    for seq_id, prompt in prompts.items():
        cache.add_sequence(seq_id)
        cache.set_active([seq_id])
        model(prompt[None], cache=cache)
    return cache


def test_an_update_the_pool_cannot_hold_leaves_every_row_as_it_was():
    # a, b and c each fill one block of 4; one block is free: a's next token takes it, b's finds none. The failed
    # step must not advance a (house rule 6): after c is freed, the same step gives the logits of a cache that never
    # saw the failure.
    model = toy_gpt()
    g = torch.Generator().manual_seed(5)
    prompts = {s: torch.randint(0, V, (4,), generator=g) for s in "abc"}
    cache, never_failed = _prefilled(model, prompts), _prefilled(model, prompts)
    before = (
        {s: list(t) for s, t in cache.block_tables.items()},
        {s: list(n) for s, n in cache.lengths.items()},
        list(cache.free_blocks),
    )
    with pytest.raises(ValueError, match=r"the block pool is full: seq_id='b' needs 1 more block\(s\)"):
        _step(model, cache, ["a", "b"], [3, 7])
    assert (cache.block_tables, cache.lengths, cache.free_blocks) == before
    for c in (cache, never_failed):
        c.free_sequence("c")
    got, want = _step(model, cache, ["a", "b"], [3, 7]), _step(model, never_failed, ["a", "b"], [3, 7])
    assert torch.equal(got, want)
    with torch.no_grad():  # and what the model computes without a cache, to rounding
        uncached = model(
            torch.stack([torch.cat([prompts["a"], torch.tensor([3])]), torch.cat([prompts["b"], torch.tensor([7])])])
        )[0][:, -1]
    torch.testing.assert_close(got, uncached, rtol=1e-5, atol=1e-5)


def test_an_update_of_the_wrong_dtype_is_refused_before_any_row_is_written():
    cache = PagedKVCache(1, H_KV, D, n_blocks=4, block_size=2)
    cache.add_sequence("a")
    cache.set_active(["a"])
    k, v = kv(3, seed=1)
    with pytest.raises(
        ValueError,
        match=r"v must be a torch.float32 tensor, got torch.bfloat16",
    ):
        cache.update(k, v.bfloat16(), 0)
    assert cache.lengths["a"] == [0] and cache.blocks_in_use() == 0


def mixed_requests():
    """Prompts of different lengths, arriving at different steps, asking for different numbers of tokens."""
    g = torch.Generator().manual_seed(3)
    shapes = [(5, 12, 0), (2, 4, 0), (9, 7, 1), (1, 15, 2), (6, 3, 3), (3, 9, 5), (11, 5, 6)]
    return [Request(torch.randint(0, V, (t,), generator=g), n, arrival) for t, n, arrival in shapes]


@pytest.mark.parametrize(
    "positional, n_kv_heads, window",
    [("learned", None, None), ("sinusoidal", None, None), ("alibi", 2, None), ("none", 1, None), ("learned", None, 4)],
)
def test_continuous_batching_decodes_what_each_prompt_decodes_alone(positional, n_kv_heads, window):
    model = toy_gpt(positional, n_kv_heads, window)
    requests = mixed_requests()
    cache = PagedKVCache.for_model(model, n_blocks=8, block_size=4)  # too small for all at once
    outputs, trace = serve(model, requests, cache, max_batch=4)
    for r, got in zip(requests, outputs):
        want = generate(model, r.prompt[None], r.max_new_tokens, use_cache=False)[0, len(r.prompt) :]
        assert torch.equal(got, want)
    assert max(s["blocks_in_use"] for s in trace) <= 8 and cache.key_pools[0].shape[0] == 8
    assert cache.blocks_in_use() == 0 and not cache.block_tables  # everything freed at the end
    admitted_at = {i: s["step"] for s in trace for i in s["admitted"]}
    assert any(admitted_at[i] > r.arrival for i, r in enumerate(requests))  # someone waited for blocks
    assert any(s["admitted"] and set(s["running"]) - set(s["admitted"]) for s in trace)  # joined a running batch
    owners = {}
    for s in trace:
        for i, table in s["block_tables"].items():
            for block in table:
                owners.setdefault(block, set()).add(i)
    assert any(len(who) > 1 for who in owners.values())  # a block served two sequences, one after the other


@pytest.mark.cuda
def test_continuous_batching_on_cuda_decodes_what_each_prompt_decodes_alone():
    model = GPT(toy_gpt("learned", 2).cfg).cuda().eval()
    model.load_state_dict(toy_gpt("learned", 2).state_dict())
    requests = mixed_requests()
    outputs, _ = serve(model, requests, PagedKVCache.for_model(model, n_blocks=8, block_size=4), max_batch=4)
    for r, got in zip(requests, outputs):
        want = generate(model, r.prompt[None].cuda(), r.max_new_tokens, use_cache=False)[0, len(r.prompt) :]
        assert torch.equal(got, want.cpu())


def test_memory_held_by_a_mixed_batch_against_the_closed_form():
    model = toy_gpt(n_kv_heads=2)
    lengths, block_size = [5, 17, 33, 1], 8
    cache = PagedKVCache.for_model(model, n_blocks=16, block_size=block_size)
    for i, t in enumerate(lengths):
        cache.add_sequence(i)
        cache.set_active([i])
        model(torch.randint(0, V, (1, t)), cache=cache)
    layers, heads, d_head, fp32 = 2, 2, 32 // 4, 4
    per_position = 2 * layers * heads * d_head * fp32  # K and V, every layer
    held = memory_held(cache)
    assert held["blocks"] == 1 + 3 + 5 + 1
    assert held["paged"] == (1 + 3 + 5 + 1) * block_size * per_position
    assert held["contiguous"] == len(lengths) * 33 * per_position
    assert held["contiguous"] == StaticCache.for_model(model, len(lengths), 33).nbytes()  # what one allocates
    assert memory_held(cache, max_len=BLOCK)["contiguous"] == len(lengths) * BLOCK * per_position
    assert cache.nbytes() == 16 * block_size * per_position


def test_bad_input_gets_clear_errors():
    model = toy_gpt()
    cache = PagedKVCache.for_model(model, n_blocks=4, block_size=4)
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1, got 0"):
        PagedKVCache(1, 1, 1, n_blocks=1, block_size=0)
    with pytest.raises(ValueError, match=r"seq_ids\[0\] must be one of \[\], got 'x'"):
        cache.set_active(["x"])
    cache.add_sequence("x")
    with pytest.raises(ValueError, match=r"seq_id='x' is already in the cache"):
        cache.add_sequence("x")
    with pytest.raises(
        ValueError,
        match=r"k must be a tensor of shape \(0, 4, any, 8\) \(B=0 active rows, H_kv=4, T_new, d_head=8; "
        r".*got \(1, 4, 1, 8\)",
    ):
        cache.update(torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8), 0)
    with pytest.raises(ValueError, match=r"max_len must be an int >= 0 \(the longest sequence\), got -1"):
        memory_held(cache, max_len=-1)
    with pytest.raises(ValueError, match=r"positional='rope' rotates a whole batch by one offset"):
        serve(toy_gpt("rope"), [Request(torch.tensor([1]), 2)], PagedKVCache(2, 4, 8, 4, 4))
    with pytest.raises(
        ValueError,
        match=r"requests\[0\]'s positions \(prompt \+ max_new_tokens - 1\) must be an int <= 16 "
        r"\(the model's block_size=64, the pool's n_blocks=4 x block_size=4\), got 17",
    ):
        serve(model, [Request(torch.tensor([1, 2]), 16)], PagedKVCache.for_model(model, 4, 4))
    with pytest.raises(ValueError, match=r"requests\[0\].max_new_tokens must be an int >= 1, got 0"):
        serve(model, [Request(torch.tensor([1]), 0)], PagedKVCache.for_model(model, 4, 4))
    with pytest.raises(ValueError, match=r"requests\[1\].arrival must be an int >= 0 \(a decoding step\), got -1"):
        serve(
            model,
            [Request(torch.tensor([1]), 1), Request(torch.tensor([1]), 1, -1)],
            PagedKVCache.for_model(model, 4, 4),
        )


@pytest.mark.parametrize(
    "prompt, match",
    [
        (torch.tensor([1, 99]), r"requests\[0\].prompt must hold ids in \[0, 23\), got 99"),
        (torch.tensor([1.0, 2.0]), r"requests\[0\].prompt must be an integer tensor .*got torch.float32"),
    ],
    ids=["out of range id", "float prompt"],
)
def test_a_refused_request_leaves_the_cache_as_it_was(prompt, match):
    model = toy_gpt()
    cache = PagedKVCache.for_model(model, n_blocks=8, block_size=4)
    with pytest.raises(ValueError, match=match):
        serve(model, [Request(prompt, 2)], cache)
    assert cache.block_tables == {} and cache.lengths == {} and cache.blocks_in_use() == 0
    outputs, _ = serve(model, [Request(torch.tensor([1, 2]), 2)], cache)  # the corrected retry
    assert torch.equal(outputs[0], generate(model, torch.tensor([[1, 2]]), 2)[0, 2:])
