"""A LLaMA-style decoder (Touvron et al. 2023): GPT's pre-norm stack with four replacements.

Used in chapter 11.

* **RMSNorm** instead of LayerNorm (``norms.py``), before each sub-layer and at the end;
* **SwiGLU** instead of the GELU feed-forward (``activations.py``), hidden size about ``8/3 d_model``;
* **RoPE** on queries and keys instead of learned positions, in the *half-split* layout (``HalfSplitRotary``);
* **grouped-query attention** (``n_kv_heads < n_heads``, Ainslie et al. 2023) and no biases anywhere.

``n_experts > 0`` swaps each block's SwiGLU for a sparse mixture of SwiGLU experts (``moe.MoE``): Mixtral's
block (Jiang et al. 2024). The attention is the library's ``GroupedQueryAttention`` and the cache the library's
(``serving/kv_cache.py``), threaded through the blocks with a layer index, so ``serving.generate`` decodes this
model.
``hf_llama_to_ours`` renames a Hugging Face ``LlamaForCausalLM`` / ``MixtralForCausalLM`` state dict to ours;
``tests/models/test_llama.py`` checks the logits against Hugging Face's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_empty, check_equal, check_ids, check_int, check_number, check_tensor
from ..blocks.activations import SwiGLU, swiglu_hidden
from .transformer import ID_DTYPES, init_weights
from ..blocks.moe import MoE
from ..blocks.grouped_query import GroupedQueryAttention
from ..blocks.norms import RMSNorm
from ..utils.params import count_parameters
from ..blocks.positional import RotaryEmbedding


# ----------------------------------------------------------------------------- RoPE, LLaMA's layout
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dim split in two halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class HalfSplitRotary(RotaryEmbedding):
    """RoPE as Hugging Face's LLaMA applies it: feature ``i`` is paired with ``i + d_head/2`` (not ``2i`` with
    ``2i + 1``, the interleaved layout of ``RotaryEmbedding``, RoFormer and Meta's original LLaMA code).

    ``x: (B, H, T, d_head)``: ``x cos(pos theta) + rotate_half(x) sin(pos theta)``, the angles of
    ``RotaryEmbedding.angles``. Both layouts give scores that depend only on ``m - n``; they differ by a fixed
    permutation of the features (``half_split_order``), which converting Meta's weights to Hugging Face's applies
    to the rows of W_Q and W_K.
    """

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        d = 2 * self.inv_freq.shape[0]  # d_head
        check_tensor("x", x, shape=(..., None, d), floating=True, note=f"d_head={d}")  # cheap: no value scan
        ang = self.angles(x.shape[-2], offset, x.device)  # (T, d_head/2), checks offset
        ang = torch.cat((ang, ang), dim=-1)  # (T, d_head): theta_i for feature i and i + d/2
        xf = x.float()
        return (xf * ang.cos() + rotate_half(xf) * ang.sin()).to(x.dtype)


def half_split_order(d_head: int) -> torch.Tensor:
    """Indices ``[0, d/2, 1, d/2 + 1, ...]``: ``x[..., order]`` puts each half-split pair side by side, so
    ``HalfSplitRotary(x) == RotaryEmbedding(x[..., order])[..., argsort(order)]``."""
    half = torch.arange(d_head // 2)
    return torch.stack((half, half + d_head // 2), dim=-1).flatten()


# ----------------------------------------------------------------------------- the model
@dataclass
class LlamaConfig:
    """A LLaMA-style decoder's sizes (Hugging Face names in comments). ``d_ff`` defaults to LLaMA's
    ``swiglu_hidden(d_model, multiple_of=8)``; ``n_kv_heads`` to ``n_heads`` (multi-head attention).

    ``n_experts = 0``: dense SwiGLU blocks (LLaMA); ``> 0``: a mixture of that many SwiGLU experts of size ``d_ff``
    per block, ``top_k`` per token (Mixtral: 8 and 2), ``capacity_factor`` as in ``moe.MoE`` (None = Mixtral's
    none), and ``aux_loss_coef`` times the mean load-balancing loss of the blocks added to the training loss
    (Switch: 0.01; Hugging Face's Mixtral: 0.001 by default).
    """

    vocab_size: int
    block_size: int = 256  # context used by generate (RoPE itself has no table)
    n_layers: int = 4  # num_hidden_layers
    n_heads: int = 4  # num_attention_heads
    n_kv_heads: int | None = None  # num_key_value_heads
    d_model: int = 128  # hidden_size
    d_ff: int | None = None  # intermediate_size
    rope_base: float = 10000.0  # rope_theta
    eps: float = 1e-6  # rms_norm_eps
    tie_embeddings: bool = False  # tie_word_embeddings
    n_experts: int = 0  # num_local_experts
    top_k: int = 2  # num_experts_per_tok
    capacity_factor: float | None = None
    aux_loss_coef: float = 0.0  # router_aux_loss_coef

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layers", "n_heads", "d_model"):
            check_int(f"LlamaConfig.{name}", getattr(self, name), min=1)
        self.n_kv_heads = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        self.d_ff = swiglu_hidden(self.d_model, multiple_of=8) if self.d_ff is None else self.d_ff
        note = f"n_heads={self.n_heads} times an even d_head: RoPE rotates feature pairs"
        check_int("LlamaConfig.d_model", self.d_model, multiple_of=2 * self.n_heads, note=note)
        check_int("LlamaConfig.n_kv_heads", self.n_kv_heads, min=1)
        note = f"n_kv_heads={self.n_kv_heads} key/value heads, each shared by n_heads // n_kv_heads query heads"
        check_int("LlamaConfig.n_heads", self.n_heads, multiple_of=self.n_kv_heads, note=note)
        check_int("LlamaConfig.n_experts", self.n_experts, min=0, note="0 = dense")
        if self.n_experts:  # a mixture: each token goes to top_k of the n_experts
            check_int("LlamaConfig.top_k", self.top_k, min=1, max=self.n_experts, note="experts per token")
        check_number("LlamaConfig.aux_loss_coef", self.aux_loss_coef, min=0)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class LlamaBlock(nn.Module):
    """``x + attn(RMSNorm(x))``, then ``x + ffn(RMSNorm(x))``; ``ffn`` is a ``SwiGLU`` or a ``MoE``."""

    def __init__(self, cfg: LlamaConfig, layer_idx: int, rope: nn.Module):
        super().__init__()
        self.causal = True  # generate's cache check reads it
        self.attn_norm = RMSNorm(cfg.d_model, cfg.eps)
        self.self_attn = GroupedQueryAttention(
            cfg.d_model, cfg.n_heads, cfg.n_kv_heads, bias=False, rope=rope, layer_idx=layer_idx
        )
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.eps)
        self.ffn = (
            SwiGLU(cfg.d_model, cfg.d_ff)
            if cfg.n_experts == 0
            else MoE(cfg.d_model, cfg.d_ff, cfg.n_experts, cfg.top_k, cfg.capacity_factor)
        )
        self.self_weights = None  # (B, H, T, Tk) after a forward with need_weights=True

    def forward(self, x, attention_mask=None, need_weights: bool = False, cache=None):
        a, self.self_weights = self.self_attn(
            self.attn_norm(x), attention_mask=attention_mask, is_causal=True, need_weights=need_weights, cache=cache
        )
        x = x + a
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    """Decoder-only LM. ``idx: (B, T)`` ids -> ``(logits (B, T, V), loss or None)``, as ``models.GPT``."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = c = cfg
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        rope = HalfSplitRotary(c.d_head, c.rope_base)
        self.blocks = nn.ModuleList(LlamaBlock(c, i, rope) for i in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.apply(init_weights)  # N(0, 0.02), Hugging Face's initializer_range; norms start at 1
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        cache=None,
        attention_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        position_ids: torch.Tensor | None = None,
    ):
        """``cache``: a ``kv_cache`` object; ``attention_mask: (B, past + T)`` bool, True on real tokens.
        ``position_ids`` is accepted for ``generate`` and ignored: RoPE depends only on distances, which left padding
        does not change. With ``targets`` (-100 = ignore) the loss is the cross-entropy plus, for a mixture,
        ``aux_loss_coef`` times ``balance_loss()``."""
        check_ids("idx", idx, self.cfg.vocab_size, shape=("B", "T"), dtype=ID_DTYPES)
        (B, T), past = idx.shape, 0 if cache is None else cache.get_seq_length(0)
        check_tensor("attention_mask", attention_mask, (B, past + T), dtype=torch.bool, optional=True)
        check_ids("targets", targets, self.cfg.vocab_size, shape=(B, T), ignore_index=-100, optional=True)
        x = self.tok_emb(idx)  # (B, T, d_model)
        for block in self.blocks:
            x = block(x, attention_mask=attention_mask, need_weights=need_weights, cache=cache)
        logits = self.lm_head(self.norm(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten().long(), ignore_index=-100)
            if self.cfg.n_experts and self.cfg.aux_loss_coef > 0:
                loss = loss + self.cfg.aux_loss_coef * self.balance_loss()
        return logits, loss

    def balance_loss(self) -> torch.Tensor:
        """Mean over blocks of each mixture's load-balancing loss in the last forward (``moe.load_balancing_loss``)."""
        check_int("LlamaConfig.n_experts", self.cfg.n_experts, min=1, note="balance_loss() needs a mixture")
        return torch.stack([b.ffn.balance_loss() for b in self.blocks]).mean()

    def num_params(self) -> int:
        """The model's parameters, each tensor once (``params.count_parameters``)."""
        return count_parameters(self)


# ----------------------------------------------------------------------------- Hugging Face weights
_LAYER = {  # Hugging Face name after "model.layers.{i}." -> ours after "blocks.{i}."
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.o_proj.weight": "self_attn.out.weight",  # W_O
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn.gate.weight",  # dense SwiGLU
    "mlp.up_proj.weight": "ffn.up.weight",
    "mlp.down_proj.weight": "ffn.down.weight",
    "mlp.gate.weight": "ffn.router.weight",  # Mixtral's router
}
_OUTSIDE = {
    "model.embed_tokens.weight": "tok_emb.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def hf_llama_to_ours(state_dict: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face ``LlamaForCausalLM`` (or ``MixtralForCausalLM``) state dict to ``Llama``'s names.

    ``q_proj``, ``k_proj``, ``v_proj`` (``(H d_head, d)``, ``(H_kv d_head, d)`` twice) are stacked into our
    ``self_attn.qkv``; Mixtral's stacked experts ``mlp.experts.gate_up_proj: (E, 2 d_ff, d)`` and
    ``down_proj: (E, d, d_ff)`` are split into one ``SwiGLU`` per expert. Rotary buffers are not weights.
    """
    sd = {k: v for k, v in state_dict.items() if not k.endswith("rotary_emb.inv_freq")}
    out = {ours: sd.pop(theirs) for theirs, ours in _OUTSIDE.items() if theirs in sd}
    for i in range(n_layers):
        src, dst = f"model.layers.{i}.", f"blocks.{i}."
        q, k, v = (sd.pop(f"{src}self_attn.{n}_proj.weight") for n in "qkv")
        out[f"{dst}self_attn.qkv.weight"] = torch.cat([q, k, v])  # [W_Q; W_K; W_V]
        for theirs, ours in _LAYER.items():
            if src + theirs in sd:
                out[dst + ours] = sd.pop(src + theirs)
        if f"{src}mlp.experts.gate_up_proj" in sd:
            gate_up, down = sd.pop(f"{src}mlp.experts.gate_up_proj"), sd.pop(f"{src}mlp.experts.down_proj")
            d_ff = gate_up.shape[1] // 2
            for e in range(gate_up.shape[0]):
                out[f"{dst}ffn.experts.{e}.gate.weight"] = gate_up[e, :d_ff]
                out[f"{dst}ffn.experts.{e}.up.weight"] = gate_up[e, d_ff:]
                out[f"{dst}ffn.experts.{e}.down.weight"] = down[e]
    check_empty("state_dict's keys left over", sd, note=f"keys Llama(n_layers={n_layers}) cannot place")
    return out


def config_from_hf(hf_config) -> LlamaConfig:
    """Our ``LlamaConfig`` from a Hugging Face ``LlamaConfig`` / ``MixtralConfig`` object (no sliding window)."""
    rope = getattr(hf_config, "rope_parameters", None) or {}
    check_equal("hf_config's rope_type", rope.get("rope_type", "default"), "default", note="plain RoPE only")
    for bias in ("attention_bias", "mlp_bias"):
        check_equal(f"hf_config.{bias}", bool(getattr(hf_config, bias, False)), False, note="Llama has no biases")
    head_dim, d_head = getattr(hf_config, "head_dim", None), hf_config.hidden_size // hf_config.num_attention_heads
    if head_dim is not None:
        check_equal("hf_config.head_dim", head_dim, d_head, note="hidden_size // num_attention_heads")
    return LlamaConfig(
        vocab_size=hf_config.vocab_size,
        block_size=hf_config.max_position_embeddings,
        n_layers=hf_config.num_hidden_layers,
        n_heads=hf_config.num_attention_heads,
        n_kv_heads=hf_config.num_key_value_heads,
        d_model=hf_config.hidden_size,
        d_ff=hf_config.intermediate_size,
        rope_base=float(rope.get("rope_theta", 10000.0)),
        eps=hf_config.rms_norm_eps,
        tie_embeddings=bool(hf_config.tie_word_embeddings),
        n_experts=getattr(hf_config, "num_local_experts", 0) or 0,
        top_k=getattr(hf_config, "num_experts_per_tok", 2) or 2,
    )
