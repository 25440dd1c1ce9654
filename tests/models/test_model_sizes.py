"""The configs' ``d_head`` and the library's one parameter counter.

References: the head size each built ``MultiHeadAttention`` computes for itself and the width of its query
projection; PyTorch's ``parameters_to_vector`` for a count of parameters; ``torch.nn.utils.prune``'s own mask for
the nonzero count; and the ``num_params`` the committed checkpoints recorded when they were trained.
"""

import dataclasses

import pytest
import torch
from torch.nn.utils import parameters_to_vector, prune

from transformer_lib.compression import pruning
from transformer_lib.book_models.checkpoints import checkpoint_info, load_shakespeare_gpt
from transformer_lib.models.configs import BertConfig, GPTConfig, TransformerConfig
from transformer_lib.models.transformer import GPT, BertEncoder, Transformer
from transformer_lib.utils.params import count_parameters


@pytest.mark.parametrize(
    "make",
    [
        lambda: (GPTConfig(vocab_size=11, d_model=48, n_heads=6), lambda c: GPT(c).blocks[0].self_attn),
        lambda: (
            GPTConfig(vocab_size=11, d_model=64, n_heads=4, n_kv_heads=2, positional="rope"),
            lambda c: GPT(c).blocks[1].self_attn,
        ),
        lambda: (
            TransformerConfig(7, 9, d_model=40, n_heads=5, d_ff=32, n_encoder_layers=1, n_decoder_layers=1),
            lambda c: Transformer(c).decoder[0].cross_attn,
        ),
        lambda: (
            BertConfig(vocab_size=13, d_model=36, n_heads=3, d_ff=16, n_layers=1, max_len=8),
            lambda c: BertEncoder(c).layers[0].self_attn,
        ),
    ],
    ids=["gpt", "gpt-gqa-rope", "transformer", "bert"],
)
def test_d_head_is_the_head_size_the_built_attention_uses(make):
    cfg, attention_of = make()
    attn = attention_of(cfg)
    assert cfg.d_head == attn.d_head == cfg.d_model // cfg.n_heads
    assert attn.n_heads * cfg.d_head == cfg.d_model
    wider = dataclasses.replace(cfg, d_model=2 * cfg.d_model)  # a property, not a stored field: it follows d_model
    assert wider.d_head == 2 * cfg.d_head and "d_head" not in dataclasses.asdict(cfg)


def test_one_counter_behind_every_public_name():
    assert pruning.count_parameters is count_parameters
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=17, block_size=8, n_layers=2, n_heads=2, d_model=16))
    tied = model.lm_head.weight is model.tok_emb.weight
    assert model.num_params() == count_parameters(model) == parameters_to_vector(model.parameters()).numel()
    assert tied  # the tied head is one parameter: counted once
    bert = BertEncoder(BertConfig(vocab_size=13, d_model=36, n_heads=3, d_ff=16, n_layers=1, max_len=8))
    assert count_parameters(bert) == parameters_to_vector(bert.parameters()).numel()


def test_the_nonzero_count_reads_through_a_prune_mask():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=17, block_size=8, n_layers=1, n_heads=2, d_model=16))
    up = model.blocks[0].ffn.up
    prune.l1_unstructured(up, "weight", amount=0.25)  # weight = weight_orig * weight_mask
    zeros = int((up.weight_mask == 0).sum())
    assert zeros == round(0.25 * up.weight_mask.numel())
    assert count_parameters(model) == parameters_to_vector(model.parameters()).numel()  # the shapes are kept
    dense_nonzero = sum(int((p != 0).sum()) for name, p in model.named_parameters() if "weight_orig" not in name)
    assert count_parameters(model, nonzero=True) == dense_nonzero + int((up.weight != 0).sum())


def test_the_counter_gives_what_the_trained_checkpoint_recorded():
    model, _ = load_shakespeare_gpt("cpu")
    assert count_parameters(model) == model.num_params() == checkpoint_info("shakespeare_gpt")["num_params"]
