"""Generation: cached decoding (static and concatenating caches, the fast decode step and the module path) gives the
same tokens as a full recompute and logits within 1e-5 at every step, for every positional scheme and for
grouped-query attention; every model variant the library builds or modifies (norm placement, biases, activations,
quantized, pruned, hooked) decodes with a cache exactly as it recomputes, greedy, left-padded and sampled, and only
the unmodified pre-norm GPT takes the fast path; a model without its causal mask refuses a cache; a left-padded row
continues exactly as its prompt alone; greedy decoding equals Hugging Face GPT-2's on the same weights; top-k/top-p
match closed-form cases and HF's warpers; sampling is reproducible; bad arguments are named in the error."""

import copy
import functools
import os

import pytest
import torch

from transformer_lib.experiments.hf_reference import hf_gpt2
from transformer_lib.serving.decoding import cache_refusal, decode_step
from transformer_lib.serving.weight_layout import is_packed, pack_for_decoding
from transformer_lib.serving.generation import filter_logits, generate, sample_next
from transformer_lib.serving.kv_cache import DynamicCache, StaticCache
from transformer_lib.blocks.layers import ACTIVATIONS
from transformer_lib.models.configs import POSITIONAL, GPTConfig
from transformer_lib.models.transformer import GPT, init_weights
from transformer_lib.compression.pruning import drop_layers, magnitude_prune, prune_heads
from transformer_lib.quant import quantize_model
from transformer_lib.models.variants import set_causal, set_norm_placement

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
V, BLOCK = 23, 40
STEP_TOL = dict(atol=1e-5, rtol=1e-5)


@functools.lru_cache(maxsize=None)
def toy_gpt(positional: str = "learned", n_kv_heads=None, bias: bool = True, n_layers: int = 2) -> GPT:
    """A small GPT with std-0.3 weights: attention far from uniform, so a wrong key or position shows."""
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=V,
        block_size=BLOCK,
        n_layers=n_layers,
        n_heads=4,
        d_model=32,
        positional=positional,
        n_kv_heads=n_kv_heads,
        bias=bias,
    )
    model = GPT(cfg)
    model.apply(lambda m: init_weights(m, std=0.3))
    return model.eval()


def ids(shape, seed):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- cached == recomputed
VARIANTS = [(p, None) for p in POSITIONAL] + [("learned", 1), ("learned", 2), ("rope", 1), ("alibi", 2)]


@pytest.mark.parametrize("positional, n_kv_heads", VARIANTS)
@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_cached_decoding_matches_full_recompute(positional, n_kv_heads, cache):
    model = toy_gpt(positional, n_kv_heads)
    prompt = ids((2, 6), seed=1)
    want, want_logits = generate(model, prompt, 20, use_cache=False, return_logits=True)
    got, got_logits = generate(model, prompt, 20, cache_implementation=cache, return_logits=True)
    assert torch.equal(got, want)
    torch.testing.assert_close(got_logits, want_logits, **STEP_TOL)  # every step, not only the tokens


@pytest.mark.parametrize("positional, n_kv_heads", [("learned", None), ("rope", 2), ("alibi", None)])
def test_training_mode_with_dropout_0_decodes_as_eval_mode(positional, n_kv_heads):
    """In training mode (dropout 0) generate gives the numbers of eval mode: the same forward, nothing skipped."""
    model = toy_gpt(positional, n_kv_heads)
    prompt = ids((2, 5), seed=2)
    fast, fast_logits = generate(model, prompt, 12, return_logits=True)
    model.train()
    try:
        slow, slow_logits = generate(model, prompt, 12, return_logits=True)
    finally:
        model.eval()
    assert torch.equal(slow, fast)
    torch.testing.assert_close(slow_logits, fast_logits, **STEP_TOL)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("positional, n_kv_heads", [("learned", None), ("sinusoidal", 1), ("rope", None), ("alibi", 2)])
def test_decode_step_equals_the_model_forward_with_a_cache(positional, n_kv_heads, packed):
    model = toy_gpt(positional, n_kv_heads)
    other = copy.deepcopy(model)
    if packed:
        pack_for_decoding(other)
    prompt, token = ids((3, 7), seed=3), ids((3, 1), seed=4)
    with torch.inference_mode():
        a, b = DynamicCache(), StaticCache.for_model(model, 3, 8)
        model(prompt, cache=a)
        other(prompt, cache=b)
        want = model(token, cache=a)[0][:, -1]
        got = decode_step(other, token, b)
    torch.testing.assert_close(got, want, **STEP_TOL)
    torch.testing.assert_close(b.keys[1][:, :, :8], a.keys[1], **STEP_TOL)  # the cache was extended alike


def test_forward_hooks_are_honoured_by_the_decode_step():
    """A hooked layer (e.g. chapter 08's head mask) runs as a module: cached decoding still equals recompute."""
    model = GPT(toy_gpt().cfg).eval()
    model.load_state_dict(toy_gpt().state_dict())
    gate = torch.tensor([1.0] * 16 + [0.0] * 16)  # silence heads 2 and 3 of layer 0
    handle = model.blocks[0].self_attn.out.register_forward_pre_hook(lambda m, args: (args[0] * gate,))
    try:
        prompt = ids((1, 5), seed=5)
        want = generate(model, prompt, 15, use_cache=False)
        assert torch.equal(generate(model, prompt, 15), want)
    finally:
        handle.remove()
    assert not torch.equal(want, generate(model, prompt, 15, use_cache=False))  # the hook mattered


def test_a_linear_patched_on_the_instance_decodes_as_the_model_runs():
    """One forward: a module whose forward differs from its weights (here one nn.Linear's output shifted by a fixed
    vector, patched on the instance) decodes, greedy and cached, to the tokens of the model's own forward."""
    model = GPT(toy_gpt().cfg).eval()
    model.load_state_dict(toy_gpt().state_dict())
    prompt = ids((2, 5), seed=9)
    plain = generate(model, prompt, 15, use_cache=False)
    up = model.blocks[1].ffn.up
    shift = torch.randn(up.out_features, generator=torch.Generator().manual_seed(0))
    up.forward = lambda x, f=up.forward: f(x) + shift  # the instance's forward, not the class's
    with torch.inference_mode():  # greedy through the model's forward, recomputing the whole sequence each step
        seq = prompt
        for _ in range(15):
            seq = torch.cat([seq, model(seq)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert not torch.equal(seq, plain)  # the patch changes the text
    assert torch.equal(generate(model, prompt, 15), seq)
    assert torch.equal(generate(model, prompt, 15, cache_implementation="dynamic"), seq)


class _RowScaledWeight(torch.Tensor):
    """A stand-in for a quantized weight subclass (torchao's): its own ``F.linear`` (it doubles the output), so a
    transposed plain copy of it would compute something else."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.nn.functional.linear:
            return out.as_subclass(torch.Tensor) * 2
        return out


def test_tensor_subclass_weights_are_not_packed_and_keep_their_own_linear():
    """A weight that is a tensor subclass (a quantized one) keeps its layout and its own F.linear; the plain
    weights around it are packed; decoding equals recompute."""
    model = GPT(toy_gpt().cfg).eval()
    model.load_state_dict(toy_gpt().state_dict())
    ffn = model.blocks[0].ffn.up
    ffn.weight = torch.nn.Parameter(ffn.weight.detach().as_subclass(_RowScaledWeight), requires_grad=False)
    prompt = ids((1, 5), seed=6)
    want = generate(model, prompt, 15, use_cache=False, pack_weights=False)
    assert torch.equal(generate(model, prompt, 15, pack_weights=True), want)
    assert not is_packed(ffn.weight) and is_packed(model.blocks[1].ffn.up.weight)


# ----------------------------------------------------------------------------- every variant the library can make
def _with_activation(name: str) -> GPT:
    model = copy.deepcopy(toy_gpt())
    for block in model.blocks:
        block.ffn.act = ACTIVATIONS[name]
    return model


def _hooked_block() -> GPT:
    model = copy.deepcopy(toy_gpt("rope"))
    model.blocks[1].register_forward_hook(lambda module, args, out: out * 1.5)
    return model


BUILDERS = {  # name -> a model the library builds or modifies (eval mode unless the name says otherwise)
    **{f"positional {p}": functools.partial(toy_gpt, p) for p in POSITIONAL},
    "GQA 2 kv heads, learned": functools.partial(toy_gpt, "learned", 2),
    "GQA 1 kv head, rope": functools.partial(toy_gpt, "rope", 1),
    "GQA 2 kv heads, alibi": functools.partial(toy_gpt, "alibi", 2),
    "no biases": functools.partial(toy_gpt, "learned", None, False),
    "no biases, rope": functools.partial(toy_gpt, "rope", None, False),
    "norm pre": lambda: set_norm_placement(copy.deepcopy(toy_gpt()), "pre"),
    "norm post": lambda: set_norm_placement(copy.deepcopy(toy_gpt()), "post"),
    "norm none": lambda: set_norm_placement(copy.deepcopy(toy_gpt()), "none"),
    "norm post, rope GQA": lambda: set_norm_placement(copy.deepcopy(toy_gpt("rope", 2)), "post"),
    **{f"activation {a}": functools.partial(_with_activation, a) for a in ACTIVATIONS if a != "gelu"},
    "training mode (dropout 0)": lambda: copy.deepcopy(toy_gpt()).train(),
    "forward hook on a block": _hooked_block,
    "int8 per-channel": lambda: quantize_model(copy.deepcopy(toy_gpt())),
    "int4 groups of 16, rope": lambda: quantize_model(copy.deepcopy(toy_gpt("rope")), bits=4, group_size=16),
    "int8 W8A8, lm_head float": lambda: quantize_model(copy.deepcopy(toy_gpt()), act_bits=8, skip=("lm_head",)),
    "pruned heads": lambda: prune_heads(toy_gpt(), {0: [1], 1: [0, 2]}),
    "pruned heads, rope": lambda: prune_heads(toy_gpt("rope"), {1: [3]}),
    "dropped layer": lambda: drop_layers(toy_gpt("learned", None, True, 3), [1]),
    "magnitude pruned, masks kept": lambda: magnitude_prune(copy.deepcopy(toy_gpt()), 0.5, permanent=False),
}


@functools.lru_cache(maxsize=None)
def variant(name: str) -> GPT:
    return BUILDERS[name]()


def generate_case(mode: str):
    """``(prompt, generate kwargs)`` for greedy, left-padded (rows of 3, 8 and 5 real tokens) or sampled decoding."""
    if mode == "left-padded":
        batch, mask = torch.zeros(3, 8, dtype=torch.long), torch.zeros(3, 8, dtype=torch.bool)
        for row, n in enumerate((3, 8, 5)):
            batch[row, 8 - n :], mask[row, 8 - n :] = ids((1, n), seed=30 + n)[0], True
        return batch, dict(attention_mask=mask)
    kw = dict(temperature=0.9, top_k=12, top_p=0.95, seed=7) if mode == "sampled" else {}
    return ids((2, 6), seed=20), kw


@pytest.mark.parametrize("mode", ["greedy", "left-padded", "sampled"])
@pytest.mark.parametrize("cache", ["static", "dynamic"])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_cacheable_variant_decodes_with_a_cache_as_it_recomputes(name, cache, mode):
    model = variant(name)
    prompt, kw = generate_case(mode)
    want, want_logits = generate(model, prompt, 14, use_cache=False, return_logits=True, **kw)
    got, got_logits = generate(model, prompt, 14, cache_implementation=cache, return_logits=True, **kw)
    assert torch.equal(got, want)
    scale = max(1.0, want_logits.abs().max().item())  # without LayerNorm the logits reach the hundreds
    torch.testing.assert_close(got_logits, want_logits, atol=1e-5 * scale, rtol=1e-4)


MODIFIED_FROM = {  # variant -> the toy_gpt arguments of the model it was made from
    **{
        n: ("rope" if "rope" in n else "learned", 2 if "GQA" in n else None)
        for n in BUILDERS
        if n.startswith(("norm post", "norm none", "activation", "forward hook", "int", "pruned", "magnitude"))
    },
    "dropped layer": ("learned", None, True, 3),
}


@pytest.mark.parametrize("name", list(MODIFIED_FROM))
def test_each_variant_computes_something_else_than_the_model_it_was_made_from(name):
    """Otherwise the test above could not tell a variant decoded as the plain GPT from one decoded right."""
    prompt = ids((2, 6), seed=20)
    with torch.inference_mode():
        assert not torch.allclose(variant(name)(prompt)[0], toy_gpt(*MODIFIED_FROM[name])(prompt)[0], atol=1e-4)


@pytest.mark.parametrize("placement", ["post", "none"])
def test_decode_step_on_other_norm_placements_equals_the_forward(placement):
    """decode_step is the model's forward: a post-norm or norm-free model decodes as it computes (a written-out
    pre-norm block, as the library once had, computed something else for these)."""
    model = variant(f"norm {placement}")
    prompt, token = ids((2, 5), seed=3), ids((2, 1), seed=4)
    with torch.inference_mode():
        a, b = DynamicCache(), DynamicCache()
        for cache in (a, b):
            model(prompt, cache=cache)
        want = model(token, cache=a)[0][:, -1]
        torch.testing.assert_close(decode_step(model, token, b), want, **STEP_TOL)


@pytest.mark.parametrize("blocks", [[0, 1], [1]])
def test_a_model_without_its_causal_mask_refuses_a_cache(blocks):
    model = copy.deepcopy(toy_gpt())
    if blocks == [0, 1]:
        set_causal(model, False)
    else:
        model.blocks[1].causal = False
    prompt = ids((1, 4), seed=0)
    match = (
        rf"this model cannot decode with a KV cache: block {blocks[0]}'s self-attention is not causal .*"
        r"pass use_cache=False"
    )
    for kw in (dict(), dict(cache_implementation="dynamic")):
        with pytest.raises(ValueError, match=match):
            generate(model, prompt, 3, **kw)
    with pytest.raises(ValueError, match=match), torch.inference_mode():
        decode_step(model, prompt[:, -1:], DynamicCache())
    assert cache_refusal(model) is not None and cache_refusal(toy_gpt()) is None
    # recomputation still works, and is what a hand-written greedy loop over the full model gives
    out = generate(model, prompt, 3, use_cache=False)
    want = prompt
    with torch.inference_mode():
        for _ in range(3):
            want = torch.cat([want, model(want)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, want)
    set_causal(model, True)
    assert torch.equal(generate(model, prompt, 3), generate(toy_gpt(), prompt, 3))  # switched back on: cacheable


# ----------------------------------------------------------------------------- left padding
@pytest.mark.parametrize("positional, n_kv_heads", VARIANTS)
@pytest.mark.parametrize("mode", ["static", "dynamic", "no cache"])
def test_left_padded_rows_generate_what_each_prompt_generates_alone(positional, n_kv_heads, mode):
    model = toy_gpt(positional, n_kv_heads)
    prompts = [ids((1, n), seed=10 + n)[0] for n in (3, 8, 5)]
    T = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), T, dtype=torch.long)  # pad id 0, on the left
    mask = torch.zeros(len(prompts), T, dtype=torch.bool)
    for row, p in enumerate(prompts):
        batch[row, T - len(p) :], mask[row, T - len(p) :] = p, True
    kw = dict(use_cache=False) if mode == "no cache" else dict(cache_implementation=mode)
    out, logits = generate(model, batch, 12, attention_mask=mask, return_logits=True, **kw)
    for row, p in enumerate(prompts):
        alone, alone_logits = generate(model, p[None], 12, return_logits=True, **kw)
        assert torch.equal(out[row, T - len(p) :], alone[0])
        torch.testing.assert_close(logits[row], alone_logits[0], **STEP_TOL)


def test_right_padding_is_rejected():
    mask = torch.tensor([[True, True, False]])
    with pytest.raises(ValueError, match="attention_mask must be left-padded"):
        generate(toy_gpt(), ids((1, 3), seed=0), 2, attention_mask=mask)


# ----------------------------------------------------------------------------- against Hugging Face GPT-2
@pytest.mark.parametrize("padded", [False, True])
def test_greedy_decoding_equals_hugging_face_gpt2_on_the_same_weights(padded):
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=BLOCK, n_layers=2, n_heads=4, d_model=32))
    model.apply(lambda m: init_weights(m, std=0.2))
    model.eval()
    hf = hf_gpt2(model)
    prompt = ids((2, 7), seed=6)
    mask = torch.ones_like(prompt)
    if padded:
        prompt[0, :3], mask[0, :3] = 0, 0
    with torch.inference_mode():
        want = hf.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=15,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    got, logits = generate(model, prompt, 15, attention_mask=mask.bool(), return_logits=True)
    assert torch.equal(got, want.sequences)
    torch.testing.assert_close(logits, torch.stack(want.logits, dim=1), atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- sampling
PROBS = torch.tensor([0.05, 0.5, 0.15, 0.3])  # shuffled, so the filters must map back to vocabulary order


@pytest.mark.parametrize(
    "top_k, top_p, kept",
    [
        (1, None, [1]),
        (2, None, [1, 3]),
        (3, None, [1, 2, 3]),
        (10, None, [0, 1, 2, 3]),
        (None, 0.4, [1]),
        (None, 0.75, [1, 3]),
        (None, 0.85, [1, 2, 3]),
        (None, 0.97, [0, 1, 2, 3]),
        (None, 1.0, [0, 1, 2, 3]),
        (3, 0.75, [1, 3]),
        (2, 0.97, [1, 3]),
    ],
)
def test_top_k_and_top_p_keep_the_closed_form_sets(top_k, top_p, kept):
    logits = PROBS.log()[None]  # (1, V)
    out = filter_logits(logits, top_k, top_p)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == kept
    assert torch.equal(out[0, kept], logits[0, kept])  # kept logits are untouched
    renormalised = out.softmax(-1)[0, kept]
    torch.testing.assert_close(renormalised, PROBS[kept] / PROBS[kept].sum())


def test_top_k_keeps_ties_with_the_kth_logit():
    out = filter_logits(torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]]), top_k=2)
    assert torch.isfinite(out[0]).tolist() == [False, True, True, True, False]


@pytest.mark.parametrize("seed", range(5))
def test_filters_match_hugging_face_warpers(seed):
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(seed)) * 3
    for k in (1, 5, 20):
        assert torch.equal(filter_logits(logits, top_k=k), TopKLogitsWarper(k)(None, logits))
    for p in (0.1, 0.5, 0.9, 0.99):
        assert torch.equal(filter_logits(logits, top_p=p), TopPLogitsWarper(p)(None, logits))


def test_sampling_frequencies_follow_softmax_of_logits_over_temperature():
    logits = torch.tensor([1.0, 0.0, -1.0, 2.0])
    n = 40_000
    gen = torch.Generator().manual_seed(0)
    for temperature, top_k in ((1.0, None), (0.5, None), (2.0, 2)):
        draws = sample_next(logits.expand(n, -1), temperature, top_k=top_k, generator=gen)
        freq = torch.bincount(draws, minlength=4).double() / n
        want = filter_logits(logits[None] / temperature, top_k).softmax(-1)[0].double()
        sigma = (want * (1 - want) / n).sqrt()
        assert ((freq - want).abs() <= 5 * sigma + 1e-12).all(), (temperature, freq, want)
        if top_k:
            assert freq[[1, 2]].sum() == 0  # never outside the top k


def test_temperature_zero_is_greedy():
    model = toy_gpt()
    prompt = ids((2, 4), seed=7)
    greedy, logits = generate(model, prompt, 10, temperature=0.0, top_k=3, return_logits=True)
    assert torch.equal(greedy[:, 4:], logits.argmax(-1))
    assert torch.equal(sample_next(logits[:, 0], 0.0), logits[:, 0].argmax(-1))


@pytest.mark.parametrize("temperature", [1e-45, 1e-300, 5e-324, 1e-30])
def test_a_tiny_temperature_samples_the_greedy_token_without_overflow(temperature):
    # softmax(l / T) tends to the argmax as T -> 0 (uniform over exact ties); l / T overflows float32 (and 1e-300
    # is 0 in float32), so the logits must be shifted by their maximum before dividing, not fail in multinomial
    model = toy_gpt()
    prompt = ids((2, 4), seed=7)
    greedy, logits = generate(model, prompt, 8, temperature=0.0, return_logits=True)
    assert torch.equal(generate(model, prompt, 8, temperature=temperature, seed=3), greedy)
    for kw in ({}, dict(top_k=3), dict(top_p=0.5)):
        assert torch.equal(sample_next(logits[:, 0], temperature, **kw), logits[:, 0].argmax(-1))
    tied = torch.tensor([[2.0, -1.0, 2.0, 1.9999999]]).expand(4000, -1)
    draws = sample_next(tied, temperature, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=4)
    assert counts[1] == counts[3] == 0 and 1800 < counts[0] < 2200  # only the tied maxima, about half each


@pytest.mark.parametrize(
    "kw", [dict(temperature=0.8), dict(temperature=1.0, top_k=5), dict(temperature=1.2, top_p=0.9)]
)
def test_same_seed_same_text_with_and_without_cache(kw):
    model = toy_gpt("rope")
    prompt = ids((2, 5), seed=8)
    a = generate(model, prompt, 25, seed=123, use_cache=False, **kw)
    assert torch.equal(generate(model, prompt, 25, seed=123, cache_implementation="static", **kw), a)
    assert torch.equal(generate(model, prompt, 25, seed=123, cache_implementation="dynamic", **kw), a)
    assert not torch.equal(generate(model, prompt, 25, seed=124, **kw), a)  # the seed matters


# ----------------------------------------------------------------------------- limits and bad input
def test_a_prompt_longer_than_the_context_raises():
    with pytest.raises(
        ValueError,
        match=rf"prompt_ids.shape\[1\] must be an int <= {BLOCK} \(prompt length: the model's context "
        rf"block_size={BLOCK}\), got {BLOCK + 1}",
    ):
        generate(toy_gpt(), ids((1, BLOCK + 1), seed=0), 1, use_cache=False)


def test_a_cache_cannot_grow_past_the_context():
    with pytest.raises(
        ValueError,
        match=rf"max_new_tokens must be an int <= {BLOCK - 30} \(prompt length 30 \+ max_new_tokens <= "
        rf"block_size={BLOCK}; or use_cache=False\), got 11",
    ):
        generate(toy_gpt(), ids((1, 30), seed=0), 11)


def test_without_a_cache_the_window_slides_past_the_context():
    model = toy_gpt()
    prompt = ids((1, BLOCK - 2), seed=9)
    out, logits = generate(model, prompt, 6, use_cache=False, return_logits=True)
    assert out.shape == (1, BLOCK + 4)
    with torch.no_grad():
        last = model(out[:, -1 - BLOCK : -1])[0][:, -1]  # the final step saw the last BLOCK tokens
    torch.testing.assert_close(logits[:, -1], last)


NAN, INF = float("nan"), float("inf")


def _got(value, kind=(int, float)) -> str:
    """How a refused value shows in the message: its repr, after its type when the type is what is wrong."""
    return repr(value) if _error(value, kind) is ValueError else f"{type(value).__name__} {value!r}"


def _error(value, kind=(int, float)):
    """TypeError for a value of the wrong type (a bool is no number), ValueError for one out of range."""
    return ValueError if isinstance(value, kind) and not isinstance(value, bool) else TypeError


@pytest.mark.parametrize(
    "kw, error, match",
    [
        *[
            (dict(temperature=t), _error(t), rf"temperature must be a finite number >= 0 \(0 = greedy\), got {_got(t)}")
            for t in (-1.0, NAN, INF, -INF, "0.5", True)
        ],
        *[
            (dict(top_k=k), _error(k, int), rf"top_k must be an int >= 1 or None, got {_got(k, int)}")
            for k in (0, -3, 2.5, True)
        ],
        *[
            (dict(top_p=p), _error(p), rf"top_p must be a number in \(0, 1\] or None, got {_got(p)}")
            for p in (0.0, -0.1, 1.5, NAN, INF, "0.9")
        ],
        *[
            (dict(max_new_tokens=n), _error(n, int), rf"max_new_tokens must be an int >= 0, got {_got(n, int)}")
            for n in (-1, 2.0, True)
        ],
        (dict(use_cache="yes"), TypeError, "use_cache must be a bool, got str 'yes'"),
        (
            dict(cache_implementation="paged"),
            ValueError,
            r"cache_implementation must be one of \['dynamic', 'sliding', 'static'\], got 'paged'",
        ),
        (
            dict(attention_mask=torch.ones(1, 5, dtype=torch.bool)),
            ValueError,
            r"attention_mask must be a tensor of shape \(1, 4\) \(B, T: False on left padding\), got \(1, 5\)",
        ),
    ],
)
def test_bad_arguments_are_rejected(kw, error, match):
    args = dict(max_new_tokens=3) | kw
    for use_cache in (True, False):
        if "use_cache" in kw or ("cache_implementation" in kw and not use_cache):
            continue
        with pytest.raises(error, match=match) as info:
            generate(toy_gpt(), ids((1, 4), seed=0), use_cache=use_cache, **args)
        assert type(info.value) is error


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(temperature=NAN), "temperature must be a finite number"),
        (dict(top_k=0), "top_k must be an int >= 1"),
        (dict(top_p=1.01), r"top_p must be a number in \(0, 1\]"),
    ],
)
def test_sample_next_and_filter_logits_reject_bad_arguments(kw, match):
    logits = torch.zeros(1, 4)
    with pytest.raises(ValueError, match=match):
        sample_next(logits, **kw)
    if "temperature" not in kw:
        with pytest.raises(ValueError, match=match):
            filter_logits(logits, **kw)


def test_bad_prompt_is_rejected():
    with pytest.raises(
        ValueError,
        match=r"prompt_ids must be a tensor of shape \(any, any\), got \(4,\)",
    ):
        generate(toy_gpt(), torch.zeros(4), 3)


def test_zero_new_tokens_returns_the_prompt():
    prompt = ids((2, 4), seed=0)
    out, logits = generate(toy_gpt(), prompt, 0, return_logits=True)
    assert torch.equal(out, prompt) and logits.shape == (2, 0, V)


def test_bf16_model_decodes_with_a_bf16_cache():
    model = GPT(toy_gpt().cfg).to(torch.bfloat16).eval()
    cache = StaticCache.for_model(model, 1, 10)
    assert cache.keys[0].dtype == torch.bfloat16
    out = generate(model, ids((1, 4), seed=0), 6)
    assert out.shape == (1, 10)


@pytest.mark.cuda
@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_cached_decoding_matches_recompute_on_cuda(cache):
    model = GPT(toy_gpt("rope", 2).cfg).cuda().eval()
    model.load_state_dict(toy_gpt("rope", 2).state_dict())
    prompt = ids((2, 6), seed=1).cuda()
    want, want_logits = generate(model, prompt, 20, use_cache=False, return_logits=True)
    got, got_logits = generate(model, prompt, 20, cache_implementation=cache, return_logits=True)
    assert torch.equal(got, want)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-4, rtol=1e-4)


def test_position_ids_are_checked_and_move_learned_positions():
    model = toy_gpt()
    x = ids((1, 4), seed=0)
    with torch.no_grad():
        shifted = model(x, position_ids=torch.arange(3, 7)[None])[0]
        h = model.tok_emb(x) + model.pos.weight[3:7]  # the learned vectors of positions 3..6, by hand
        for block in model.blocks:
            h = block(h)
        torch.testing.assert_close(shifted, model.lm_head(model.norm(h)))
    with pytest.raises(
        ValueError,
        match=rf"position_ids must hold ids in \[0, {BLOCK}\), got {BLOCK}",
    ):
        model(x, position_ids=torch.tensor([[0, 1, 2, BLOCK]]))
    with pytest.raises(ValueError, match=r"position_ids must be a tensor of shape \(1, 4\)"):
        model(x, position_ids=torch.arange(4))


# ----------------------------------------------------------------------------- chapter 07 widgets
class CharTok:
    """A tokenizer for the toy model: token i is the i-th letter."""

    encode = staticmethod(lambda text: [ord(c) - 97 for c in text])
    decode = staticmethod(lambda ids: "".join(chr(97 + i) for i in ids))


def test_trace_generation_follows_greedy_generate_and_records_attention_rows():
    from transformer_lib.viz.generation_widgets import generation_slider, trace_generation

    model = toy_gpt()
    steps = trace_generation(model, CharTok, "abcde", 6)
    want = generate(model, torch.tensor([CharTok.encode("abcde")]), 6)
    assert "".join(steps[-1].tokens) + steps[-1].next_token == CharTok.decode(want[0].tolist())
    assert [s.fed for s in steps] == [5, 1, 1, 1, 1, 1]
    for i, s in enumerate(steps):
        assert s.attention.shape == (2, 4, 5 + i)  # (layers, heads, cached positions)
        torch.testing.assert_close(s.attention.sum(-1), torch.ones(2, 4))
    assert len(generation_slider(model, steps).children[1].children) == 6  # one frame per step


def test_sampling_distribution_is_what_sample_next_draws_from():
    from transformer_lib.viz.generation_widgets import Sampling, sampling_distribution

    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    assert torch.equal(sampling_distribution(logits, Sampling(0.0)), torch.tensor([1.0, 0, 0, 0]))
    p = sampling_distribution(logits, Sampling(0.5, top_k=3))
    torch.testing.assert_close(p, torch.cat([(logits[:3] / 0.5).softmax(-1), torch.zeros(1)]))


def test_weights_are_packed_once_in_place_and_no_number_changes():
    """generate packs a model's linear weights on its first CPU call: same parameters (shape, values, identity),
    storage column-major, no second copy; later calls find them packed; training still works on them."""
    model = GPT(toy_gpt().cfg).eval()
    model.load_state_dict(toy_gpt().state_dict())
    params = {name: (p, p.detach().clone()) for name, p in model.named_parameters()}
    prompt = ids((2, 5), seed=7)
    want = generate(model, prompt, 12, use_cache=False, pack_weights=False)
    assert not any(is_packed(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert torch.equal(generate(model, prompt, 12), want)  # CPU: packed by default
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(is_packed(m.weight) for m in linears)
    for name, p in model.named_parameters():
        assert p is params[name][0] and torch.equal(p, params[name][1])  # the same parameter, the same values
    pointers = [m.weight.data_ptr() for m in linears]
    assert pack_for_decoding(model) == 0  # nothing left to pack
    assert torch.equal(generate(model, prompt, 12), want)
    assert [m.weight.data_ptr() for m in linears] == pointers  # not rebuilt by later calls
    model.train()
    loss = model(prompt, targets=prompt)[1]
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()  # an optimizer step on packed weights
    assert all(is_packed(m.weight) for m in linears)
    with pytest.raises(TypeError, match=r"pack_weights must be a bool, got str 'yes'"):
        generate(model, prompt, 3, pack_weights="yes")


@pytest.mark.parametrize("positional", ["learned", "alibi"])
def test_generate_is_its_prefill_then_one_decode_step_per_token_bit_for_bit(positional):
    """generate() is split into small functions (padding, prefill, loop); its tokens and every
    step's logits are exactly those of the prefill and the public decode_step, written out here."""
    model = toy_gpt(positional)
    prompt = ids((2, 6), seed=1)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, :2] = False  # row 1 left-padded
    got, got_logits = generate(model, prompt, 5, attention_mask=mask, return_logits=True)
    with torch.inference_mode():
        cache = StaticCache.for_model(model, 2, 11)
        full = torch.ones(2, 11, dtype=torch.bool)
        full[:, :6] = mask
        position = (mask.long().cumsum(-1) - 1).clamp_min(0)  # (2, 6)
        logits = model(prompt, cache=cache, attention_mask=mask, position_ids=position)[0][:, -1]
        seq, want, position = prompt, [logits], position[:, -1:]
        for t in range(6, 10):
            token = logits.argmax(-1, keepdim=True)  # (2, 1)
            seq, position = torch.cat([seq, token], 1), position + 1
            logits = decode_step(model, token, cache, position, full[:, : t + 1])
            want.append(logits)
    assert torch.equal(got[:, :10], seq) and torch.equal(got[:, 10], logits.argmax(-1))
    assert torch.equal(got_logits, torch.stack(want, 1))


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_decode_step_refuses_a_wrong_mask_before_the_cache_grows(positional):
    model = toy_gpt(positional)
    prompt, token = ids((2, 4), seed=3), ids((2, 1), seed=4)
    cache, clean = StaticCache.for_model(model, 2, BLOCK), StaticCache.for_model(model, 2, BLOCK)
    model(prompt, cache=cache)
    model(prompt, cache=clean)
    keys = [k.clone() for k in cache.keys + cache.values]
    for bad, match in [
        (torch.ones(2, 4, dtype=torch.bool), r"attention_mask must be a tensor of shape \(2, 5\)"),
        (torch.ones(2, 5, dtype=torch.long), r"attention_mask must be a torch.bool tensor, got torch.int64"),
    ]:
        with pytest.raises(ValueError, match=match):
            decode_step(model, token, cache, attention_mask=bad)
    with pytest.raises(ValueError, match=r"token must hold ids in \[0, 23\), got 23"):
        decode_step(model, torch.full((2, 1), V), cache)
    assert cache.lengths == [4, 4] and all(torch.equal(a, b) for a, b in zip(cache.keys + cache.values, keys))
    mask = torch.ones(2, 5, dtype=torch.bool)
    torch.testing.assert_close(
        decode_step(model, token, cache, attention_mask=mask), decode_step(model, token, clean, attention_mask=mask)
    )
