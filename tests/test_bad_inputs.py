"""Property test: bad input to the public API is refused at its edge, naming the argument, and changes nothing.

For each entry point of ``blocks``, ``models``, ``serving``, ``quant``, ``training`` and ``data`` in ``CASES`` (one
line each: a name, the callable, the argument to spoil, a factory of valid arguments and the kinds of bad value to
try), hypothesis draws a bad value of one of those kinds (a wrong rank, an integer, bool or complex tensor where
floats belong, floats where ids belong, NaN or inf, an empty tensor, None, a string, an id out of range, a size
that is zero, negative or not an int) and puts it in place of the valid one. The call must then

* raise ``ValueError`` or ``TypeError`` whose message names the argument (never an error from deep inside torch);
* leave every stateful object exactly as it was (caches, models and their parameters, LoRA-wrapped and quantized
  modules, tokenizers): same lengths, same tensor contents (``torch.equal``), same module types and modes;
* and, for the kinds a function may accept (an empty tensor), return no NaN.

NaN and inf inputs are tried on the functions a reader calls by hand, not on the layers a model runs on every
forward pass (``LayerNorm``, ``RMSNorm``, the positional modules, ``MultiHeadAttention``, the caches, ``QuantLinear``):
there a finite check would cost a reduction per layer, and the model's own edge (token ids) keeps NaN out.
``scaled_dot_product_attention`` is chapter 02's function but also the one every layer calls: it leaves NaN to flow to
the loss, where ``train`` stops a diverged run (``tests/blocks/test_attention.py`` holds that expectation; checking
``q`` there cost under 1% of a GPT-small forward on a CPU, but made a diverging run raise inside a layer instead).
``attention_weights``, the teaching path, refuses NaN and inf in ``q`` and ``k``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_lib.blocks.attention import attention_weights, scaled_dot_product_attention, softmax_with_temperature
from transformer_lib.blocks.cached_attention import CachedSelfAttention
from transformer_lib.blocks.grouped_query import GroupedQueryAttention
from transformer_lib.blocks.layers import LayerNorm, layer_norm
from transformer_lib.blocks.multihead import MultiHeadAttention
from transformer_lib.blocks.norms import RMSNorm, rms_norm
from transformer_lib.blocks.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    sinusoidal_table,
)
from transformer_lib.data.corpus import get_batch
from transformer_lib.data.objectives import mlm_mask, next_token_targets
from transformer_lib.data.tokenization import CharTokenizer, pad_sequences
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.llama import HalfSplitRotary, Llama, LlamaConfig
from transformer_lib.models.transformer import GPT
from transformer_lib.quant import QuantLinear, nf4_dequantize, nf4_quantize, quantize_model
from transformer_lib.serving import (
    DynamicCache,
    PagedKVCache,
    QuantizedCache,
    Request,
    SlidingWindowCache,
    StaticCache,
    decode_step,
    generate,
    serve,
)
from transformer_lib.training.lora import LoRAConfig, LoRALinear, apply_lora
from transformer_lib.training.loop import TrainConfig, train

V, D, H = 20, 16, 2  # vocabulary, d_model, heads: every model here is this small


# ----------------------------------------------------------------------------- bad values, by kind
# Each mutation maps (valid value, hypothesis draw) -> a bad value. ``MAY_PASS`` ones may be accepted (an empty
# tensor can be a legitimate input); every other one must be refused.
def _index(x: torch.Tensor, draw) -> tuple:
    return tuple(draw(st.integers(0, n - 1)) for n in x.shape)


def _with(x: torch.Tensor, draw, value) -> torch.Tensor:
    x = x.clone()
    x[_index(x, draw)] = value
    return x


def _empty(x: torch.Tensor, draw) -> torch.Tensor:
    dim = draw(st.integers(0, x.dim() - 1))
    return x.narrow(dim, 0, 0)


MUTATIONS: dict[str, Callable] = {
    # tensors where floats belong
    "int": lambda x, draw: x.round().long() if x.is_floating_point() else x.long(),
    "bool": lambda x, draw: x != 0,
    "complex": lambda x, draw: x.to(torch.complex64),
    "nan": lambda x, draw: _with(x, draw, math.nan),
    "inf": lambda x, draw: _with(x, draw, draw(st.sampled_from([math.inf, -math.inf]))),
    "+inf": lambda x, draw: _with(x, draw, math.inf),
    "rank_up": lambda x, draw: x[None],
    "rank_down": lambda x, draw: x[(0,) * (x.dim() - 1)],  # keeps the last size: (..., D) -> (D,)
    "rank_1": lambda x, draw: x[0],
    "empty": _empty,
    "empty_last": lambda x, draw: x[..., :0],
    "wider": lambda x, draw: torch.cat([x, x[..., :1]], dim=-1),  # one key too many: does not broadcast
    "list": lambda x, draw: x.tolist(),
    # tensors where ids belong
    "float_ids": lambda x, draw: x.float() + draw(st.sampled_from([0.0, 0.5])),
    "too_high": lambda x, draw: _with(x, draw, draw(st.integers(V, 10 * V))),
    "negative_id": lambda x, draw: _with(
        x, draw, draw(st.integers(-10 * V, -1).filter(lambda i: i != -100))
    ),  # -100: ignored targets
    "int8": lambda x, draw: x.to(torch.int8),
    # scalars
    "none": lambda x, draw: None,
    "str": lambda x, draw: draw(st.sampled_from(["3", "float32", ""])),
    "true": lambda x, draw: True,
    "zero": lambda x, draw: 0,
    "negative": lambda x, draw: draw(st.integers(-5, -1)),
    "fraction": lambda x, draw: draw(st.sampled_from([0.5, 1.5, 2.0])),
    "nan_number": lambda x, draw: math.nan,
    "inf_number": lambda x, draw: draw(st.sampled_from([math.inf, -math.inf])),
    "negative_number": lambda x, draw: draw(st.floats(-10, -1e-3)),
    "one": lambda x, draw: 1.0,
    "int_dtype": lambda x, draw: draw(st.sampled_from([torch.long, torch.bool, torch.int8])),
    "object": lambda x, draw: object(),
}
MAY_PASS = {"empty"}

FLOAT = ("int", "bool", "complex", "none", "str", "list")  # + "nan", "inf" where a NaN check belongs
FINITE = ("nan", "inf")
IDS = ("float_ids", "bool", "complex", "too_high", "negative_id", "none", "str", "list")
MASK = ("int", "str", "rank_up", "rank_1")  # a bool mask of one shape: None means "no mask" wherever it is optional
BROADCAST_MASK = ("int", "str", "wider")  # a mask that broadcasts: another rank can be right
INT_POS = ("zero", "negative", "fraction", "str", "none", "true", "nan_number")  # an int >= 1
INT_NONNEG = ("negative", "fraction", "str", "none", "true", "nan_number")  # an int >= 0
NUM_POS = ("zero", "negative_number", "nan_number", "inf_number", "str", "none", "true")  # a finite number > 0
OBJECT = ("none", "str", "object")


@dataclass
class Case:
    """``call(target, **kwargs)`` with ``kwargs[arg]`` spoilt by one of ``bads``; ``make() -> (target, kwargs)``
    builds fresh valid arguments (``target``: the stateful objects, compared before and after a refused call).
    ``names``: what the message may name instead of ``arg`` (an argument checked against another). ``runs``: False
    where ``make()``'s arguments are valid only once spoilt (keys with D = 0 wait for a query with D = 0)."""

    name: str
    call: Callable
    arg: str
    make: Callable
    bads: tuple
    names: tuple = ()
    marks: tuple = field(default=())
    runs: bool = True


def fn(f):
    """A plain function: no stateful target."""
    return lambda target, **kw: f(**kw)


def method(name):
    return lambda target, **kw: getattr(target[0] if isinstance(target, tuple) else target, name)(**kw)


def forward(target, **kw):
    return (target[0] if isinstance(target, tuple) else target)(**kw)


# ----------------------------------------------------------------------------- valid arguments
def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ids(*shape, seed=0):
    return torch.randint(V, shape, generator=torch.Generator().manual_seed(seed))


def gpt(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, block_size=16, n_layers=1, n_heads=H, d_model=D, d_ff=32, **kw)
    return GPT(GPTConfig(**cfg)).eval()


def llama(**kw):
    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=V, block_size=16, n_layers=1, n_heads=H, d_model=D, d_ff=32, **kw)).eval()


def prefilled(cache, n_layers=1, t=3, heads=H):
    for layer in range(n_layers):
        cache.update(rand(2, heads, t, D // H, seed=layer), rand(2, heads, t, D // H, seed=layer + 9), layer)
    return cache


def qkv(**kw):
    return None, dict(q=rand(2, H, 3, 8), k=rand(2, H, 4, 8, seed=1), v=rand(2, H, 4, 8, seed=2), **kw)


def qkv_qk(**kw):
    _, args = qkv(**kw)
    del args["v"]
    return None, args


def keys_without_features(make):
    """``make``'s arguments with ``k: (..., Tk, 0)``: spoiling q with ``empty_last`` then gives D = 0 to both."""

    def made():
        target, args = make()
        return target, {**args, "k": args["k"][..., :0]}

    return made


def mha(**kw):
    torch.manual_seed(0)
    return MultiHeadAttention(D, H).eval(), dict(query=rand(2, 3, D), **kw)


def cached(attention, heads=H):
    """A decoder's attention layer and a cache holding 3 positions of its layer 0: ``x`` brings 3 more."""

    def make(**kw):
        torch.manual_seed(0)
        layer, cache = attention().eval(), prefilled(DynamicCache(), heads=heads)
        args = dict(x=rand(2, 3, D), cache=cache, attention_mask=torch.ones(2, 6, dtype=torch.bool))
        return (layer, cache), {**args, **kw}

    return make


CACHED = {
    "CachedSelfAttention": cached(lambda: CachedSelfAttention(D, H)),
    "GroupedQueryAttention": cached(lambda: GroupedQueryAttention(D, H, n_kv_heads=1), heads=1),
}


def gpt_call(model_fn=gpt, cache=False, **kw):
    model = model_fn()
    c = prefilled(DynamicCache()) if cache else None
    past = 3 if cache else 0
    args = dict(idx=ids(2, 3), targets=ids(2, 3, seed=1), attention_mask=torch.ones(2, past + 3, dtype=torch.bool))
    return (model, c), dict(args, cache=c, **kw)


def gen_call(model_fn=gpt, **kw):
    model = model_fn()
    return model, dict(model=model, prompt_ids=ids(2, 3), max_new_tokens=2, **kw)


def decode_call(**kw):
    model, cache = gpt(), StaticCache.for_model(gpt(), 2, 8)
    model(ids(2, 3), cache=cache)
    args = dict(model=model, token=ids(2, 1), cache=cache, attention_mask=torch.ones(2, 4, dtype=torch.bool))
    return (model, cache), {**args, **kw}


def cache_update(make_cache):
    def make():
        cache = prefilled(make_cache())
        return cache, dict(k=rand(2, H, 1, D // H, seed=3), v=rand(2, H, 1, D // H, seed=4), layer_idx=0)

    return make


def serve_call(**kw):
    model = gpt()
    cache = PagedKVCache.for_model(model, n_blocks=8, block_size=4)
    requests = [Request(ids(3), 2), Request(ids(2, seed=1), 3, arrival=1)]
    return (model, cache), dict(model=model, requests=requests, cache=cache, **kw)


def quant_call(**kw):
    model = gpt()
    return model, dict(model=model, **kw)


def lora_call(**kw):
    model = gpt()
    return model, dict(model=model, config=LoRAConfig(r=2, target_modules=("qkv",)), **kw)


def lora_forward(**kw):
    torch.manual_seed(0)
    return LoRALinear(nn.Linear(D, 8), r=2), dict(x=rand(2, D), **kw)


def train_call(**kw):
    model = gpt().train(False)

    def batch_fn(step):
        return ids(2, 4, seed=step), ids(2, 4, seed=step + 1)

    cfg = TrainConfig(steps=1, warmup_steps=0, progress=False)
    return model, dict(model=model, batch_fn=batch_fn, cfg=cfg, device="cpu", **kw)


def tokenizer_call(**kw):
    return CharTokenizer("abcdefgh", specials=("<pad>", "<bos>")), kw


def arg_default(**kw):
    return None, kw


TRAIN_OK = dict(steps=1, warmup_steps=0, progress=False)

# ----------------------------------------------------------------------------- the table
CASES = [
    # blocks: attention
    Case(
        "softmax_with_temperature",
        fn(softmax_with_temperature),
        "scores",
        lambda: arg_default(scores=rand(2, 5)),
        FLOAT + ("nan", "+inf", "empty"),
    ),
    Case(
        "softmax_with_temperature",
        fn(softmax_with_temperature),
        "temperature",
        lambda: arg_default(scores=rand(2, 5), temperature=1.0),
        NUM_POS,
    ),
    Case("attention_weights", fn(attention_weights), "q", qkv_qk, FLOAT + FINITE + ("rank_down",)),
    Case("attention_weights", fn(attention_weights), "k", qkv_qk, FLOAT + FINITE + ("rank_down",)),
    Case(
        "attention_weights",
        fn(attention_weights),
        "mask",
        lambda: qkv_qk(mask=torch.ones(3, 4, dtype=torch.bool)),
        BROADCAST_MASK + ("rank_1",),
    ),
    Case("attention_weights", fn(attention_weights), "temperature", lambda: qkv_qk(temperature=1.0), NUM_POS),
    Case("scaled_dot_product_attention", fn(scaled_dot_product_attention), "q", qkv, FLOAT + ("rank_down",)),
    Case("scaled_dot_product_attention", fn(scaled_dot_product_attention), "k", qkv, FLOAT + ("rank_down",)),
    Case("scaled_dot_product_attention", fn(scaled_dot_product_attention), "v", qkv, FLOAT + ("rank_down",)),
    Case(
        "scaled_dot_product_attention",
        fn(scaled_dot_product_attention),
        "mask",
        lambda: qkv(mask=torch.ones(3, 4, dtype=torch.bool)),
        BROADCAST_MASK + ("rank_1",),  # (Tk,) broadcasts, but F.scaled_dot_product_attention refuses it
    ),
    Case(
        "scaled_dot_product_attention",
        fn(scaled_dot_product_attention),
        "temperature",
        lambda: qkv(temperature=1.0),
        NUM_POS,
    ),
    Case(
        "scaled_dot_product_attention",
        fn(scaled_dot_product_attention),
        "dropout_p",
        lambda: qkv(dropout_p=0.0),
        ("negative_number", "one", "nan_number", "str", "none", "true"),
    ),
    # D = 0 (no features): 1 / sqrt(D) would divide by zero
    *[
        Case(f"{f.__name__}(D=0)", fn(f), "q", keys_without_features(make), ("empty_last",), runs=False)
        for f, make in ((attention_weights, qkv_qk), (scaled_dot_product_attention, qkv))
    ],
    # blocks: multi-head attention (the paper's), and a decoder's attention writing into a filled cache
    Case("MultiHeadAttention", forward, "query", mha, FLOAT + ("rank_up", "rank_down")),
    Case("MultiHeadAttention", forward, "attn_mask", lambda: mha(attn_mask=torch.ones(3, 3, dtype=torch.bool)), MASK),
    *[
        Case(f"{name}+cache", forward, arg, make, bads)
        for name, make in CACHED.items()
        for arg, bads, make in (
            ("x", FLOAT + ("rank_up", "rank_down"), make),
            ("attention_mask", MASK, make),
            ("attn_mask", MASK, lambda make=make: make(attn_mask=torch.ones(3, 6, dtype=torch.bool))),
            ("cache", ("str", "object"), make),  # None: no cache
        )
    ],
    # blocks: positional encodings
    Case(
        "SinusoidalPositionalEncoding",
        forward,
        "x",
        lambda: (SinusoidalPositionalEncoding(D, 16), dict(x=rand(2, 3, D))),
        FLOAT + ("rank_up", "rank_down"),
    ),
    Case(
        "SinusoidalPositionalEncoding",
        forward,
        "offset",
        lambda: (SinusoidalPositionalEncoding(D, 16), dict(x=rand(2, 3, D), offset=0)),
        INT_NONNEG,
    ),
    Case(
        "LearnedPositionalEmbedding",
        forward,
        "x",
        lambda: (LearnedPositionalEmbedding(D, 16), dict(x=rand(2, 3, D))),
        FLOAT + ("rank_up", "rank_down"),
    ),
    Case(
        "LearnedPositionalEmbedding",
        forward,
        "offset",
        lambda: (LearnedPositionalEmbedding(D, 16), dict(x=rand(2, 3, D), offset=0)),
        INT_NONNEG,
    ),
    Case("RotaryEmbedding", forward, "x", lambda: (RotaryEmbedding(8), dict(x=rand(2, H, 3, 8))), FLOAT),
    Case(
        "RotaryEmbedding",
        forward,
        "offset",
        lambda: (RotaryEmbedding(8), dict(x=rand(2, H, 3, 8), offset=0)),
        INT_NONNEG,
    ),
    Case("HalfSplitRotary", forward, "x", lambda: (HalfSplitRotary(8), dict(x=rand(2, H, 3, 8))), FLOAT),
    Case(
        "HalfSplitRotary",
        forward,
        "offset",
        lambda: (HalfSplitRotary(8), dict(x=rand(2, H, 3, 8), offset=0)),
        INT_NONNEG,
    ),
    Case("sinusoidal_table", fn(sinusoidal_table), "max_len", lambda: arg_default(max_len=8, d_model=D), INT_POS),
    Case("sinusoidal_table", fn(sinusoidal_table), "d_model", lambda: arg_default(max_len=8, d_model=D), INT_POS),
    Case("alibi_bias", fn(alibi_bias), "n_heads", lambda: arg_default(n_heads=H, t_q=3), INT_POS),
    Case("alibi_bias", fn(alibi_bias), "t_q", lambda: arg_default(n_heads=H, t_q=3), INT_NONNEG),
    Case(
        "alibi_bias",
        fn(alibi_bias),
        "dtype",
        lambda: arg_default(n_heads=H, t_q=3, dtype=torch.float32),
        ("int_dtype", "str", "none"),
    ),
    # blocks: norms
    Case(
        "rms_norm",
        fn(rms_norm),
        "x",
        lambda: arg_default(x=rand(2, 3, D), weight=torch.ones(D)),
        FLOAT + ("empty",),
        names=("weight",),
    ),  # x (2, 3, 0): "weight must be (0,)" names the size that disagrees
    Case(
        "rms_norm",
        fn(rms_norm),
        "weight",
        lambda: arg_default(x=rand(2, 3, D), weight=torch.ones(D)),
        ("none", "str", "list", "rank_up", "empty"),
    ),
    Case(
        "rms_norm", fn(rms_norm), "eps", lambda: arg_default(x=rand(2, 3, D), weight=torch.ones(D), eps=1e-6), NUM_POS
    ),
    Case("RMSNorm", forward, "x", lambda: (RMSNorm(D), dict(x=rand(2, 3, D))), FLOAT + ("empty",)),
    Case("RMSNorm()", lambda t, **kw: RMSNorm(**kw), "d_model", lambda: arg_default(d_model=D), INT_POS),
    Case("RMSNorm()", lambda t, **kw: RMSNorm(**kw), "eps", lambda: arg_default(d_model=D, eps=1e-6), NUM_POS),
    Case("LayerNorm", forward, "x", lambda: (LayerNorm(D), dict(x=rand(2, 3, D))), FLOAT + ("empty",)),
    Case("LayerNorm()", lambda t, **kw: LayerNorm(**kw), "d_model", lambda: arg_default(d_model=D), INT_POS),
    Case("LayerNorm()", lambda t, **kw: LayerNorm(**kw), "eps", lambda: arg_default(d_model=D, eps=1e-5), NUM_POS),
    Case(
        "layer_norm",
        fn(layer_norm),
        "x",
        lambda: arg_default(x=rand(2, 3, D), weight=torch.ones(D), bias=torch.zeros(D)),
        FLOAT + FINITE + ("empty",),
        names=("weight",),
    ),
    # models: GPT and Llama forward (with a filled cache, which a refused call must leave alone) and generate
    *[
        Case(f"{m.__name__}.forward", forward, arg, lambda m=m: gpt_call(m, cache=True), bads)
        for m in (gpt, llama)
        for arg, bads in (
            ("idx", IDS + ("rank_up", "rank_1")),
            ("targets", IDS[:-3] + ("str", "list", "rank_up")),
            ("attention_mask", MASK),
        )
    ],
    Case(
        "gpt.forward",
        forward,
        "position_ids",
        lambda: gpt_call(position_ids=ids(2, 3) % 16),
        IDS[:-3] + ("str", "list", "rank_up", "rank_1"),
    ),
    *[
        Case(
            f"generate({m.__name__})",
            fn(generate),
            arg,
            lambda m=m: gen_call(m, attention_mask=torch.ones(2, 3, dtype=torch.bool)),
            bads,
        )
        for m in (gpt, llama)
        for arg, bads in (
            ("prompt_ids", IDS + ("rank_up", "rank_1", "empty")),
            ("max_new_tokens", INT_NONNEG),
            ("temperature", ("negative_number", "nan_number", "inf_number", "str", "none", "true")),
            ("top_k", ("zero", "negative", "fraction", "str", "true")),
            ("top_p", ("zero", "negative_number", "nan_number", "str", "true")),
            ("attention_mask", ("str", "rank_up", "rank_1")),
            ("cache_implementation", ("none", "str", "zero")),
            ("use_cache", ("none", "str", "zero")),
        )
    ],
    # serving: caches, decode_step, serve
    *[
        Case(f"{c.__name__}.update", method("update"), arg, cache_update(c), bads)
        for c in (DynamicCache, lambda: StaticCache(1, 2, H, 8, D // H), QuantizedCache, lambda: SlidingWindowCache(4))
        for arg, bads in (
            ("k", FLOAT + ("rank_up", "rank_down")),
            ("v", FLOAT + ("rank_up", "rank_down")),
            ("layer_idx", ("negative", "fraction", "str", "none", "true")),
        )
    ],
    Case("decode_step", fn(decode_step), "token", decode_call, IDS + ("rank_up", "rank_1")),
    Case("decode_step", fn(decode_step), "attention_mask", decode_call, MASK),
    Case("decode_step", fn(decode_step), "cache", decode_call, OBJECT),
    Case("serve", fn(serve), "requests", serve_call, OBJECT),
    Case("serve", fn(serve), "cache", serve_call, OBJECT),
    Case("serve", fn(serve), "max_batch", lambda: serve_call(max_batch=2), INT_POS),
    # quant
    Case("quantize_model", fn(quantize_model), "model", quant_call, OBJECT),
    Case(
        "quantize_model",
        fn(quantize_model),
        "bits",
        lambda: quant_call(bits=8),
        ("zero", "fraction", "str", "none", "true"),
    ),
    Case(
        "quantize_model",
        fn(quantize_model),
        "group_size",
        lambda: quant_call(group_size=8),
        ("zero", "negative", "fraction", "str", "true"),
    ),
    Case(
        "quantize_model",
        fn(quantize_model),
        "act_bits",
        lambda: quant_call(act_bits=8),
        ("zero", "fraction", "str", "true"),
    ),
    Case(
        "quantize_model", fn(quantize_model), "skip", lambda: quant_call(skip=("lm_head",)), ("str", "zero", "object")
    ),
    Case(
        "QuantLinear",
        forward,
        "x",
        lambda: (QuantLinear.from_linear(nn.Linear(D, 8)), dict(x=rand(2, D))),
        FLOAT + ("empty",),
    ),
    Case(
        "QuantLinear.from_linear",
        lambda t, **kw: QuantLinear.from_linear(**kw),
        "linear",
        lambda: arg_default(linear=nn.Linear(D, 8)),
        OBJECT,
    ),
    Case(
        "QuantLinear.from_linear",
        lambda t, **kw: QuantLinear.from_linear(**kw),
        "group_size",
        lambda: arg_default(linear=nn.Linear(D, 8), group_size=8),
        ("zero", "negative", "fraction", "str", "true"),
    ),
    Case("nf4_quantize", fn(nf4_quantize), "w", lambda: arg_default(w=rand(4, 32)), FLOAT + FINITE + ("empty",)),
    Case("nf4_quantize", fn(nf4_quantize), "block_size", lambda: arg_default(w=rand(4, 32), block_size=64), INT_POS),
    Case("nf4_dequantize", fn(nf4_dequantize), "t", lambda: arg_default(t=nf4_quantize(rand(4, 32))), OBJECT),
    Case(
        "nf4_dequantize",
        fn(nf4_dequantize),
        "dtype",
        lambda: arg_default(t=nf4_quantize(rand(4, 32)), dtype=torch.float32),
        ("int_dtype", "str", "none"),
    ),
    # training
    Case("apply_lora", fn(apply_lora), "model", lora_call, OBJECT),
    Case("apply_lora", fn(apply_lora), "config", lora_call, OBJECT),
    Case("apply_lora", fn(apply_lora), "generator", lambda: lora_call(generator=None), ("str", "zero", "object")),
    Case("LoRALinear", forward, "x", lora_forward, FLOAT + ("empty",)),
    Case("LoRAConfig", lambda t, **kw: LoRAConfig(**kw), "r", lambda: arg_default(r=2), INT_POS),
    Case("LoRAConfig", lambda t, **kw: LoRAConfig(**kw), "alpha", lambda: arg_default(alpha=2.0), NUM_POS),
    Case(
        "LoRAConfig",
        lambda t, **kw: LoRAConfig(**kw),
        "target_modules",
        lambda: arg_default(target_modules=("qkv",)),
        ("none", "zero", "object"),
    ),
    Case("train", fn(train), "model", train_call, OBJECT),
    Case("train", fn(train), "batch_fn", train_call, OBJECT),
    Case("train", fn(train), "cfg", train_call, OBJECT),
    *[
        Case(
            "TrainConfig",
            lambda t, **kw: TrainConfig(**kw),
            name,
            lambda name=name, v=v: arg_default(**{name: v}),
            bads,
        )
        for name, v, bads in (
            ("steps", 1, INT_POS),
            ("warmup_steps", 0, INT_NONNEG),
            ("eval_every", 10, INT_POS),
            ("lr", 1e-3, NUM_POS),
            ("grad_clip", 1.0, ("zero", "negative_number", "nan_number", "inf_number", "str", "true")),
            ("min_lr_ratio", 0.1, ("negative_number", "nan_number", "inf_number", "str", "none", "true")),
            ("weight_decay", 0.1, ("negative_number", "nan_number", "inf_number", "str", "none", "true")),
            ("max_seconds", 1.0, ("zero", "negative_number", "nan_number", "str", "true")),
            ("progress", True, ("none", "str", "zero")),
            ("seed", 0, ("fraction", "str", "none", "true")),
        )
    ],
    # data
    Case(
        "CharTokenizer.encode", method("encode"), "text", lambda: tokenizer_call(text="abc"), ("none", "zero", "object")
    ),
    Case(
        "CharTokenizer.decode",
        method("decode"),
        "ids",
        lambda: tokenizer_call(ids=torch.tensor([2, 3, 4])),
        ("float_ids", "too_high", "negative_id", "none", "zero", "object", "rank_up"),
    ),
    Case(
        "CharTokenizer()",
        lambda t, **kw: CharTokenizer(**kw),
        "chars",
        lambda: arg_default(chars="abc"),
        ("none", "zero", "object"),
    ),
    Case(
        "pad_sequences",
        fn(pad_sequences),
        "seqs",
        lambda: arg_default(seqs=[[1, 2], [3]], pad_id=0),
        ("none", "zero", "object", "str"),
    ),
    Case(
        "pad_sequences",
        fn(pad_sequences),
        "pad_id",
        lambda: arg_default(seqs=[[1, 2], [3]], pad_id=0),
        ("fraction", "str", "none", "true"),
    ),
    Case(
        "get_batch",
        fn(get_batch),
        "data",
        lambda: arg_default(data=ids(40), block_size=4, batch_size=2),
        ("float_ids", "bool", "negative_id", "none", "str", "list", "rank_up", "empty"),
    ),
    Case(
        "get_batch", fn(get_batch), "block_size", lambda: arg_default(data=ids(40), block_size=4, batch_size=2), INT_POS
    ),
    Case(
        "get_batch", fn(get_batch), "batch_size", lambda: arg_default(data=ids(40), block_size=4, batch_size=2), INT_POS
    ),
    Case(
        "mlm_mask",
        fn(mlm_mask),
        "input_ids",
        lambda: arg_default(input_ids=ids(2, 5), mask_token_id=1, vocab_size=V),
        IDS + ("rank_up", "rank_1"),
    ),
    Case(
        "mlm_mask",
        fn(mlm_mask),
        "mask_prob",
        lambda: arg_default(input_ids=ids(2, 5), mask_token_id=1, vocab_size=V, mask_prob=0.15),
        ("negative_number", "nan_number", "inf_number", "str", "none", "true"),
    ),
    Case(
        "next_token_targets",
        fn(next_token_targets),
        "input_ids",
        lambda: arg_default(input_ids=ids(2, 5)),
        IDS[:2] + ("negative_id", "none", "str", "rank_up", "rank_1"),
    ),
    Case(
        "next_token_targets",
        fn(next_token_targets),
        "attention_mask",
        lambda: arg_default(input_ids=ids(2, 5), attention_mask=torch.ones(2, 5, dtype=torch.bool)),
        ("str", "rank_up", "rank_1"),
    ),  # 0/1 integers are a mask too
]


# ----------------------------------------------------------------------------- state, outputs, messages
def snapshot(obj):
    """A deep, comparable copy of what ``obj`` holds: tensors cloned, modules as (structure, modes, state)."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.detach().clone())
    if isinstance(obj, nn.Module):
        return (
            "module",
            [(n, type(m).__name__, m.training) for n, m in obj.named_modules()],
            [(n, p.requires_grad) for n, p in obj.named_parameters()],
            {k: snapshot(v) for k, v in obj.state_dict().items()},
            {k: snapshot(v) for k, v in vars(obj).items() if not k.startswith("_")},
        )
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [snapshot(o) for o in obj])
    if isinstance(obj, dict):
        return ("dict", {k: snapshot(v) for k, v in obj.items()})
    if isinstance(obj, (int, float, str, bool, type(None), torch.dtype, torch.device)):
        return obj
    if hasattr(obj, "__dict__"):
        return (type(obj).__name__, snapshot(vars(obj)))
    return ("opaque", type(obj).__name__)


def same(a, b, path="") -> None:
    """Assert two snapshots are equal: tensors bit for bit (``torch.equal``, NaN equal to NaN), dtypes, shapes."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), path
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (
            f"{path}: {a.dtype}{tuple(a.shape)} -> {b.dtype}{tuple(b.shape)}"
        )
        if a.is_floating_point() or a.is_complex():
            a, b = torch.view_as_real(a) if a.is_complex() else a, torch.view_as_real(b) if b.is_complex() else b
            assert torch.equal(a.nan_to_num(1e30), b.nan_to_num(1e30)), f"{path}: tensor contents changed"
        else:
            assert torch.equal(a, b), f"{path}: tensor contents changed"
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r:.80} -> {b!r:.80}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys {list(a)} -> {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    else:
        assert a == b, f"{path}: {a!r:.80} -> {b!r:.80}"


def tensors(out):
    """Every tensor in an output (tensors, tuples, lists, dicts, dataclasses)."""
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            yield from tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from tensors(o)
    elif hasattr(out, "__dataclass_fields__"):
        yield from tensors(vars(out))


def names_argument(message: str, names) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\b", message) for n in names)


def case_id(case: Case) -> str:
    return f"{case.name}-{case.arg}"


def params(cases):
    return [pytest.param(c, id=case_id(c), marks=c.marks) for c in cases]


# ----------------------------------------------------------------------------- the properties
@pytest.mark.parametrize("case", [pytest.param(c, id=case_id(c)) for c in CASES if c.runs and not c.marks])
def test_valid_arguments_run(case):
    """Each factory's arguments are accepted as they are: a refusal below is the bad value's doing."""
    target, kwargs = case.make()
    out = case.call(target, **kwargs)
    assert not any(t.isnan().any() for t in tensors(out) if t.is_floating_point())


@pytest.mark.parametrize("case", params(CASES))
@settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bad_input_is_refused_naming_it_and_changes_nothing(case, data):
    target, kwargs = case.make()
    kind = data.draw(st.sampled_from(case.bads), label="kind")
    bad = MUTATIONS[kind](kwargs.get(case.arg), data.draw)
    kwargs[case.arg] = bad
    before = snapshot(target)
    try:
        out = case.call(target, **kwargs)
    except (ValueError, TypeError) as err:
        assert names_argument(str(err), (case.arg, *case.names)), f"{kind}: {type(err).__name__}: {err}"
        same(before, snapshot(target), "state")
        return
    assert kind in MAY_PASS, f"{case.arg}={kind} ({bad!r:.80}) was accepted"
    assert not any(t.isnan().any() for t in tensors(out) if t.is_floating_point()), f"{kind} gave NaN"
