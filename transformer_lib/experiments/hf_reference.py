"""Chapter 11: Hugging Face models built from a random configuration, as references for the library's LLaMA and
mixture of experts (no download: ``transformers`` is only asked to build modules and initialise them); and
``hf_gpt2``, a ``GPT2LMHeadModel`` holding a copy of a ``models.GPT``'s weights (the generation tests and the KV-cache
benchmark decode with both).

Used in chapter 11.

``transformers`` imports ``torchao`` when it is installed, which logs warnings about kernels for other hardware and
a torch deprecation; ``import_transformers`` silences those two loggers during the import (not ours to fix, and not
the reader's concern here).
"""

from __future__ import annotations

import contextlib
import logging

import torch

from ..utils.checks import check_equal


@contextlib.contextmanager
def quiet_loggers(*names: str, level: int = logging.ERROR):
    """Raise the named loggers to ``level`` inside the block, then restore them."""
    loggers = [logging.getLogger(n) for n in names]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, before):
            lg.setLevel(lv)


def import_transformers():
    """The ``transformers`` package, imported without torchao's and torch's import-time warnings."""
    with quiet_loggers("torchao", "torch.utils._pytree"):
        import transformers
        from transformers.models.llama import modeling_llama  # noqa: F401  (imports the kernels' registry once)
        from transformers.models.mixtral import modeling_mixtral  # noqa: F401
    return transformers


@torch.no_grad()
def randomize(module: torch.nn.Module, std: float = 0.1, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn afresh: matrices from N(0, std), vectors (norm gains) from U(0.5, 1.5), so that a
    weight copied to the wrong place, or left at its initial value, changes the output."""
    gen = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        if p.dim() > 1:
            p.copy_(torch.randn(p.shape, generator=gen) * std)
        else:
            p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
    return module


def random_llama(seed: int = 0, **config):
    """A Hugging Face ``LlamaForCausalLM`` (eval mode) of ``LlamaConfig(**config)`` with random weights."""
    transformers = import_transformers()
    cfg = transformers.LlamaConfig(**config)
    model = randomize(transformers.LlamaForCausalLM(cfg), seed=seed).eval()
    model.generation_config.eos_token_id = None  # random weights: token 2 (LLaMA's </s>) must not stop generate
    return model


def random_mixtral_block(seed: int = 0, std: float = 0.2, **config):
    """A Hugging Face ``MixtralSparseMoeBlock`` of ``MixtralConfig(**config)``, every weight set (a block built alone
    starts from uninitialised memory). Its experts run the plain ("eager") loop."""
    transformers = import_transformers()
    from transformers.models.mixtral import modeling_mixtral

    cfg = transformers.MixtralConfig(**config)
    cfg._experts_implementation = "eager"  # a standalone block has no model to set it (else a warning)
    return randomize(modeling_mixtral.MixtralSparseMoeBlock(cfg), std=std, seed=seed).eval()


@torch.no_grad()
def hf_gpt2(model, device=None):
    """``transformers.GPT2LMHeadModel`` of a learned-position ``models.GPT``'s shape holding a copy of its weights
    (HF's Conv1D stores each weight as (in, out)), in eval mode on ``device`` (default: the model's)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.cfg
    check_equal("model.cfg.positional", c.positional, "learned", note="GPT-2 learns its positions")
    kv_heads = c.n_heads if c.n_kv_heads is None else c.n_kv_heads  # None: one per query head
    check_equal("model.cfg.n_kv_heads", kv_heads, c.n_heads, note="GPT-2 has one key/value head per query head")
    hf = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=c.vocab_size,
            n_positions=c.block_size,
            n_embd=c.d_model,
            n_layer=c.n_layers,
            n_head=c.n_heads,
            n_inner=c.d_ff,
            activation_function="gelu",
            layer_norm_epsilon=1e-5,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    )
    ours = {
        "transformer.wte.weight": model.tok_emb.weight,
        "transformer.wpe.weight": model.pos.weight,
        "transformer.ln_f.weight": model.norm.weight,
        "transformer.ln_f.bias": model.norm.bias,
    }
    for i, b in enumerate(model.blocks):
        h = f"transformer.h.{i}."
        for hf_name, lin in (
            ("attn.c_attn", b.self_attn.qkv),
            ("attn.c_proj", b.self_attn.out),
            ("mlp.c_fc", b.ffn.up),
            ("mlp.c_proj", b.ffn.down),
        ):
            ours[h + hf_name + ".weight"], ours[h + hf_name + ".bias"] = lin.weight.T, lin.bias
        for hf_name, norm in (("ln_1", b.res_self.norm), ("ln_2", b.res_ffn.norm)):
            ours[h + hf_name + ".weight"], ours[h + hf_name + ".bias"] = norm.weight, norm.bias
    for name, tensor in hf.state_dict().items():
        if name in ours:
            tensor.copy_(ours[name])
    return hf.to(device or model.tok_emb.weight.device).eval()
