"""From GPT-2 to LLaMA, Mistral, Mixtral, Qwen2 and Phi-3: published shapes as data, parameters counted from them.

Used in chapter 11.

``FAMILY`` holds each model's configuration as its authors published it (the paper's architecture table or the
``config.json`` released with the weights; ``source`` is the citation key in ``book/references.bib``).
``param_counts`` counts total and active parameters from those numbers alone; ``tests/models/test_model_family.py``
checks the formula against Hugging Face models of each family built at small sizes. Chapter 11 prints the table,
and chapter 09's ``model_memory.memory_table`` turns the counts into bytes per format.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """A decoder's published shape. ``ffn``: ``"gelu"`` (two matrices with biases) or ``"swiglu"`` (three, none)."""

    name: str
    source: str  # citation key
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    context: int  # tokens the model was trained to attend over
    norm: str  # "LayerNorm" or "RMSNorm"
    ffn: str  # "gelu" or "swiglu"
    positions: str  # "learned" or "RoPE"
    n_experts: int = 0  # 0: dense
    top_k: int = 0  # experts per token
    tied: bool = False  # output head shares the embedding matrix
    bias: bool = False  # every linear layer has a bias (GPT-2)
    qkv_bias: bool = False  # only the q, k, v projections have biases (Qwen2)
    window: int | None = None  # sliding-window attention (Mistral 7B)

    @property
    def attention(self) -> str:
        """``"MHA"``, ``"MQA"`` or ``"GQA-g"`` (g kv heads), with the sliding window when there is one."""
        kind = "MHA" if self.n_kv_heads == self.n_heads else "MQA" if self.n_kv_heads == 1 else f"GQA-{self.n_kv_heads}"
        return kind if self.window is None else f"{kind}, window {self.window:,}"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def _ffn_params(s: ModelShape) -> int:
    if s.ffn == "gelu":
        return 2 * s.d_model * s.d_ff + (s.d_ff + s.d_model) * s.bias
    if s.ffn == "swiglu":
        return 3 * s.d_model * s.d_ff
    raise ValueError(f"ffn must be 'gelu' or 'swiglu', got {s.ffn!r}")


def param_counts(s: ModelShape) -> dict[str, int]:
    """``{"total", "active"}`` parameters: active = what one token's forward uses (``top_k`` of the experts).

    Per layer: W_Q and W_O ``(d, H d_head)``, W_K and W_V ``(d, H_kv d_head)`` (+ biases as the flags say); the
    feed-forward (times ``n_experts``, plus a router ``(d, E)``, for a mixture); two norms (LayerNorm: weight and
    bias; RMSNorm: weight). Outside: token embeddings, learned positions, a final norm, an untied head.
    """
    d, q, kv = s.d_model, s.n_heads * s.d_head, s.n_kv_heads * s.d_head
    attn = 2 * d * q + 2 * d * kv + (q + 2 * kv + d) * s.bias + (q + 2 * kv) * s.qkv_bias
    norm = {"LayerNorm": 2 * d, "RMSNorm": d}[s.norm]
    ffn = _ffn_params(s)
    experts = max(s.n_experts, 1)
    router = s.n_experts * d
    layer_total = attn + experts * ffn + router + 2 * norm
    layer_active = attn + (s.top_k if s.n_experts else 1) * ffn + router + 2 * norm
    outside = s.vocab_size * d + (s.context * d if s.positions == "learned" else 0) + norm
    outside += 0 if s.tied else s.vocab_size * d
    return {"total": s.n_layers * layer_total + outside, "active": s.n_layers * layer_active + outside}


FAMILY = (
    # GPT-2 small: 12 layers, 768 wide (Radford et al. 2019; Hugging Face config "gpt2")
    ModelShape(
        "GPT-2 small",
        "radford2019language",
        12,
        768,
        12,
        12,
        3072,
        50257,
        1024,
        "LayerNorm",
        "gelu",
        "learned",
        tied=True,
        bias=True,
    ),
    # LLaMA 2 7B: table 1 of Touvron et al. 2023b, config of meta-llama/Llama-2-7b-hf (7B uses full MHA)
    ModelShape("LLaMA 2 7B", "touvron2023llama2", 32, 4096, 32, 32, 11008, 32000, 4096, "RMSNorm", "swiglu", "RoPE"),
    # Llama 3 8B: table 3 of the Llama 3 herd paper (Grattafiori et al. 2024)
    ModelShape(
        "Llama 3 8B", "grattafiori2024llama3", 32, 4096, 32, 8, 14336, 128256, 8192, "RMSNorm", "swiglu", "RoPE"
    ),
    # Mistral 7B: table 1 of Jiang et al. 2023 (dense; sliding window 4096, context 8192)
    ModelShape(
        "Mistral 7B", "jiang2023mistral", 32, 4096, 32, 8, 14336, 32000, 8192, "RMSNorm", "swiglu", "RoPE", window=4096
    ),
    # Mixtral 8x7B: table 1 of Jiang et al. 2024 (8 experts, 2 per token, context 32768)
    ModelShape(
        "Mixtral 8x7B",
        "jiang2024mixtral",
        32,
        4096,
        32,
        8,
        14336,
        32000,
        32768,
        "RMSNorm",
        "swiglu",
        "RoPE",
        n_experts=8,
        top_k=2,
    ),
    # Qwen2-0.5B: table 1 of Yang et al. 2024 and its config.json (q/k/v biases, tied embeddings)
    ModelShape(
        "Qwen2-0.5B",
        "yang2024qwen2",
        24,
        896,
        14,
        2,
        4864,
        151936,
        32768,
        "RMSNorm",
        "swiglu",
        "RoPE",
        tied=True,
        qkv_bias=True,
    ),
    # Phi-3-mini (4k): Abdin et al. 2024 and config.json of microsoft/Phi-3-mini-4k-instruct
    ModelShape("Phi-3-mini", "abdin2024phi3", 32, 3072, 32, 32, 8192, 32064, 4096, "RMSNorm", "swiglu", "RoPE"),
)


def family_rows(shapes=FAMILY) -> list[dict]:
    """One dict per model: the table's columns (norm, activation, positions, attention, experts, parameters)."""
    rows = []
    for s in shapes:
        counts = param_counts(s)
        rows.append(
            {
                "model": s.name,
                "norm": s.norm,
                "activation": "GELU" if s.ffn == "gelu" else "SwiGLU",
                "positions": s.positions,
                "attention": s.attention,
                "experts": f"{s.top_k} of {s.n_experts}" if s.n_experts else "dense",
                "total": counts["total"],
                "active": counts["active"],
                "context": s.context,
                "source": s.source,
            }
        )
    return rows
