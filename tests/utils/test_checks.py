"""The library's one argument checker (``transformer_lib/utils/checks.py``): what it accepts, what it refuses, and that
the
message names the argument, the expectation and the value received (house rule 6)."""

import math
import random
import re

import numpy as np
import pytest
import torch

from transformer_lib.utils.checks import (
    broadcast_shape,
    check_bool,
    check_dtype,
    check_empty,
    check_equal,
    check_ids,
    check_type,
    check_int,
    check_number,
    check_probability,
    check_sequence,
    check_tensor,
)

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("value", [0, 5, np.int64(3), np.int32(7), torch.tensor(2).item()])
def test_check_int_accepts_python_and_numpy_integers_and_returns_an_int(value):
    out = check_int("n", value, min=0)
    assert out == value and type(out) is int


@pytest.mark.parametrize(
    "value, kind",
    [
        (True, "bool"),
        (False, "bool"),
        (2.0, "float"),
        ("3", "str"),
        (None, "NoneType"),
        (torch.tensor(3), "Tensor"),
        ([1], "list"),
    ],
)
def test_check_int_refuses_other_types_with_a_type_error_naming_the_type(value, kind):
    with pytest.raises(TypeError) as info:
        check_int("n_heads", value, min=1)
    assert str(info.value).startswith(f"n_heads must be an int >= 1, got {kind} ")


@pytest.mark.parametrize(
    "value, low, high, expected",
    [
        (0, 1, None, "an int >= 1"),
        (9, 1, 8, "an int in [1, 8]"),
        (-1, None, 8, "an int"),
        (11, None, 10, "an int <= 10"),
    ],
)
def test_check_int_range_errors_say_the_range_and_the_value(value, low, high, expected):
    if low is None and high == 8:
        assert check_int("k", value, max=high) == -1  # no lower bound: negative is fine
        return
    with pytest.raises(ValueError) as info:
        check_int("k", value, min=low, max=high)
    assert type(info.value) is ValueError
    assert str(info.value) == f"k must be {expected}, got {value}"


def test_bounds_are_inclusive_and_note_and_optional_show_in_the_message():
    assert check_int("k", 1, 1, 8) == 1 and check_int("k", 8, 1, 8) == 8
    assert check_int("window", None, min=1, optional=True) is None
    with pytest.raises(ValueError, match=r"^window must be an int >= 1 \(keys seen\) or None, got 0$"):
        check_int("window", 0, min=1, note="keys seen", optional=True)
    with pytest.raises(TypeError, match="window must be an int >= 1"):
        check_int("window", None, min=1)  # None only where optional


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_check_number_refuses_nan_and_infinity_unless_told(value):
    with pytest.raises(ValueError, match=rf"^x must be a finite number, got {value!r}$"):
        check_number("x", value)
    if not math.isnan(value):
        assert check_number("x", value, finite=False) == value
    else:
        with pytest.raises(ValueError):  # NaN is in no range, finite or not
            check_number("x", value, finite=False)


def test_check_number_open_and_closed_bounds_match_the_interval_written():
    assert check_number("p", 1, 0, 1, min_open=True) == 1.0
    for bad in (0, 0.0, -1e-12, 1.0000001):
        with pytest.raises(ValueError, match=r"^p must be a number in \(0, 1\], got "):
            check_number("p", bad, 0, 1, min_open=True)
    with pytest.raises(ValueError, match=r"^t must be a finite number > 0, got 0$"):
        check_number("t", 0, min=0, min_open=True)
    with pytest.raises(TypeError, match=r"^t must be a finite number >= 0, got bool True$"):
        check_number("t", True, min=0)
    assert type(check_number("t", np.float32(0.5), 0, 1)) is float and check_number("t", 3, 0) == 3.0


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 0.999])
def test_check_probability_accepts_dropout_rates(value):
    assert check_probability("dropout", value) == value


@pytest.mark.parametrize("value", [1, 1.0, -0.1, NAN, INF])
def test_check_probability_refuses_one_and_out_of_range(value):
    with pytest.raises(ValueError, match=rf"^dropout must be a probability in \[0, 1\), got {value!r}$"):
        check_probability("dropout", value)
    assert check_probability("p", 1.0, allow_one=True) == 1.0


def test_check_probability_and_bool_refuse_wrong_types():
    with pytest.raises(TypeError, match=r"dropout must be a probability in \[0, 1\), got bool False"):
        check_probability("dropout", False)
    with pytest.raises(TypeError, match="dropout must be a probability in \\[0, 1\\), got str '0.1'"):
        check_probability("dropout", "0.1")
    assert check_bool("bias", True) is True and check_bool("bias", False) is False
    for bad in (0, 1, None, "True", torch.tensor(True)):
        with pytest.raises(TypeError, match=rf"^bias must be a bool, got {type(bad).__name__} "):
            check_bool("bias", bad)


def test_check_tensor_shapes_with_wildcards_and_dtypes():
    x = torch.zeros(2, 3)
    assert check_tensor("x", x) is x and check_tensor("x", x, (2, None)) is x and check_tensor("x", x, (None, 3)) is x
    with pytest.raises(TypeError, match=r"^x must be a tensor of shape \(2, any\), got list$"):
        check_tensor("x", [[0.0]], (2, None))
    with pytest.raises(ValueError, match=r"^x must be a tensor of shape \(3, any\), got \(2, 3\)$"):
        check_tensor("x", x, (3, None))
    with pytest.raises(ValueError, match=r"^x must be a tensor of shape \(any,\), got \(2, 3\)$"):
        check_tensor("x", x, (None,))
    with pytest.raises(ValueError, match=r"got \(0, 3\)"):  # a wildcard is a size >= 1
        check_tensor("x", torch.zeros(0, 3), (None, 3))
    with pytest.raises(ValueError, match=r"^ids must be a torch.int64 or torch.int32 tensor, got torch.float32$"):
        check_tensor("ids", x, dtype=(torch.int64, torch.int32))
    with pytest.raises(ValueError, match=r"^ids must be a floating-point tensor, got torch.int64$"):
        check_tensor("ids", torch.zeros(2, dtype=torch.long), floating=True)


def test_check_tensor_leading_ellipsis_matches_any_leading_dimensions():
    for x in (torch.zeros(3, 4), torch.zeros(2, 3, 4), torch.zeros(5, 2, 3, 4)):
        assert check_tensor("q", x, (..., "T", 4)) is x
    for bad in (torch.zeros(4), torch.zeros(2, 3, 0), torch.zeros(2, 0, 4), torch.zeros(2, 3, 5)):
        want = re.escape(f"q must be a tensor of shape (..., T, 4), got {tuple(bad.shape)}")
        with pytest.raises(ValueError, match=want):
            check_tensor("q", bad, (..., "T", 4))


def test_check_tensor_finite_names_the_count_and_the_first_bad_index():
    x = torch.zeros(3, 4)
    x[1, 2], x[2, 0] = INF, NAN
    assert check_tensor("x", x) is x  # finite is opt-in
    with pytest.raises(
        ValueError,
        match=r"^w must be finite \(no NaN or inf\), got 2 non-finite value\(s\), "
        r"the first inf at index \(1, 2\)$",
    ):
        check_tensor("w", x, finite=True)
    assert check_tensor("ids", torch.arange(3), finite=True) is not None  # integers are always finite
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(ValueError, match="got 1 non-finite"):
            check_tensor("w", torch.tensor([0.0, NAN]).to(dtype), finite=True)


def test_long_values_are_cut_in_the_message():
    with pytest.raises(TypeError) as info:
        check_int("n", list(range(1000)))
    assert len(str(info.value)) < 130 and str(info.value).endswith("...")


def _torch_broadcast(*shapes):
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        return None


def test_broadcast_shape_agrees_with_torch_on_random_shapes():
    rng = random.Random(0)
    sizes = [0, 1, 1, 2, 3]  # 1 (broadcasts) and 0 (empty) are the cases that need care
    cases = 0
    for _ in range(3000):
        shapes = [tuple(rng.choice(sizes) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 3))]
        want = _torch_broadcast(*shapes)
        assert broadcast_shape(*shapes) == want, shapes
        cases += want is None
    assert 300 < cases < 2700  # both outcomes were exercised


def test_broadcast_shape_of_tensor_shapes_and_edge_cases():
    q, k = torch.empty(2, 4, 5, 8), torch.empty(1, 4, 7, 8)
    assert broadcast_shape(q.shape[:-2], k.shape[:-2]) == (2, 4)
    assert broadcast_shape(torch.Size([3, 1]), (1, 5)) == (3, 5)
    assert broadcast_shape() == ()
    assert broadcast_shape((0,), (1,)) == (0,)
    assert broadcast_shape((2,), (3,)) is None
    assert broadcast_shape((2, 3), (4, 3)) is None


def test_check_tensor_can_allow_minus_inf_and_none():
    masked = torch.tensor([0.0, -INF])
    assert check_tensor("s", masked, finite=True, allow_neg_inf=True) is masked
    for bad in (NAN, INF):
        with pytest.raises(ValueError, match=r"s must be finite \(no NaN or \+inf; -inf masks\), got 1"):
            check_tensor("s", torch.tensor([0.0, bad, -INF]), finite=True, allow_neg_inf=True)
    with pytest.raises(ValueError, match=r"no NaN or inf\)"):
        check_tensor("s", masked, finite=True)
    assert check_tensor("m", None, optional=True) is None
    with pytest.raises(ValueError, match=r"m must be a tensor of shape \(2,\) \(B\), got \(3,\)"):
        check_tensor("m", torch.zeros(3), shape=(2,), note="B")


def test_check_ids_names_the_first_id_out_of_range_and_accepts_the_ignore_index():
    ids = torch.tensor([[0, 4, -100]])
    assert check_ids("t", ids, 5, shape=(1, 3), ignore_index=-100) is ids
    with pytest.raises(ValueError, match=r"t must hold ids in \[0, 5\), got -100"):
        check_ids("t", ids, 5)
    with pytest.raises(ValueError, match=r"t must hold ids in \[0, 4\) or -100 \(ignored\), got 4"):
        check_ids("t", ids, 4, ignore_index=-100)
    for bad in (ids.float(), ids > 0):
        with pytest.raises(ValueError, match=r"t must be an integer tensor"):
            check_ids("t", bad, 5)
    assert check_ids("t", None, 5, optional=True) is None


def test_check_ids_without_a_vocabulary_refuses_only_negative_ids():
    ids = torch.tensor([0, 7, 10**6])
    assert check_ids("data", ids, None) is ids
    with pytest.raises(ValueError, match=r"data must hold ids >= 0, got -3"):
        check_ids("data", torch.tensor([1, -3]), None)
    with pytest.raises(ValueError, match="data must be an integer tensor"):
        check_ids("data", ids.float(), None)


def test_check_type_accepts_instances_and_protocols_and_names_what_it_wanted():
    assert check_type("n", 3, int) == 3
    assert check_type("f", len, methods=("__call__",)) is len
    assert check_type("c", None, methods=("update",), optional=True) is None
    with pytest.raises(TypeError, match=r"^model must be a Module, got str 'gpt'$"):
        check_type("model", "gpt", torch.nn.Module)
    with pytest.raises(TypeError, match=r"^cache must be a KV cache or None, got int 3$"):
        check_type("cache", 3, methods=("get_seq_length", "update"), expected="a KV cache", optional=True)
    with pytest.raises(TypeError, match=r"^ids must be a list or an object with __iter__, got NoneType None$"):
        check_type("ids", None, list, methods=("__iter__",))


def test_check_dtype_and_check_sequence():
    assert check_dtype("dtype", torch.float16, floating=True) is torch.float16
    with pytest.raises(ValueError, match=r"dtype must be a floating-point torch.dtype, got torch.int64"):
        check_dtype("dtype", torch.long, floating=True)
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype, got str 'float32'"):
        check_dtype("dtype", "float32")
    assert check_sequence("xs", [1], min_len=1) == [1]
    with pytest.raises(ValueError, match=r"xs must hold at least 1 item\(s\) \(outputs\), got 0"):
        check_sequence("xs", [], min_len=1, note="outputs")
    with pytest.raises(ValueError, match=r"xs must hold exactly 2 item\(s\), got 1"):
        check_sequence("xs", (1,), length=2)
    with pytest.raises(TypeError, match=r"xs must be a list or tuple, got int 3"):
        check_sequence("xs", 3)


def test_check_tensor_integer_and_min():
    lengths = torch.tensor([3, 0])
    assert check_tensor("lengths", lengths, integer=True, min=0) is lengths
    with pytest.raises(
        ValueError, match=r"^lengths must be an integer tensor \(int64, int32, ...\), got torch.float32$"
    ):
        check_tensor("lengths", torch.tensor([1.0]), integer=True)
    with pytest.raises(ValueError, match=r"integer tensor .*got torch.bool$"):
        check_tensor("lengths", torch.tensor([True]), integer=True)
    with pytest.raises(ValueError, match=r"^lengths must hold values >= 0, got -2$"):
        check_tensor("lengths", torch.tensor([1, -2, -1]), min=0)
    assert check_tensor("empty", torch.zeros(0, dtype=torch.long), min=0).numel() == 0  # nothing below min


def test_value_checks_pass_over_meta_tensors_which_hold_shapes_only():
    """FLOP counts run a module on meta tensors (rnn_limits): shape and dtype are checked, values cannot be."""
    meta = torch.empty(2, 3, device="meta")
    assert check_tensor("q", meta, shape=("B", "D"), floating=True, finite=True, min=0) is meta
    with pytest.raises(ValueError, match=r"q must be a tensor of shape \(B, B\)"):
        check_tensor("q", meta, shape=("B", "B"))


def test_check_int_multiple_of_says_the_divisor():
    assert check_int("d_model", 12, min=1, multiple_of=4) == 12
    with pytest.raises(ValueError, match=r"^d_model must be an int >= 1, a multiple of 4 \(n_heads\), got 10$"):
        check_int("d_model", 10, min=1, multiple_of=4, note="n_heads")
    with pytest.raises(ValueError, match=r"a multiple of 2, got 3$"):
        check_int("d_head", 3, multiple_of=2)


def test_check_equal_and_check_empty_name_both_sides():
    assert check_equal("k.shape[-1]", 8, 8) == 8
    with pytest.raises(ValueError, match=r"^k.shape\[-1\] must be 8 \(q's D\), got 6$"):
        check_equal("k.shape[-1]", 6, 8, note="q's D")
    check_empty("unplaced keys", {})
    with pytest.raises(
        ValueError, match=r"^unplaced keys must be empty \(n_layers=2\), got 4, e.g. \['a', 'b', 'c'\]$"
    ):
        check_empty("unplaced keys", {"d": 1, "c": 1, "b": 1, "a": 1}, note="n_layers=2")


def test_check_sequence_items_and_unique():
    from functools import partial

    assert check_sequence("heads", [0, 2], items=partial(check_int, min=0, max=3), unique=True) == [0, 2]
    with pytest.raises(ValueError, match=r"^heads\[1\] must be an int in \[0, 3\], got 4$"):
        check_sequence("heads", [0, 4], items=partial(check_int, min=0, max=3))
    with pytest.raises(TypeError, match=r"^texts\[1\] must be a str, got int 3$"):
        check_sequence("texts", ["a", 3], items=str)
    with pytest.raises(ValueError, match=r"^heads must not repeat an item, got \[1, 1\]$"):
        check_sequence("heads", [1, 1], unique=True)


def test_check_tensor_device():
    x = torch.zeros(2)
    assert check_tensor("k", x, device=torch.device("cpu")) is x
    with pytest.raises(ValueError, match=r"^k must be on meta, got cpu$"):
        check_tensor("k", x, device="meta")


def test_check_tensor_broadcasts_to_names_the_target_shape():
    mask = torch.ones(1, 5, dtype=torch.bool)
    assert check_tensor("mask", mask, broadcasts_to=(2, 3, 4, 5)) is mask
    with pytest.raises(ValueError, match=r"^mask must be a tensor that broadcasts to \(2, 3, 4, 5\), got \(4, 4\)$"):
        check_tensor("mask", torch.ones(4, 4), broadcasts_to=(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"broadcasts to \(3, 4\) \(the scores\), got \(2, 3, 4\)$"):
        check_tensor("mask", torch.ones(2, 3, 4), broadcasts_to=(3, 4), note="the scores")  # broadcasts wider
