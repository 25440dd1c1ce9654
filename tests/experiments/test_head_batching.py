"""Chapter 03's loop-over-heads vs batched measurement: same numbers, and a peak-memory count that matches
allocations of known size (and, on a GPU, CUDA's own allocator counter)."""

import math

import pytest
import torch

from transformer_lib.experiments.head_batching import batched_heads, compare, looped_heads, peak_memory_bytes

MIB = 1 << 20


def _explicit_attention(q, k, v):
    """softmax(q k^T / sqrt(D)) v written out: (B, H, T, D)."""
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


@pytest.mark.parametrize("shape", [(1, 1, 3, 4), (2, 5, 7, 8), (3, 12, 16, 32)])
def test_loop_and_batched_equal_the_explicit_formula(shape):
    q, k, v = torch.randn(3, *shape, generator=torch.Generator().manual_seed(0)).unbind(0)
    want = _explicit_attention(q, k, v)
    torch.testing.assert_close(batched_heads(q, k, v), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(looped_heads(q, k, v), want, rtol=1e-5, atol=1e-5)


def test_peak_memory_counts_a_known_allocation():
    assert peak_memory_bytes(lambda: torch.zeros(256, 1024)) == MIB  # 256 * 1024 float32 = 1 MiB


def test_peak_memory_adds_tensors_alive_together_and_not_those_freed_in_between():
    def both_alive():
        a, b = torch.zeros(256, 1024), torch.zeros(256, 1024)
        return a + b

    def one_after_the_other():
        a = torch.zeros(256, 1024)
        del a
        return torch.zeros(256, 1024)

    assert peak_memory_bytes(both_alive) == 3 * MIB
    assert peak_memory_bytes(one_after_the_other) == MIB


def test_peak_memory_ignores_views_of_inputs_and_of_its_own_tensors():
    x = torch.zeros(256, 1024)
    assert peak_memory_bytes(lambda: (x.t(), x[:10], x.view(-1))) == 0

    def views():
        a = torch.zeros(256, 1024)
        return a.t(), a[:10]

    assert peak_memory_bytes(views) == MIB


def test_cpu_loop_holds_every_head_output_and_the_concatenation():
    B, H, T, D = 2, 12, 128, 32
    q, k, v = torch.randn(3, B, H, T, D).unbind(0)
    out_bytes = B * H * T * D * 4  # one float32 (B, H, T, D) result
    with torch.inference_mode():
        assert peak_memory_bytes(lambda: batched_heads(q, k, v)) == out_bytes
        assert peak_memory_bytes(lambda: looped_heads(q, k, v)) == 2 * out_bytes  # H slices of 1/H, then cat


def test_compare_reports_rounds_memory_and_agreement(monkeypatch):
    from transformer_lib.book_tools import timing

    ticks = iter(range(100))  # a fake clock: every timed call lasts 1 s, so every paired ratio is exactly 1
    monkeypatch.setattr(timing, "_clock", lambda: next(ticks))
    q, k, v = torch.randn(3, 1, 4, 8, 8).unbind(0)
    res = compare(q, k, v, repeats=3)
    assert res["times"] == {"batched": [1, 1, 1], "loop": [1, 1, 1]}
    assert (res["ratio"].ratio, res["ratio"].rounds) == (1.0, 3)
    assert res["memory"]["loop"] > res["memory"]["batched"] > 0
    assert res["max_abs_diff"] < 1e-6


@pytest.mark.cuda
def test_cuda_peak_matches_the_allocator_for_a_known_allocation():
    dev = torch.device("cuda")
    assert peak_memory_bytes(lambda: torch.zeros(256, 1024, device=dev), dev) == MIB
