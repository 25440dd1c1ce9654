"""experiments.mask_conventions: our attention copied into nn.MultiheadAttention gives PyTorch's own answer with
PyTorch's opposite padding convention, and our MiniLM agrees with Hugging Face's BertModel given its own."""

import pytest
import torch

from transformer_lib.experiments import mask_conventions as mc
from transformer_lib.blocks.grouped_query import GroupedQueryAttention
from transformer_lib.blocks.multihead import MultiHeadAttention


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 16, generator=gen)
    keep = torch.ones(2, 5, dtype=torch.bool)
    keep[1, 3:] = False  # sequence 1: two padded keys
    return x, keep


def test_torch_mha_copy_with_inverted_mask_equals_our_attention():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    x, keep = _batch()
    mha = mc.torch_mha_from(attn)
    with torch.no_grad():
        ours, w_ours = attn(x, attention_mask=keep, need_weights=True)
        theirs, w_theirs = mha(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w_ours, w_theirs, atol=1e-6, rtol=1e-5)
    assert float(w_theirs[1, :, :, 3:].abs().max()) == 0.0  # padded keys get no weight


def test_passing_our_mask_unchanged_to_torch_attends_to_the_padding_only():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    x, keep = _batch()
    with torch.no_grad():
        _, w = mc.torch_mha_from(attn)(x, x, x, key_padding_mask=keep, need_weights=True, average_attn_weights=False)
    assert torch.isnan(w[0]).all()  # every key of the full sequence ignored
    torch.testing.assert_close(w[1, :, :, 3:].sum(-1), torch.ones(4, 5))  # all weight on the two padded keys


def test_torch_mha_from_refuses_grouped_query_attention():
    with pytest.raises(
        ValueError, match=r"attn.qkv.weight must be a tensor of shape \(48, 16\) \(\(3 d_model, d_model\)"
    ):
        mc.torch_mha_from(GroupedQueryAttention(16, 4, n_kv_heads=2))


def test_three_libraries_agree_on_a_padded_minilm_batch():
    pytest.importorskip("transformers")
    from transformer_lib.models.pretrained import load_minilm

    model, tok = load_minilm("cpu")
    enc = tok.encode(["The cat sat on the mat.", "A kitten."])
    assert not enc["attention_mask"].bool().all()  # the batch is padded
    out = mc.convention_outputs(model, mc.hf_minilm(), enc["input_ids"], enc["attention_mask"])
    assert torch.equal(out.key_padding_mask, ~out.keep) and torch.equal(out.attention_mask.bool(), out.keep)
    assert mc.max_difference(out.weights) < 1e-5
    assert mc.max_difference(out.attn_out) < 1e-4
    assert mc.max_difference(out.hidden, out.keep) < 1e-4
