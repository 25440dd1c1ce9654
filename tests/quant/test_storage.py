"""Bits per stored weight (transformer_lib.quant.storage) against closed forms and against the bytes a real
``QuantLinear`` keeps in its state dict."""

import pytest
import torch

from transformer_lib.quant.storage import bits_per_weight, weights_per_scale
from transformer_lib.quant import QuantLinear


@pytest.mark.parametrize(
    "bits, granularity, group_size, want",
    [
        (8, "tensor", None, 8 + 16 / (128 * 512)),
        (8, "channel", None, 8 + 16 / 512),  # one float16 scale per output row of 512 weights
        (4, "group", 128, 4.125),
        (4, "group", 32, 4.5),  # GPTQ/AWQ's usual int4 format
        (4, "group", 8, 6.0),
    ],
)
def test_bits_per_weight_closed_forms(bits, granularity, group_size, want):
    assert bits_per_weight(bits, (128, 512), granularity, group_size) == pytest.approx(want, rel=1e-12)


def test_scale_bits_change_the_share_only():
    assert bits_per_weight(4, (2, 64), "group", 16, scale_bits=32) == 4 + 32 / 16
    assert bits_per_weight(4, (2, 64), "group", 16, scale_bits=0) == 4


@pytest.mark.parametrize("bits, group_size", [(8, None), (4, None), (4, 32), (4, 8)])
def test_bits_per_weight_equals_a_quant_linears_stored_bits(bits, group_size):
    lin = torch.nn.Linear(64, 24, bias=False)
    ql = QuantLinear.from_linear(lin, bits, group_size)
    stored = sum(t.numel() * t.element_size() * 8 for t in ql.state_dict().values())  # codes + float16 scales
    gran = "channel" if group_size is None else "group"
    assert bits_per_weight(bits, lin.weight.shape, gran, group_size) == pytest.approx(stored / lin.weight.numel())


def test_weights_per_scale_of_a_stack_of_rows():
    assert weights_per_scale((3, 4, 10), "tensor") == 120
    assert weights_per_scale((3, 4, 10), "channel") == 10
    assert weights_per_scale(torch.Size([3, 4, 10]), "group", 5) == 5


@pytest.mark.parametrize(
    "args, match",
    [
        (
            (8, (4, 10), "group", 3),
            r"shape\[-1\] must be an int, a multiple of 3 \(whole groups of group_size=3\), got 10",
        ),
        ((8, (4, 10), "row", None), "granularity must be one of"),
        ((0, (4, 10), "channel", None), "bits must be an int >= 1, got 0"),
        ((8, (4, 0), "channel", None), r"shape\[1\] must be an int >= 1, got 0"),
        ((8, (), "tensor", None), r"shape must hold at least 1 item\(s\) \(\.\.\., K\), got 0"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(args, match):
    with pytest.raises(ValueError, match=match):
        bits_per_weight(*args)
