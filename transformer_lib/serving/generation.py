"""Text generation with a decoder-only model: greedy, temperature, top-k and top-p (nucleus) sampling.

Used in chapters 00, 05, 07, 09 and 11.

With ``use_cache=True`` the prompt is run once (the *prefill*) and each new token then costs one
forward pass over a single position, reading the past keys/values from a cache (``kv_cache.py``).
Without a cache every step recomputes the whole sequence.

Two ways through the model give the same numbers (``tests/serving/test_generate.py`` checks it at every step):

* ``model(token, cache=cache)``: the teaching path, the modules of chapters 02-06 with all their checks;
* ``decode_step(model, token, cache)``: the production path, the same blocks with fewer kernel launches per
  token (fused layer norm, masks built once per step instead of once per layer); ``fused_decode_step`` is the
  same without the checks, which ``generate`` makes once before its loop. At decoding time each kernel works on a
  single position, so launch and Python costs are a large share of the time on small models.

``fused_decode_step`` writes out GPT's pre-norm causal block (library ``LayerNorm``, ``MultiHeadAttention``,
``FeedForward``, eval mode, no hooks); ``fast_path_refusal(model)`` says why a model is not that, and such a model
decodes through its own modules. A non-causal model cannot use a cache at all (``cache_refusal``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..checks import check_bool, check_int, check_number
from .kv_cache import DynamicCache, SlidingWindowCache, StaticCache
from ..layers import DecoderLayer, FeedForward, LayerNorm, Residual
from ..multihead import MultiHeadAttention
from ..positional import alibi_bias


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    check_number("temperature", temperature, min=0, note="0 = greedy")
    check_int("top_k", top_k, min=1, optional=True)
    check_number("top_p", top_p, 0, 1, min_open=True, optional=True)


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Keep the ``top_k`` largest logits and/or the smallest set of tokens whose probability reaches ``top_p``.

    ``logits: (B, V)``; removed entries become ``-inf`` (sampling then never picks them). Tokens tied with
    the k-th largest are kept. top-p (Holtzman et al. 2020) is applied after top-k, on what top-k kept.
    """
    _check_sampling(1.0, top_k, top_p)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # (B, V)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # probability of the better tokens
        drop_sorted = mass_before >= top_p  # the better tokens already reach top_p: drop this one
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick one token per row of ``logits: (B, V)`` -> ``(B,)``; ``temperature == 0`` means greedy (argmax).

    Any ``temperature > 0`` samples ``softmax(logits / temperature)``, computed as ``(logits - max) / temperature``
    (the same distribution: softmax ignores a shift) so that it never overflows: a tiny temperature such as 1e-45,
    whose ``logits / temperature`` is ``inf`` in float32, gives the distribution's limit, the argmax (uniform over
    exactly tied maxima), with no threshold below which it switches to greedy.
    """
    _check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    x = logits.float()
    top = x.amax(dim=-1, keepdim=True)  # (B, 1)
    scaled = torch.where(x == top, 0.0, (x - top) / temperature)  # <= 0; the maxima exactly 0 even if T is 0 in fp32
    probs = filter_logits(scaled, top_k, top_p).softmax(dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


# ----------------------------------------------------------------------------- one decoding step
def cache_refusal(model) -> str | None:
    """Why ``model`` cannot decode with a KV cache, or None when it can.

    A cache holds each past position's keys and values as they were computed when that position was new.
    That is exact only if no position's output depends on later ones: every block's attention causal.
    """
    for i, block in enumerate(model.blocks):
        if not getattr(block, "causal", False):
            return (
                f"block {i}'s self-attention is not causal (variants.set_causal(model, False)): each past "
                "position would have to see the tokens after it, so its cached keys and values go stale"
            )
    return None


def _hooked(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _block_refusal(block) -> str | None:
    """Why ``decode_step`` does not implement this block, or None."""
    if type(block) is not DecoderLayer or block.cross_attn is not None or not block.causal:
        return "it is not a causal GPT DecoderLayer (self-attention and FFN only)"
    for res in (block.res_self, block.res_ffn):
        if type(res) is not Residual or not res.norm_first or type(res.norm) is not LayerNorm:
            norm = type(getattr(res, "norm", None)).__name__
            return (
                f"its residuals are not pre-norm with the library LayerNorm (found norm_first="
                f"{getattr(res, 'norm_first', None)}, norm {norm})"
            )
    if type(block.self_attn) is not MultiHeadAttention or type(block.ffn) is not FeedForward:
        return "its attention or FFN is not the library's MultiHeadAttention / FeedForward"
    if block.self_attn.window is not None:
        return f"its attention has a sliding window ({block.self_attn.window}); decode_step attends to every key"
    if any(
        _hooked(m)
        for m in (
            block,
            block.res_self,
            block.res_ffn,
            block.res_self.norm,
            block.res_ffn.norm,
            block.self_attn,
            block.ffn,
        )
    ):
        return "a module has forward hooks (decode_step would skip them)"
    return None


def fast_path_refusal(model) -> str | None:
    """Why ``decode_step``'s written-out block does not compute what ``model`` computes, or None when it does.

    ``decode_step`` implements a ``GPT`` in eval mode whose blocks are pre-norm, causal ``DecoderLayer``s made of
    the library's ``LayerNorm``, ``MultiHeadAttention`` and ``FeedForward``, with a final ``LayerNorm`` and no
    forward hooks on the modules it bypasses. Linear layers (plain, quantized, hooked) are called as modules.
    """
    if model.training:
        return "the model is in training mode (dropout)"
    if type(model.norm) is not LayerNorm:
        return f"its final norm is {type(model.norm).__name__}, not the library LayerNorm"
    if any(_hooked(m) for m in (model, model.norm, model.drop) + ((model.pos,) if model.pos is not None else ())):
        return "the model, its final norm, dropout or positional module has forward hooks"
    for i, block in enumerate(model.blocks):
        reason = _block_refusal(block)
        if reason is None and model.cfg.positional == "alibi" and block.self_attn.n_heads != model.cfg.n_heads:
            reason = f"its {block.self_attn.n_heads} heads differ from cfg.n_heads={model.cfg.n_heads} (ALiBi slopes)"
        if reason is not None:
            return f"block {i}: {reason}"
    return None


def _layer_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """The library ``LayerNorm`` as one fused kernel (statistics in fp32, as there)."""
    if x.dtype == norm.weight.dtype == torch.float32:
        return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, norm.eps)
    return F.layer_norm(x.float(), norm.weight.shape, norm.weight.float(), norm.bias.float(), norm.eps).to(x.dtype)


class MatvecWeights:
    """``(in, out)`` copies of a GPT's plain ``nn.Linear`` weights (blocks and head), for decoding.

    Decoding multiplies each weight by one vector per row, a matrix-vector product that streams the whole
    matrix from memory. ``nn.Linear`` stores ``W`` as ``(out, in)``; on the x86-64 CPU (MKL) this book was
    built on, the same product read ``W`` faster stored as ``(in, out)``, GPT-2's ``Conv1D`` layout
    (``benchmarks/bench_kv_cache.py`` times decoding with both). The copies double the weights' memory.
    Layers with hooks, of another type (e.g. the library's ``QuantLinear``) or whose weight is a tensor subclass
    (e.g. torchao's quantized weights, which keep ``nn.Linear`` as the module) are left out: they run as modules.

    ``generate`` builds one per call unless it is given one: build it once after loading a model (as serving
    engines repack weights at load time) and pass it to every call. Each copy remembers its source weight's
    version counter; ``check(model)`` refuses copies whose weights have changed since (training, ``load_state_dict``,
    any in-place op; writes through ``weight.data`` bypass the counter and are not seen).
    """

    def __init__(self, model):
        layers = [model.lm_head] + [
            lin for b in model.blocks for lin in (b.self_attn.qkv, b.self_attn.out, b.ffn.up, b.ffn.down)
        ]
        self.copies = {
            lin: lin.weight.detach().t().contiguous()
            for lin in layers
            if type(lin) is nn.Linear
            and type(lin.weight) in (nn.Parameter, torch.Tensor)
            and not (lin._forward_hooks or lin._forward_pre_hooks)
        }
        self._sources = {lin: (lin.weight, _version(lin.weight)) for lin in self.copies}

    def get(self, lin):
        """The ``(in, out)`` weight of ``lin``, or None: it runs as a module."""
        return self.copies.get(lin)

    def __contains__(self, lin) -> bool:
        return lin in self.copies

    def __len__(self) -> int:
        return len(self.copies)

    def check(self, model) -> None:
        """Raise ``ValueError`` unless every copy belongs to ``model`` and its source weight is unchanged."""
        mine = set(model.modules())
        for lin, (weight, version) in self._sources.items():
            if lin not in mine:
                raise ValueError(
                    "matvec_weights holds layers of another model: build it with "
                    "MatvecWeights(model) for the model you decode"
                )
            if lin.weight is not weight or _version(weight) != version:
                raise ValueError(
                    "matvec_weights is stale: a weight changed after MatvecWeights(model) copied it; build a new one"
                )


def _version(t: torch.Tensor) -> int | None:
    """The in-place-write counter of ``t`` (None for tensors made under ``torch.inference_mode``, which have none)."""
    return None if t.is_inference() else t._version


def _linear(lin, x: torch.Tensor, matvec_weights: MatvecWeights | None) -> torch.Tensor:
    """``lin(x)`` for ``x: (B, 1, in)``, through the ``(in, out)`` copy of its weight when there is one."""
    w = None if matvec_weights is None else matvec_weights.get(lin)
    if w is None:
        return lin(x)
    x2 = x.view(x.shape[0], -1)  # (B, in)
    y = torch.mm(x2, w) if lin.bias is None else torch.addmm(lin.bias, x2, w)  # (B, out)
    return y.view(x.shape[0], 1, -1)


def _attend(attn, h: torch.Tensor, cache, past: int, mask, matvec_weights) -> torch.Tensor:
    """``MultiHeadAttention.forward(h, is_causal=True, cache=cache)`` for one new position per row."""
    B, H, H_kv = h.shape[0], attn.n_heads, attn.n_kv_heads
    qkv = _linear(attn.qkv, h, matvec_weights)  # (B, 1, (H + 2 H_kv) d_head): [q heads | k heads | v heads]
    q, k, v = qkv.view(B, 1, H + 2 * H_kv, attn.d_head).transpose(1, 2).split([H, H_kv, H_kv], dim=1)
    if attn.rope is not None:
        q, k = attn.rope(q, offset=past), attn.rope(k, offset=past)
    k, v = cache.update(k, v, attn.layer_idx)  # (B, H_kv, past + 1, d_head)
    # the newest position sees every cached key: no causal mask; grouped kv heads are shared in the kernel
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=H_kv != H)  # (B, H, 1, d_head)
    return _linear(attn.out, y.transpose(1, 2).reshape(B, 1, H * attn.d_head), matvec_weights)  # (B, 1, d_model)


@torch.inference_mode()
def decode_step(
    model,
    token: torch.Tensor,
    cache,
    position: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    matvec_weights: MatvecWeights | None = None,
):
    """One new token through a ``GPT``, reading and extending ``cache``: logits ``(B, V)``, checked.

    ``token: (B, 1)`` ids; ``position: (B, 1)`` per-row positions for learned/sinusoidal tables (default: the cache
    length); ``attention_mask: (B, past + 1)`` bool; ``matvec_weights``: optional ``MatvecWeights(model)``.
    A non-causal model raises ``ValueError`` (``cache_refusal``); one that ``fused_decode_step`` does not write out
    (``fast_path_refusal``) runs through its modules; any other takes ``fused_decode_step``, the same numbers."""
    _check_cacheable(model)
    if fast_path_refusal(model) is not None:
        return model(token, cache=cache, attention_mask=attention_mask, position_ids=position)[0][:, -1]
    return fused_decode_step(model, token, cache, position, attention_mask, matvec_weights)


@torch.inference_mode()
def fused_decode_step(
    model,
    token: torch.Tensor,
    cache,
    position: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    matvec_weights: MatvecWeights | None = None,
):
    """``decode_step`` without its checks (``generate`` makes them once before its loop): the pre-norm GPT block
    written out with fewer kernels. Only for a model whose ``cache_refusal`` and ``fast_path_refusal`` are None."""
    past = cache.get_seq_length(0)
    x = model.tok_emb(token)  # (B, 1, d_model)
    table = model.position_table()
    if table is not None:
        x = x + (table[past] if position is None else table[position]).to(x.dtype)
    mask = None if attention_mask is None else attention_mask[:, None, None, :]  # (B, 1, 1, past + 1)
    if model.cfg.positional == "alibi":
        bias = alibi_bias(model.cfg.n_heads, 1, past + 1, device=x.device, dtype=x.dtype)  # (H, 1, past + 1)
        mask = bias if mask is None else bias.masked_fill(~mask, torch.finfo(x.dtype).min)  # (B, H, 1, past + 1)
    for block in model.blocks:  # pre-norm GPT block: x + attn(norm(x)), then x + ffn(norm(x))
        x = x + _attend(block.self_attn, _layer_norm(block.res_self.norm, x), cache, past, mask, matvec_weights)
        ffn = block.ffn  # eval mode: its dropout is the identity
        up = _linear(ffn.up, _layer_norm(block.res_ffn.norm, x), matvec_weights)
        x = x + _linear(ffn.down, ffn.act(up), matvec_weights)
    return _linear(model.lm_head, _layer_norm(model.norm, x), matvec_weights)[:, -1]  # (B, V)


# ----------------------------------------------------------------------------- the loop
CACHE_IMPLEMENTATIONS = ("static", "dynamic", "sliding")


def _make_cache(kind: str, model, batch: int, max_len: int):
    """A new cache of ``kind``, one of ``CACHE_IMPLEMENTATIONS`` (``_check_generate_inputs`` checked it)."""
    return {
        "static": lambda: StaticCache.for_model(model, batch, max_len),
        "dynamic": DynamicCache,
        "sliding": lambda: SlidingWindowCache(model.cfg.window),
    }[kind]()


def _check_cacheable(model) -> None:
    reason = cache_refusal(model)
    if reason is not None:
        raise ValueError(f"this model cannot decode with a KV cache: {reason}; pass use_cache=False")


def _check_sliding(model, attention_mask) -> None:
    """``cache_implementation='sliding'`` needs a windowed model; its cache drops keys that padding masks and ALiBi
    still count."""
    if getattr(model.cfg, "window", None) is None:
        raise ValueError(
            "cache_implementation='sliding' needs a model with sliding-window attention "
            "(GPTConfig.window), got window=None: this model attends to every past key; use "
            "cache_implementation='static' or 'dynamic'"
        )
    if model.cfg.positional == "alibi" or attention_mask is not None:
        raise ValueError(
            f"cache_implementation='sliding' takes no attention_mask and no ALiBi (positional="
            f"{model.cfg.positional!r}, attention_mask given: {attention_mask is not None}); "
            "use cache_implementation='static'"
        )


def _check_generate_inputs(model, prompt_ids, max_new_tokens, use_cache, cache_implementation, attention_mask) -> None:
    block = model.cfg.block_size
    if (
        not isinstance(prompt_ids, torch.Tensor)
        or prompt_ids.dim() != 2
        or prompt_ids.shape[1] < 1
        or prompt_ids.dtype not in (torch.long, torch.int)
    ):
        got = (
            f"{prompt_ids.dtype} {tuple(prompt_ids.shape)}"
            if isinstance(prompt_ids, torch.Tensor)
            else type(prompt_ids).__name__
        )
        raise ValueError(f"prompt_ids must be an integer tensor (B, T) with T >= 1, got {got}")
    B, T = prompt_ids.shape
    check_int("max_new_tokens", max_new_tokens, min=0)
    check_bool("use_cache", use_cache)
    if use_cache:
        _check_cacheable(model)
    if T > block:
        raise ValueError(f"prompt length {T} exceeds the model's context block_size={block}")
    if use_cache and T + max_new_tokens > block:
        raise ValueError(
            f"prompt length {T} + max_new_tokens {max_new_tokens} exceeds block_size={block}, "
            "which a cache cannot slide past; use fewer tokens or use_cache=False"
        )
    if use_cache and cache_implementation not in CACHE_IMPLEMENTATIONS:
        raise ValueError(
            f"cache_implementation must be 'static' or 'dynamic', got {cache_implementation!r} "
            "(or 'sliding' for a model with "
            "GPTConfig.window)"
        )
    if use_cache and cache_implementation == "sliding":
        _check_sliding(model, attention_mask)
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != (B, T):
            got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask)
            raise ValueError(f"attention_mask must be a (B, T) = {(B, T)} tensor, got {got}")
        m = attention_mask.bool()
        if not m[:, -1].all() or (m[:, 1:].int() < m[:, :-1].int()).any():
            raise ValueError(
                "attention_mask must be left-padded: False only before the first real token of "
                "each row, and every row's last token real"
            )


@torch.inference_mode()
def generate(
    model,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    cache_implementation: str = "static",
    seed: int | None = None,
    attention_mask: torch.Tensor | None = None,
    return_logits: bool = False,
    matvec_weights: bool | MatvecWeights | None = None,
):
    """Continue ``prompt_ids: (B, T)`` by ``max_new_tokens`` tokens; returns ``(B, T + max_new_tokens)`` ids.

    Args:
        temperature: 0 = greedy; otherwise divide the logits by it before sampling (``sample_next``: any
            positive value, however small, is safe and tends to greedy).
        top_k, top_p: optional filters applied before sampling (``filter_logits``).
        use_cache: reuse past keys/values, in a cache built for this call.
        cache_implementation: which cache (Hugging Face's name for it): ``'static'`` preallocated, ``'dynamic'``
            concatenating or ``'sliding'``, the last ``window`` positions of a sliding-window model
            (``kv_cache.SlidingWindowCache``). ``cache`` elsewhere in the library is a cache object.
        seed: seeds the sampling generator (same seed, same text, with or without a cache).
        attention_mask: ``(B, T)``, False on the left padding of shorter prompts. Each row then gets
            positions counted from its first real token, so it continues exactly as that prompt alone.
        return_logits: also return the ``(B, max_new_tokens, V)`` fp32 logits of every step.
        matvec_weights: decode through ``(in, out)`` weight copies (default: on CPU, where it was measured);
            True/None build them for this call, or pass a ``MatvecWeights(model)`` built once to reuse it.

    A prompt longer than ``block_size`` raises ``ValueError``. Without a cache a sequence that outgrows the context
    is cropped to its last ``block_size`` tokens; with one ``T + max_new_tokens`` must fit (positions cannot slide).
    With a cache, a model ``fused_decode_step`` implements (``fast_path_refusal(model) is None``) decodes with it,
    any other through its own forward; a model whose attention is not causal refuses ``use_cache=True``.
    """
    _check_generate_inputs(model, prompt_ids, max_new_tokens, use_cache, cache_implementation, attention_mask)
    _check_sampling(temperature, top_k, top_p)
    B, T = prompt_ids.shape
    N, device = max_new_tokens, prompt_ids.device
    gen = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    ids = torch.empty(B, T + N, dtype=prompt_ids.dtype, device=device)  # filled in place: no cat per step
    ids[:, :T] = prompt_ids
    steps = torch.empty(B, N, model.cfg.vocab_size, device=device) if return_logits else None
    mask, positions = _left_padding(attention_mask, B, T, N)
    if N == 0:
        return (ids, steps) if return_logits else ids
    fast = use_cache and fast_path_refusal(model) is None
    copies = _matvec_copies(model, matvec_weights, fast, device)
    if use_cache:
        logits, next_logits = _prefill(model, prompt_ids, N, mask, positions, cache_implementation, fast, copies)
    else:
        logits, next_logits = _recompute(model, ids, mask, T), lambda ids, t: _recompute(model, ids, mask, t)
    for i in range(N):
        if return_logits:
            steps[:, i] = logits
        ids[:, T + i] = sample_next(logits, temperature, top_k, top_p, gen)
        if i < N - 1:
            logits = next_logits(ids, T + i + 1)  # (B, V) after the first T + i + 1 tokens
    return (ids, steps) if return_logits else ids


def _left_padding(attention_mask: torch.Tensor | None, B: int, T: int, N: int):
    """``mask: (B, T + N)`` True on real tokens, prompt ``positions: (B, T)`` from each row's first; or None, None."""
    if attention_mask is None or attention_mask.bool().all():
        return None, None
    mask = torch.ones(B, T + N, dtype=torch.bool, device=attention_mask.device)
    mask[:, :T] = attention_mask.bool()
    return mask, (mask[:, :T].long().cumsum(-1) - 1).clamp_min(0)


def _matvec_copies(model, matvec_weights, fast: bool, device) -> MatvecWeights | None:
    """The weight-copy policy (``generate``'s ``matvec_weights``): the ``MatvecWeights`` to decode with, or None."""
    if matvec_weights is None:
        matvec_weights = device.type == "cpu"
    if isinstance(matvec_weights, MatvecWeights):
        matvec_weights.check(model)
        return matvec_weights if fast else None
    if matvec_weights is True or matvec_weights is False:
        return MatvecWeights(model) if fast and matvec_weights else None
    raise ValueError(f"matvec_weights must be a bool, None or MatvecWeights(model), got {matvec_weights!r:.60}")


def _prefill(
    model,
    prompt_ids: torch.Tensor,
    N: int,
    mask,
    positions,
    cache_implementation: str,
    fast: bool,
    copies: MatvecWeights | None,
):
    """The prompt once into a new cache: its last logits ``(B, V)`` and ``next_logits(ids, t)`` (decode token t-1)."""
    B, T = prompt_ids.shape
    cache = _make_cache(cache_implementation, model, B, T + N)
    logits = model(
        prompt_ids, cache=cache, attention_mask=None if mask is None else mask[:, :T], position_ids=positions
    )[0][:, -1]  # (B, V)
    position = None if positions is None else positions[:, -1:]  # (B, 1): the last prompt token's

    def next_logits(ids: torch.Tensor, t: int) -> torch.Tensor:
        nonlocal position
        token, step_mask = ids[:, t - 1 : t], None if mask is None else mask[:, :t]  # (B, 1), (B, t)
        position = None if position is None else position + 1
        if fast:
            return fused_decode_step(model, token, cache, position, step_mask, copies)
        return model(token, cache=cache, attention_mask=step_mask, position_ids=position)[0][:, -1]

    return logits, next_logits


def _recompute(model, ids: torch.Tensor, mask: torch.Tensor | None, t: int) -> torch.Tensor:
    """No cache: run the model on the last ``block_size`` of the first ``t`` tokens; logits of the last ``(B, V)``."""
    start = max(0, t - model.cfg.block_size)
    if mask is None:
        return model(ids[:, start:t])[0][:, -1]
    window = mask[:, start:t]  # (B, <= block)
    positions = (window.long().cumsum(-1) - 1).clamp_min(0)
    return model(ids[:, start:t], attention_mask=window, position_ids=positions)[0][:, -1]
