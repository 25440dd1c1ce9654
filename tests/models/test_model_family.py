"""The parameter formula of ``model_family`` against Hugging Face models of each family built small (random
weights, offline): the same shape fields, the same count."""

import dataclasses

import pytest

from transformer_lib.experiments.model_memory import transformer_params
from transformer_lib.models.family import FAMILY, ModelShape, family_rows, param_counts

transformers = pytest.importorskip("transformers")

SMALL = dict(n_layers=2, d_model=32, n_heads=4, d_ff=48, vocab_size=101, context=16)


def _hf_count(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied tensors are yielded once


def _shape(name, **overrides):
    base = next(s for s in FAMILY if s.name == name)
    kv = overrides.pop("n_kv_heads", 2 if base.n_kv_heads < base.n_heads else 4)
    return dataclasses.replace(base, **SMALL, n_kv_heads=kv, **overrides)


def test_gpt2_count():
    s = _shape("GPT-2 small")
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_inner=48, vocab_size=101, n_positions=16)
    )
    assert param_counts(s)["total"] == _hf_count(hf)


@pytest.mark.parametrize(
    "name, cls, cfg_cls, extra",
    [
        ("LLaMA 2 7B", "LlamaForCausalLM", "LlamaConfig", {}),
        ("Llama 3 8B", "LlamaForCausalLM", "LlamaConfig", {}),
        ("Mistral 7B", "MistralForCausalLM", "MistralConfig", {}),
        ("Qwen2-0.5B", "Qwen2ForCausalLM", "Qwen2Config", {"tie_word_embeddings": True}),
        ("Phi-3-mini", "Phi3ForCausalLM", "Phi3Config", {"pad_token_id": 0}),
    ],
)
def test_dense_counts_match_hf(name, cls, cfg_cls, extra):
    s = _shape(name)
    cfg = getattr(transformers, cfg_cls)(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=s.n_kv_heads,
        intermediate_size=48,
        vocab_size=101,
        max_position_embeddings=16,
        **extra,
    )
    hf = getattr(transformers, cls)(cfg)
    assert param_counts(s) == {"total": _hf_count(hf), "active": _hf_count(hf)}


def test_mixtral_total_and_active_match_hf():
    s = _shape("Mixtral 8x7B", n_experts=4, top_k=2)
    cfg = transformers.MixtralConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        vocab_size=101,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    hf = transformers.MixtralForCausalLM(cfg)
    counts = param_counts(s)
    assert counts["total"] == _hf_count(hf)
    one_expert = 3 * 32 * 48
    assert counts["total"] - counts["active"] == 2 * (4 - 2) * one_expert  # per layer, 2 experts idle


def test_agrees_with_chapter_09_formula_for_phi3():
    phi = next(s for s in FAMILY if s.name == "Phi-3-mini")
    assert param_counts(phi)["total"] == transformer_params(
        32, 3072, 8192, 32064, bias=False, norm_params=1, gated_ffn=True, tied_head=False
    )


def test_rows_and_attention_names():
    rows = {r["model"]: r for r in family_rows()}
    assert rows["Mistral 7B"]["experts"] == "dense" and rows["Mixtral 8x7B"]["experts"] == "2 of 8"
    assert rows["LLaMA 2 7B"]["attention"] == "MHA" and rows["Llama 3 8B"]["attention"] == "GQA-8"
    assert rows["Mixtral 8x7B"]["active"] < rows["Mixtral 8x7B"]["total"] / 3
    assert ModelShape("x", "k", 1, 8, 4, 1, 8, 10, 4, "RMSNorm", "swiglu", "RoPE").attention == "MQA"


def test_unknown_ffn_raises():
    with pytest.raises(ValueError, match="ffn must be"):
        param_counts(ModelShape("x", "k", 1, 8, 4, 4, 8, 10, 4, "RMSNorm", "relu", "RoPE"))
