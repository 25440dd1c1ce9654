"""Chapter 11: the self-checking exercises. A correct reader solution (written without the library) passes, a stub
is reported, and the usual mistakes fail with a message naming them."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.exercises.modern_decoder import check_rms_norm, check_swiglu, check_top_k_gates, explain_moe_flops
from transformer_lib.blocks.moe import MoE


def rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def swiglu(x, wg, wu, wd):
    g = x @ wg.T
    return ((g * torch.sigmoid(g)) * (x @ wu.T)) @ wd.T


def gates(logits, k):
    p = torch.exp(logits - logits.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    out = torch.zeros_like(p)
    for n in range(p.shape[0]):
        idx = torch.argsort(p[n], descending=True)[:k]
        out[n, idx] = p[n, idx] / p[n, idx].sum()
    return out


def stub(*args):
    raise NotImplementedError


def test_correct_solutions_pass():
    assert check_rms_norm(rms) and check_swiglu(swiglu) and check_top_k_gates(gates)


def test_stubs_are_reported():
    for check in (check_rms_norm, check_swiglu, check_top_k_gates):
        result = check(stub)
        assert not result and "not written yet" in result.message


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda x, w, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps) * w, "LayerNorm"),
        (lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w, "inside the square root"),
        (lambda x, w, eps: rms(x, 1.0, eps), "gain"),
    ],
)
def test_rms_norm_mistakes_are_named(wrong, words):
    result = check_rms_norm(wrong)
    assert not result and words in result.message


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda x, g, u, d: swiglu(x, u, g, d), "wrong branch"),
        (lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T, "GLU"),
        (lambda x, g, u, d: (torch.nn.functional.gelu(x @ g.T) * (x @ u.T)) @ d.T, "GEGLU"),
    ],
)
def test_swiglu_mistakes_are_named(wrong, words):
    result = check_swiglu(wrong)
    assert not result and words in result.message


def test_gating_mistakes_are_named():
    def raw(logits, k):
        p = logits.softmax(-1)
        top = p.topk(k, -1)
        return torch.zeros_like(p).scatter(-1, top.indices, top.values)

    assert "sum to 1" in check_top_k_gates(raw).message
    assert "k largest" in check_top_k_gates(lambda logits, k: logits.softmax(-1)).message


def measured_flops(d, d_ff, E, k):
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        MoE(d, d_ff, E, k)(torch.randn(1, 1, d))
    return fc.get_total_flops()


def test_flops_right_answer_passes():
    d, d_ff, E, k = 48, 80, 6, 2
    measured = measured_flops(d, d_ff, E, k)
    assert measured == 2 * E * d + k * 2 * 3 * d * d_ff  # counted by torch, not by the check's formula
    assert explain_moe_flops(2 * E * d + 6 * k * d * d_ff, measured, d, d_ff, E, k)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda d, f, E, k: 2 * E * d + E * 6 * d * f, "only the top_k"),
        (lambda d, f, E, k: k * 6 * d * f, "router"),
        (lambda d, f, E, k: E * d + k * 3 * d * f, "multiply-add"),
        (lambda d, f, E, k: 2 * E * d + k * 4 * d * f, "three matrices"),
        (lambda d, f, E, k: 11, "off by"),
    ],
)
def test_flops_wrong_guesses_are_explained(wrong, words):
    d, d_ff, E, k = 48, 80, 6, 2
    measured = measured_flops(d, d_ff, E, k)
    result = explain_moe_flops(wrong(d, d_ff, E, k), measured, d, d_ff, E, k)
    assert not result and words in result.message
    assert not explain_moe_flops(None, measured, d, d_ff, E, k)
