"""Chapter 09: the self-checking exercises.

A correct reader solution (written here without the library) must pass each check; a stub must be reported, not
raised; the usual mistakes must fail with a message that names them.
"""

import pytest
import torch

from transformer_lib.exercises.quantization import (
    check_absmax_int8,
    check_int4_group_round_trip,
    check_pack_int4,
    explain_layer_bytes,
)
from transformer_lib.quant import QuantLinear


# ----------------------------------------------------------------------------- reader solutions
def absmax_int8(w):
    out = torch.empty(w.shape, dtype=torch.int8)
    for i, row in enumerate(w):  # one row at a time, as a reader might
        s = row.abs().max() / 127
        out[i] = torch.round(row / s).to(torch.int8)
    return out


def int4_groups(w, group_size):
    N, K = w.shape
    g = w.reshape(N, K // group_size, group_size)
    s = g.abs().amax(-1, keepdim=True) / 7
    return (torch.round(g / s) * s).reshape(N, K)


def pack(q):
    u = q.to(torch.int32) % 16  # two's complement low nibble, via the modulo
    return (u[:, 0::2] + 16 * u[:, 1::2]).to(torch.uint8)


def not_implemented(*args):
    raise NotImplementedError("fill me in")


# ----------------------------------------------------------------------------- correct answers pass
@pytest.mark.parametrize(
    "check, fn", [(check_absmax_int8, absmax_int8), (check_int4_group_round_trip, int4_groups), (check_pack_int4, pack)]
)
def test_check_accepts_a_correct_solution(check, fn):
    result = check(fn)
    assert result, result.message
    assert "Correct" in repr(result)


@pytest.mark.parametrize("check", [check_absmax_int8, check_int4_group_round_trip, check_pack_int4])
def test_check_reports_a_stub_without_raising(check):
    result = check(not_implemented)
    assert not result and "NotImplementedError" in result.message
    assert "Not yet" in result._repr_markdown_()


# ----------------------------------------------------------------------------- mistakes are named
@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w: torch.round(w / (w.abs().max() / 127)).to(torch.int8), "one scale for the whole matrix"),
        (lambda w: (w / (w.abs().amax(1, keepdim=True) / 127)).to(torch.int8), "truncated toward zero"),
        (lambda w: torch.round(w / (w.abs().amax(1, keepdim=True) / 128)).clamp(-128, 127).to(torch.int8), "use 127"),
    ],
)
def test_absmax_check_names_the_mistake(wrong, hint):
    result = check_absmax_int8(wrong)
    assert not result and hint in result.message, result.message


def test_absmax_check_wants_int8():
    result = check_absmax_int8(lambda w: absmax_int8(w).float())
    assert not result and "dtype" in result.message, result.message


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w, g: int4_groups(w, w.shape[1]), "one scale per row"),
        (
            lambda w, g: (lambda s: torch.round(w.reshape(w.shape[0], -1, g) / s).clamp(-8, 8) * s)(
                w.reshape(w.shape[0], -1, g).abs().amax(-1, keepdim=True) / 8
            ).reshape(w.shape),
            "divided by 8",
        ),
        (
            lambda w, g: torch.round(
                w.reshape(w.shape[0], -1, g) / (w.reshape(w.shape[0], -1, g).abs().amax(-1, keepdim=True) / 7)
            ).reshape(w.shape),
            "returned the integer codes",
        ),
    ],
)
def test_int4_check_names_the_mistake(wrong, hint):
    result = check_int4_group_round_trip(wrong)
    assert not result and hint in result.message, result.message


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda q: pack(torch.stack([q[:, 1::2], q[:, 0::2]], -1).flatten(-2)), "swapped"),
        (
            lambda q: ((q[:, 0::2].to(torch.int16) | (q[:, 1::2].to(torch.int16) << 4)) & 0xFF).to(torch.uint8),
            "negative codes",
        ),
    ],
)
def test_pack_check_names_the_mistake(wrong, hint):
    result = check_pack_int4(wrong)
    assert not result and hint in result.message, result.message


def test_pack_check_wants_uint8():
    result = check_pack_int4(lambda q: pack(q).to(torch.int16))
    assert not result and "dtype" in result.message, result.message


# ----------------------------------------------------------------------------- predict, then run: a layer's bytes
def quantized_layer_bytes(d_in=64, d_out=32, bits=4, group_size=16):
    """The bytes a QuantLinear's state_dict holds, counted from its tensors (not from the check's formula)."""
    torch.manual_seed(0)
    ql = QuantLinear.from_linear(torch.nn.Linear(d_in, d_out), bits, group_size)
    return sum(t.numel() * t.element_size() for t in ql.state_dict().values()), (d_in, d_out, bits, group_size)


def test_layer_bytes_right_answer_passes():
    measured, (d_in, d_out, bits, g) = quantized_layer_bytes()
    by_hand = d_in * d_out // 2 + 2 * d_out * d_in // g + 4 * d_out  # packed int4 + fp16 scales + fp32 bias
    assert measured == by_hand
    assert explain_layer_bytes(by_hand, measured, d_in, d_out, bits, g)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda d_in, d_out, g: d_in * d_out // 2 + 4 * d_out, "scales"),
        (lambda d_in, d_out, g: d_in * d_out + 2 * d_out * d_in // g + 4 * d_out, "packing"),
        (lambda d_in, d_out, g: d_in * d_out // 2 + 4 * d_out * d_in // g + 4 * d_out, "float16"),
        (lambda d_in, d_out, g: 7, "off by"),
    ],
)
def test_layer_bytes_explains_a_wrong_guess(wrong, words):
    measured, (d_in, d_out, bits, g) = quantized_layer_bytes()
    result = explain_layer_bytes(wrong(d_in, d_out, g), measured, d_in, d_out, bits, g)
    assert not result and words in result.message and f"{measured:,} bytes" in result.message
