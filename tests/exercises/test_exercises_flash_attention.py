"""Chapter 10 exercise checks: the right answer passes, common mistakes fail with their hint, stubs are reported."""

import math

import torch

from transformer_lib.exercises.flash_attention import (
    causal_peak_bytes,
    check_merge,
    check_online_row,
    explain_causal_peak,
)


def online_row(scores, values, block):
    m, row_sum, o = -math.inf, 0.0, torch.zeros(values.shape[-1])
    for j in range(0, scores.shape[0], block):
        s = scores[j : j + block]
        m_new = max(m, s.max().item())
        p = torch.exp(s - m_new)
        row_sum = math.exp(m - m_new) * row_sum + p.sum()
        o = math.exp(m - m_new) * o + p @ values[j : j + block]
        m = m_new
    return o / row_sum


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return (lse1 - lse).exp()[:, None] * o1 + (lse2 - lse).exp()[:, None] * o2


def test_online_row_solution_passes():
    assert check_online_row(online_row)


def test_online_row_stub_is_reported():
    def stub(scores, values, block):
        raise NotImplementedError

    assert "not written yet" in check_online_row(stub).message


def test_online_row_forgotten_output_rescale_gets_its_hint():
    def wrong(scores, values, block):
        m, row_sum, o = -math.inf, 0.0, torch.zeros(values.shape[-1])
        for j in range(0, scores.shape[0], block):
            s = scores[j : j + block]
            m_new = max(m, s.max().item())
            p = torch.exp(s - m_new)
            row_sum = math.exp(m - m_new) * row_sum + p.sum()
            o = o + p @ values[j : j + block]
            m = m_new
        return o / row_sum

    result = check_online_row(wrong)
    assert not result and "old output o must be rescaled" in result.message, result.message


def test_online_row_without_the_max_gets_its_hint():
    result = check_online_row(lambda s, v, b: torch.exp(s) @ v / torch.exp(s).sum())
    assert not result and "subtract the running maximum" in result.message, result.message


def test_merge_solution_passes():
    assert check_merge(merge)


def test_merge_solution_on_split_keys_matches_the_whole():
    q, k, v = torch.randn(2, 4), torch.randn(9, 4), torch.randn(9, 3)
    s = q @ k.T
    halves = [(torch.softmax(s[:, a:b], -1) @ v[a:b], torch.logsumexp(s[:, a:b], -1)) for a, b in ((0, 4), (4, 9))]
    torch.testing.assert_close(merge(*halves[0], *halves[1]), torch.softmax(s, -1) @ v)


def test_merge_plain_average_gets_its_hint():
    result = check_merge(lambda o1, l1, o2, l2: (o1 + o2) / 2)
    assert not result and "plain average" in result.message


def test_causal_peak_prediction():
    measured = causal_peak_bytes(300)
    assert measured >= 3 * 4 * 300 * 300  # at least three float32 T x T matrices alive at once
    assert explain_causal_peak(measured * 1.05, 300, 64, measured)
    assert not explain_causal_peak(4 * 300 * 300 / 2, 300, 64, measured)  # "half the matrix is masked"
    assert "put your prediction" in explain_causal_peak(None, 300, 64, measured).message
