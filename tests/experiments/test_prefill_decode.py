"""Chapter 07's prefill/decode measurements: the closed-form prefill FLOPs against PyTorch's FLOP counter, the two
phases (``prefill``, ``decode_steps``) against recomputation without a cache, and how medians become TTFT, TPOT,
tok/s, FLOP/s and bytes/s (a stub timer: no wall-clock value is asserted)."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.experiments import batched_decoding, prefill_decode
from transformer_lib.experiments.left_padding import left_pad
from transformer_lib.experiments.prefill_decode import (
    cached_forward_seconds,
    cached_forward_times,
    decode_steps,
    first_size_at_balance,
    matmul_flops_per_s,
    matrix_weights,
    matvec_bandwidth,
    prefill,
    prefill_flops,
    prefill_intensity,
    time_to_first_token_and_per_token,
)
from transformer_lib.serving.generation import generate
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT

V = 40


def gpt(n_kv_heads=None, positional="learned") -> GPT:
    torch.manual_seed(0)
    return GPT(
        GPTConfig(
            vocab_size=V, block_size=64, n_layers=2, n_heads=4, d_model=32, n_kv_heads=n_kv_heads, positional=positional
        )
    ).eval()


@pytest.mark.parametrize("n_kv_heads, B, T", [(None, 1, 9), (2, 3, 17), (1, 2, 1)])
def test_prefill_flops_counts_what_the_flop_counter_counts(n_kv_heads, B, T):
    model = gpt(n_kv_heads)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert matrix_weights(model.cfg) == sum(m.weight.numel() for m in linears)  # the tied head counted once
    with FlopCounterMode(display=False) as counter, torch.no_grad():  # explicit attention: every query-key pair
        model(torch.randint(0, V, (B, T)), need_weights=True)
    assert counter.get_total_flops() == prefill_flops(model.cfg, T, B)


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_prefill_then_decode_steps_give_the_tokens_of_recomputation(positional):
    model = gpt(positional=positional)
    prompt = torch.randint(0, V, (1, 7), generator=torch.Generator().manual_seed(1))
    want = generate(model, prompt, 6, use_cache=False)[:, 7:]  # (1, 6)
    state = prefill(model, prompt, 7 + 6)
    assert torch.equal(state.token, want[:, :1])
    for _ in range(2):  # the cache is set back after the steps: a second run repeats the first
        assert torch.equal(decode_steps(model, state, 5), want[:, 1:])
        assert state.cache.get_seq_length() == 7


def test_left_padded_prompts_decode_as_each_alone():
    model = gpt()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, V, (t,), generator=g) for t in (3, 8, 5)]
    ids, mask = left_pad(prompts)
    state = prefill(model, ids, ids.shape[1] + 5, attention_mask=mask)
    got = torch.cat([state.token, decode_steps(model, state, 4)], dim=1)  # (3, 5)
    for row, p in enumerate(prompts):
        assert torch.equal(got[row], generate(model, p[None], 5, use_cache=False)[0, len(p) :])


def stub_timer(monkeypatch, module, seconds):
    """Replace the round-robin timer: run every function twice, return fixed seconds by key."""
    ran = {}

    def stub(fns, repeats, warmup=1, device=None):
        for key, fn in fns.items():
            ran[key] = [fn(), fn()]
        return {key: seconds(key) for key in fns}

    def stub_times(fns, repeats, warmup=1, device=None):  # every round the same: the median is that value
        return {key: [s] * repeats for key, s in stub(fns, repeats, warmup, device).items()}

    monkeypatch.setattr(module, "interleaved_medians", stub, raising=False)
    monkeypatch.setattr(module, "interleaved_times", stub_times, raising=False)
    return ran


def test_ttft_is_the_prefill_and_tpot_the_decoding_time_per_token(monkeypatch):
    ran = stub_timer(monkeypatch, prefill_decode, lambda key: {"prefill": 0.2, "decode": 0.8}[key[0]])
    rows = time_to_first_token_and_per_token(gpt(), [6, 12], n_new=4)
    assert [(r["prompt_len"], r["ttft_s"], r["tpot_s"]) for r in rows] == [(6, 0.2, 0.2), (12, 0.2, 0.2)]
    assert rows[0]["ttft_times"] == [0.2] * 3 and rows[0]["tpot_times"] == [0.2] * 3  # every round, per token
    assert rows[1]["prefill_flops"] == prefill_flops(gpt().cfg, 12) and rows[0]["context"] == 6 + 2
    assert ran[("prefill", 12)][0].past == 12 and ran[("decode", 6)][0].shape == (1, 4)
    assert torch.equal(*ran[("decode", 6)])  # the same steps each time
    short = time_to_first_token_and_per_token(gpt(), [6], n_new=4, repeats=5, prefill_repeats=2)
    assert len(short[0]["ttft_times"]) == 2 and len(short[0]["tpot_times"]) == 5  # decoding alone in rounds 3-5
    with pytest.raises(
        ValueError, match=r"prefill_repeats must be an int in \[1, 5\] \(the first rounds, at most repeats\), got 6"
    ):
        time_to_first_token_and_per_token(gpt(), [6], repeats=5, prefill_repeats=6)


def test_throughput_and_roofline_rates_come_from_the_medians(monkeypatch):
    ran = stub_timer(monkeypatch, batched_decoding, lambda b: 0.1 * b)
    rows = batched_decoding.decode_throughput(gpt(), [1, 4], prompt_lengths=(2, 5), new_tokens=3)
    assert [r["tok_per_s"] for r in rows] == pytest.approx([1 * 2 / 0.1, 4 * 2 / 0.4])
    assert ran[4][0].shape == (4, 2)
    assert rows[1]["decode_times"] == [pytest.approx(0.4)] * 5  # every round's seconds, for intervals
    assert [r["context"] for r in rows] == [2 + 2, 5 + 2]  # the longest (padded) prompt + 2 steps
    stub_timer(monkeypatch, prefill_decode, lambda key: 0.5)
    assert matmul_flops_per_s(n=8) == 2 * 8**3 / 0.5
    assert matvec_bandwidth(4 * 16 * 100, in_features=16) == 4 * 16 * 100 / 0.5
    assert cached_forward_seconds(gpt(), past=5, ks=[1, 3]) == {1: 0.5, 3: 0.5}
    assert cached_forward_times(gpt(), past=5, ks=[1, 3], repeats=2) == {1: [0.5, 0.5], 3: [0.5, 0.5]}


def test_bad_arguments_get_clear_errors():
    model = gpt()
    with pytest.raises(ValueError, match="prompt_len must be an int >= 1, got 0"):
        prefill_flops(model.cfg, 0)
    with pytest.raises(TypeError, match="prompt_lens must be a list or tuple, got int 8"):
        time_to_first_token_and_per_token(model, 8)
    with pytest.raises(ValueError, match=r"prompt_lens must hold at least 1 item\(s\), got 0"):
        time_to_first_token_and_per_token(model, [])
    with pytest.raises(ValueError, match=r"prompt_lens\[1\] must be an int >= 1, got 0"):
        time_to_first_token_and_per_token(model, [4, 0])
    with pytest.raises(
        ValueError, match=r"n_bytes must be an int >= 3072 \(one row of in_features=768 torch.float32 numbers\), got 10"
    ):
        matvec_bandwidth(10)
    with pytest.raises(ValueError, match=r"max_len must be an int >= 6, got 5"):
        prefill(model, torch.zeros(1, 5, dtype=torch.long), 5)
    with pytest.raises(ValueError, match=r"ids must be a tensor of shape \(B, T\), got \(5,\)"):
        prefill(model, torch.zeros(5), 9)
    with pytest.raises(ValueError, match=r"ids must be a torch.int64 tensor, got torch.float32"):
        prefill(model, torch.zeros(1, 5), 9)
    state = prefill(model, torch.zeros(1, 5, dtype=torch.long), 8)
    with pytest.raises(
        ValueError, match=r"n must be an int in \[1, 3\] \(steps that fit the cache's max_len=8\), got 4"
    ):
        decode_steps(model, state, 4)
    with pytest.raises(ValueError, match=r"ks\[0\] must be an int >= 1, got 0"):
        cached_forward_seconds(model, 4, ks=[0])


def test_prefill_intensity_is_flops_over_weights_and_written_cache():
    cfg = gpt(n_kv_heads=2).cfg
    T = 12
    moved = 4 * matrix_weights(cfg) + 2 * cfg.n_layers * 2 * cfg.d_head * T * 4  # fp32 weights, K and V of 2 heads
    assert prefill_intensity(cfg, T) == pytest.approx(prefill_flops(cfg, T) / moved)


def test_first_size_at_balance_is_the_first_size_whose_intensity_reaches_it():
    def intensity(n):
        return n / 2  # an fp32 step reusing each weight n times

    assert first_size_at_balance(intensity, 4.2) == 9  # 8 gives 4.0 < 4.2
    assert first_size_at_balance(intensity, 4.0) == 8  # reaching the balance counts
    assert first_size_at_balance(intensity, 100.0, largest=50) == 51  # none reaches it
    with pytest.raises(ValueError, match="balance"):
        first_size_at_balance(intensity, 0.0)
