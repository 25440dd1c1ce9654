"""Chapter 04's exercise checks: a correct answer written from the formulas passes, the usual slips
fail with a message that names them, and a stub that raises does not crash the check."""

import math

import torch

from transformer_lib.exercises.positional_encoding import (
    check_alibi_bias,
    explain_longest_wavelength_prediction,
    check_rope,
    check_sinusoidal_table,
)


# ----------------------------------------------------------------------------- answers written from the papers
def table_from_formula(max_len, d_model):
    """Vaswani et al. 2017, section 3.5, one entry at a time with Python's math module."""
    out = torch.empty(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            angle = pos / 10000 ** (i / d_model)
            out[pos, i], out[pos, i + 1] = math.sin(angle), math.cos(angle)
    return out


def rope_complex(x):
    """RoFormer's complex form: feature pair (2i, 2i+1) as a complex number times e^(i t theta_i)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * theta  # (T, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2).to(x.dtype)


def alibi_from_paper(n_heads, t):
    """Press et al. 2022: slopes 2^(-8/n), 2^(-16/n), ...; bias -m * (i - j) for j <= i."""
    out = torch.zeros(n_heads, t, t)
    for h in range(n_heads):
        m = 2.0 ** (-8.0 * (h + 1) / n_heads)
        for i in range(t):
            for j in range(i + 1):
                out[h, i, j] = -m * (i - j)
    return out


def test_correct_answers_pass():
    for check, answer in (
        (check_sinusoidal_table, table_from_formula),
        (check_rope, rope_complex),
        (check_alibi_bias, alibi_from_paper),
    ):
        result = check(answer)
        assert result, result.message
        assert repr(result).startswith("Correct.")


def test_a_stub_that_raises_is_reported_not_raised():
    def stub(*args):
        raise NotImplementedError("write me")

    for check in (check_sinusoidal_table, check_rope, check_alibi_bias):
        result = check(stub)
        assert not result
        assert "NotImplementedError" in result.message and "write me" in result.message


# ----------------------------------------------------------------------------- slips are named
def test_sinusoidal_sin_cos_swapped_is_named():
    def swapped(max_len, d_model):
        t = table_from_formula(max_len, d_model)
        return t[:, [i + 1 if i % 2 == 0 else i - 1 for i in range(d_model)]]

    result = check_sinusoidal_table(swapped)
    assert not result
    assert "largest difference" in result.message and "swapped" in result.message


def test_sinusoidal_wrong_exponent_is_named():
    def pair_index(max_len, d_model):
        out = torch.empty(max_len, d_model)
        for pos in range(max_len):
            for i in range(d_model // 2):
                angle = pos / 10000 ** (i / d_model)
                out[pos, 2 * i], out[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
        return out

    result = check_sinusoidal_table(pair_index)
    assert not result and "2i/d_model" in result.message


def test_sinusoidal_wrong_shape_is_explained():
    result = check_sinusoidal_table(lambda max_len, d_model: table_from_formula(max_len, d_model)[:, :-2])
    assert not result and "shape" in result.message


def test_rope_rotating_the_wrong_way_is_named():
    def backwards(x):
        d = x.shape[-1]
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angle = -torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * theta
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2).float()

    result = check_rope(backwards)
    assert not result and "wrong way" in result.message


def test_rope_half_split_pairing_is_named():
    def neox(x):  # rotate_half convention: pairs (i, i + d/2)
        d = x.shape[-1]
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
        angle = torch.arange(x.shape[-2], dtype=torch.float32)[:, None] * theta
        cos, sin = torch.cat((angle.cos(), angle.cos()), -1), torch.cat((angle.sin(), angle.sin()), -1)
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    result = check_rope(neox)
    assert not result and "GPT-NeoX" in result.message


def test_rope_that_ignores_position_fails():
    result = check_rope(lambda x: x.clone())
    assert not result and "largest difference" in result.message


def test_alibi_slips_are_named():
    positive = check_alibi_bias(lambda n, t: -alibi_from_paper(n, t))
    assert not positive and "negative" in positive.message

    def unclamped(n, t):
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        m = torch.tensor([2.0 ** (-8.0 * (h + 1) / n) for h in range(n)])
        return -m[:, None, None] * (i - j).float()

    result = check_alibi_bias(unclamped)
    assert not result and "clamp" in result.message

    flipped = check_alibi_bias(lambda n, t: alibi_from_paper(n, t).flip(0))
    assert not flipped and "steepest" in flipped.message


# ----------------------------------------------------------------------------- predict the longest wavelength
def test_longest_wavelength_prediction_passes_the_closed_form():
    for d in (8, 16, 64):
        assert explain_longest_wavelength_prediction(2 * math.pi * 10000 ** ((d - 2) / d), d_model=d)
    assert explain_longest_wavelength_prediction(19_869)  # 2 pi * 10000^(14/16), rounded


def test_longest_wavelength_prediction_names_the_usual_slips():
    cases = {
        2 * math.pi * 10000: "limit",
        10000 ** (14 / 16): "2 pi",
        2 * math.pi: "pair 0",
        10000 ** (14 / 16) / 1.0001 * 1.0001: "2 pi",
    }
    for guess, word in cases.items():
        result = explain_longest_wavelength_prediction(guess)
        assert not result and word in result.message
    assert "number of positions" in explain_longest_wavelength_prediction("far").message
    assert not explain_longest_wavelength_prediction(1000)
