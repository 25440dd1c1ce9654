"""Per-head statistics (transformer_lib.analysis.head_stats) against closed-form attention maps."""

import math

import pytest
import torch

from transformer_lib.analysis.head_stats import (
    STATISTICS,
    check_attention_maps,
    dominant_pattern,
    entropy_bits,
    head_statistics,
    head_statistics_over,
    key_weight,
    mean_distance,
    offset_weight,
    row_entropy,
)


def uniform(T, *lead):
    return torch.full((*lead, T, T), 1.0 / T)


def shifted_identity(T, offset):
    """Every query attends to key i + offset; queries without such a key attend to themselves."""
    a = torch.zeros(T, T)
    for i in range(T):
        j = i + offset
        a[i, j if 0 <= j < T else i] = 1.0
    return a


def column(T, key):
    a = torch.zeros(T, T)
    a[:, key] = 1.0
    return a


@pytest.mark.parametrize("T", [2, 5, 17])
def test_uniform_attention_has_entropy_log2_T(T):
    assert torch.allclose(row_entropy(uniform(T, 3)), torch.full((3, T), math.log2(T)), atol=1e-5)


def test_one_hot_rows_have_zero_entropy():
    assert torch.equal(row_entropy(torch.eye(6)), torch.zeros(6))


def test_entropy_of_a_two_point_row_matches_the_formula():
    p = 0.3
    rows = torch.tensor([[p, 1 - p, 0.0]]).expand(3, 3)
    want = -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
    assert torch.allclose(row_entropy(rows), torch.full((3,), want))


# ----------------------------------------------------------------------------- entropy_bits (any distribution)
@pytest.mark.parametrize("n", [1, 2, 7, 50257])
def test_entropy_bits_of_a_uniform_distribution_is_log2_n(n):
    assert entropy_bits(torch.full((n,), 1.0 / n)).item() == pytest.approx(math.log2(n), abs=1e-4)


def test_entropy_bits_of_one_hot_rows_is_exactly_zero_not_nan():
    got = entropy_bits(torch.eye(5))
    assert torch.equal(got, torch.zeros(5))
    assert f"{got[0]:.2f}" == "0.00"  # +0, not -0: a caption must not print "-0.00 bits"


def test_entropy_bits_matches_torch_categorical_along_any_dim():
    p = torch.softmax(torch.randn(3, 5, 7) * 3, dim=1)  # distributions along dim 1
    want = torch.distributions.Categorical(probs=p.transpose(1, 2)).entropy() / math.log(2.0)  # nats -> bits
    torch.testing.assert_close(entropy_bits(p, dim=1), want)


def test_entropy_bits_of_half_precision_is_float32():
    got = entropy_bits(torch.full((2, 8), 0.125, dtype=torch.bfloat16))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.full((2,), 3.0))  # log2(8)


@pytest.mark.parametrize(
    "bad, error, match",
    [(torch.eye(3, dtype=torch.long), ValueError, "floating-point.*int64"), ([0.5, 0.5], TypeError, "tensor.*list")],
)
def test_entropy_bits_rejects_non_float_input(bad, error, match):
    with pytest.raises(error, match=match):
        entropy_bits(bad)


# ----------------------------------------------------------------------------- per-head statistics
@pytest.mark.parametrize("skip_special", [False, True])
def test_identity_attention_scores_one_on_self_and_zero_on_neighbours(skip_special):
    a = torch.eye(7)
    assert offset_weight(a, 0, skip_special).item() == 1.0
    assert offset_weight(a, -1, skip_special).item() == 0.0
    assert offset_weight(a, +1, skip_special).item() == 0.0
    assert mean_distance(a, skip_special).item() == 0.0


@pytest.mark.parametrize("skip_special", [False, True])
@pytest.mark.parametrize("offset", [-1, 1, -2])
def test_shifted_identity_scores_one_at_its_offset(offset, skip_special):
    a = shifted_identity(9, offset)
    assert offset_weight(a, offset, skip_special).item() == pytest.approx(1.0)
    assert offset_weight(a, -offset, skip_special).item() == pytest.approx(0.0)


def test_previous_word_piece_pattern_between_cls_and_sep():
    T = 7  # [CLS] + 5 word pieces + [SEP]; [CLS] and [SEP] attend to themselves, piece 1 to [CLS]
    w = torch.zeros(T, T)
    w[0, 0] = w[1, 0] = w[T - 1, T - 1] = 1.0
    for i in range(2, T - 1):
        w[i, i - 1] = 1.0
    assert offset_weight(w, -1, skip_special=True).item() == 1.0  # pieces 2..5 each look one piece back
    assert offset_weight(w, +1, skip_special=True).item() == 0.0
    assert offset_weight(w, -1).item() == pytest.approx(5 / 6)  # counting [CLS]/[SEP]: row 6 looks at itself


def test_previous_token_head_has_distance_one_when_every_query_has_a_previous_token():
    a = shifted_identity(8, -1)  # query 0 attends to itself
    assert mean_distance(a).item() == pytest.approx(7 / 8)
    assert mean_distance(a, skip_special=True).item() == pytest.approx(1.0)  # queries 1..6 all look back


@pytest.mark.parametrize("T", [2, 6, 11])
def test_uniform_attention_distance_is_closed_form(T):
    assert mean_distance(uniform(T)).item() == pytest.approx((T * T - 1) / (3 * T), rel=1e-6)


@pytest.mark.parametrize("T", [4, 10])
def test_uniform_attention_spreads_weight_1_over_T_everywhere(T):
    s = head_statistics(uniform(T, 2, 3))
    for name in ("previous", "next", "self", "cls", "sep"):
        assert torch.allclose(s[name], torch.full((2, 3), 1.0 / T)), name
    assert torch.allclose(s["entropy"], torch.full((2, 3), math.log2(T)))
    assert torch.allclose(s["entropy_ratio"], torch.ones(2, 3))


def test_attention_on_cls_or_sep_column_is_detected():
    s_cls, s_sep = head_statistics(column(6, 0)), head_statistics(column(6, -1))
    assert s_cls["cls"].item() == 1.0 and s_cls["sep"].item() == 0.0 and s_cls["entropy"].item() == 0.0
    assert s_sep["sep"].item() == 1.0 and s_sep["cls"].item() == 0.0
    assert key_weight(column(6, 5), -1).item() == key_weight(column(6, 5), 5).item() == 1.0


def test_skip_special_ignores_the_rows_of_cls_and_sep():
    a = torch.eye(6)
    a[0], a[-1] = 1.0 / 6, 1.0 / 6  # [CLS] and [SEP] rows spread out; word pieces look at themselves
    assert head_statistics(a)["entropy"].item() == 0.0
    assert head_statistics(a, skip_special=False)["entropy"].item() > 0.5


def test_head_statistics_keeps_leading_dimensions_and_matches_per_map_calls():
    maps = torch.softmax(torch.randn(2, 3, 7, 7) * 3, -1)  # (n_layers, n_heads, T, T)
    s = head_statistics(maps)
    assert set(s) == set(STATISTICS)
    for name, value in s.items():
        assert value.shape == (2, 3) and value.dtype == torch.float32, name
    one = head_statistics(maps[1, 2])
    assert all(torch.allclose(s[k][1, 2], one[k]) for k in STATISTICS)
    # previous-token score, written independently of offset_weight: word pieces 2..5 look back at 1..4
    want = torch.stack([maps[1, 2, i, i - 1] for i in range(2, 6)]).mean()
    assert torch.allclose(s["previous"][1, 2], want)


def test_head_statistics_over_sentences_of_different_lengths_stacks_them():
    maps = [torch.softmax(torch.randn(2, 3, T, T), -1) for T in (5, 9, 6)]
    s = head_statistics_over(maps)
    assert s["sep"].shape == (3, 2, 3)
    assert torch.allclose(s["sep"][1], head_statistics(maps[1])["sep"])


def test_dominant_pattern_names_closed_form_heads():
    T = 8
    maps = torch.stack(
        [shifted_identity(T, -1), shifted_identity(T, 1), torch.eye(T), column(T, 0), column(T, -1), uniform(T)]
    )
    want = ["previous token", "next token", "itself", "[CLS]", "[SEP]", "broad"]
    assert dominant_pattern(head_statistics(maps)) == want
    mix = 0.5 * shifted_identity(T, -1) + 0.5 * shifted_identity(T, 1)  # 0.5 / 0.5, entropy 1 bit of 3
    assert dominant_pattern(head_statistics(mix), threshold=0.6) == "mixed"


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.ones(4, 5) / 5, r"square.*\(4, 5\)"),
        (torch.ones(6), r"square.*\(6,\)"),
        (torch.ones(3, 3, dtype=torch.long), "floating-point"),
        (torch.ones(4, 4), "sum to 1"),
        (torch.tensor([[1.5, -0.5], [0.5, 0.5]]), "values >= 0, got -0.5"),
        (torch.tensor([[float("nan"), 1.0], [0.5, 0.5]]), "NaN"),
    ],
)
def test_bad_maps_raise_value_error_naming_the_problem(bad, match):
    with pytest.raises(ValueError, match=match):
        head_statistics(bad, skip_special=False)
    with pytest.raises(ValueError, match=match):
        check_attention_maps(bad)


def test_too_short_or_bad_arguments_raise_errors_naming_them():
    with pytest.raises(ValueError, match=r"shape\[-1\] must be an int >= 4 \(positions T\), got 3"):
        head_statistics(uniform(3))  # [CLS] w [SEP]: no previous word piece
    with pytest.raises(ValueError, match=r"offset must be an int in \[-3, 3\].*got 5"):
        offset_weight(uniform(4), 5)
    with pytest.raises(TypeError, match="offset must be an int"):
        offset_weight(uniform(4), 1.0)
    with pytest.raises(ValueError, match=r"key must be an int in \[-4, 3\] \(a key position, T=4\), got 4"):
        key_weight(uniform(4), 4)
    with pytest.raises(ValueError, match="maps must hold at least 1 item"):
        head_statistics_over([])
    with pytest.raises(ValueError, match="same leading shape"):
        head_statistics_over([uniform(5, 2), uniform(5, 3)])
    with pytest.raises(
        ValueError, match=r"stats' missing keys must be empty \(pass the dict returned by head_statistics\), got 5"
    ):
        dominant_pattern({"previous": torch.zeros(1)})
    with pytest.raises(ValueError, match="threshold"):
        dominant_pattern(head_statistics(uniform(5)), threshold=0)


def test_bf16_maps_are_accepted_and_give_float32_statistics():
    s = head_statistics(uniform(10).bfloat16())
    assert s["entropy"].dtype == torch.float32
    assert s["entropy"].item() == pytest.approx(math.log2(10), abs=1e-2)


def test_real_minilm_heads_have_valid_statistics():
    pretrained = pytest.importorskip("transformer_lib.models.pretrained")
    try:
        model, tok = pretrained.load_minilm(device="cpu")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    tokens, maps = pretrained.attention_maps(model, tok, "The cat sat on the mat because it was warm.")
    s = head_statistics(maps)  # (6, 12) each
    T = len(tokens)
    assert {tuple(v.shape) for v in s.values()} == {(6, 12)}
    # every head, recomputed with plain Python loops over the word pieces 1 .. T-2
    words = range(1, T - 1)
    for layer in range(6):
        for head in range(12):
            a = maps[layer, head].double().tolist()
            want = {
                "entropy": sum(-sum(p * math.log2(p) for p in a[i] if p > 0) for i in words) / len(words),
                "previous": sum(a[i][i - 1] for i in range(2, T - 1)) / (T - 3),
                "next": sum(a[i][i + 1] for i in range(1, T - 2)) / (T - 3),
                "self": sum(a[i][i] for i in words) / len(words),
                "cls": sum(a[i][0] for i in words) / len(words),
                "sep": sum(a[i][T - 1] for i in words) / len(words),
                "distance": sum(sum(p * abs(i - j) for j, p in enumerate(a[i])) for i in words) / len(words),
            }
            got = {k: s[k][layer, head].item() for k in want}
            assert got == pytest.approx(want, rel=1e-5, abs=1e-7), (layer, head)


@pytest.mark.cuda
def test_statistics_on_cuda_match_cpu():
    maps = torch.softmax(torch.randn(2, 3, 9, 9) * 3, -1)
    cpu, gpu = head_statistics(maps), head_statistics(maps.cuda())
    for name in STATISTICS:
        assert gpu[name].device.type == "cpu"
        assert torch.allclose(cpu[name], gpu[name], atol=1e-5), name
