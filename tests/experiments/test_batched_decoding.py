"""Chapter 07's batching experiment: left padding, and the FLOPs/bytes closed form of one decoding step checked
against PyTorch's FLOP counter and the model's own parameter tensors. No timing is asserted (benchmarks/ does that)."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.experiments.batched_decoding import decode_step_cost, decode_throughput
from transformer_lib.experiments.left_padding import left_pad
from transformer_lib.serving.generation import generate
from transformer_lib.serving.kv_cache import StaticCache
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT

V = 50


def gpt(n_kv_heads=None) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, block_size=64, n_layers=2, n_heads=4, d_model=32, n_kv_heads=n_kv_heads)).eval()


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_decode_step_cost_counts_what_the_flop_counter_counts(n_kv_heads):
    model, B, past = gpt(n_kv_heads), 3, 10
    cache = StaticCache.for_model(model, B, 64)
    with torch.no_grad():
        model(torch.randint(0, V, (B, past)), cache=cache)
    token = torch.randint(0, V, (B, 1))
    cost = decode_step_cost(model.cfg, B, past + 1)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert cost["matrix_weights"] == sum(m.weight.numel() for m in linears)  # the head is tied, counted once
    with FlopCounterMode(display=False) as counter:  # the teaching path: attention as explicit matmuls
        model(token, cache=cache, need_weights=True)
    assert counter.get_total_flops() == cost["flops"]
    assert cost["kv_bytes"] == sum(t[:, :, : past + 1].numel() * 4 for t in cache.keys + cache.values)
    assert cost["intensity"] == cost["flops"] / (cost["weight_bytes"] + cost["kv_bytes"])


def test_intensity_grows_with_the_batch_while_weights_dominate_the_bytes():
    cfg = gpt().cfg
    one, many = decode_step_cost(cfg, 1, 16), decode_step_cost(cfg, 32, 16)
    assert many["flops"] == 32 * one["flops"] and many["weight_bytes"] == one["weight_bytes"]
    assert 1 < many["intensity"] / one["intensity"] < 32  # kv bytes grow with B, weights do not
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        decode_step_cost(cfg, 0, 16)


def test_decode_throughput_reports_each_batch_size():
    rows = decode_throughput(gpt(), [1, 2], prompt_lengths=(3, 5), new_tokens=3, repeats=1)
    assert [r["batch"] for r in rows] == [1, 2]
    assert all(r["tok_per_s"] > 0 and r["intensity"] > 0 for r in rows)
    with pytest.raises(ValueError, match="new_tokens must be an int >= 2"):
        decode_throughput(gpt(), [1], new_tokens=1)


def test_left_padded_batch_decodes_each_prompt_as_alone():
    model = gpt()
    prompts = [torch.randint(0, V, (t,), generator=torch.Generator().manual_seed(t)) for t in (2, 7, 4)]
    ids, mask = left_pad(prompts)
    out = generate(model, ids, 6, attention_mask=mask)
    for row, p in enumerate(prompts):
        assert torch.equal(out[row, ids.shape[1] :], generate(model, p[None], 6, use_cache=False)[0, len(p) :])
