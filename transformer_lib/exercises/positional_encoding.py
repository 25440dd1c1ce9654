"""Chapter 04 exercises: positional encoding.

Used in chapter 04.

1. ``check_sinusoidal_table(fn)``: ``fn(max_len, d_model) -> (max_len, d_model)``, the paper's table.
2. ``check_rope(fn)``: ``fn(x) -> x`` rotated, ``x: (B, H, T, d_head)``, position t rotated by ``t * theta_i``.
3. ``check_alibi_bias(fn)``: ``fn(n_heads, t) -> (n_heads, t, t)``, the causal ALiBi bias.

Each compares the reader's function with the library on random inputs (``checking.check_against``);
on a mismatch it also tries the usual slips (sin/cos swapped, wrong frequency, wrong sign...) and
names the one that matches the reader's output.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..blocks.positional import RotaryEmbedding, alibi_bias, alibi_slopes, sinusoidal_table
from .checking import ExerciseResult, check_against


# ----------------------------------------------------------------------------- 1. sinusoidal table
def _table_inputs(gen: torch.Generator) -> tuple:
    max_len = int(torch.randint(1, 80, (1,), generator=gen))
    d_model = 2 * int(torch.randint(1, 33, (1,), generator=gen))
    return max_len, d_model


def _table_slips() -> dict[str, Callable]:
    def swapped(max_len, d_model):
        t = sinusoidal_table(max_len, d_model)
        return torch.stack((t[:, 1::2], t[:, 0::2]), dim=-1).flatten(1)

    def exponent_i(max_len, d_model):  # 10000^(i/d) with i the pair index instead of 2i
        pos = torch.arange(max_len, dtype=torch.float64)[:, None]
        ang = pos * 10000.0 ** (-torch.arange(d_model // 2, dtype=torch.float64) / d_model)
        return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1).float()

    def halves(max_len, d_model):  # [sin ... sin, cos ... cos] instead of interleaved
        t = sinusoidal_table(max_len, d_model)
        return torch.cat((t[:, 0::2], t[:, 1::2]), dim=1)

    return {
        "sin and cos are swapped: even dimensions 2i take sin, odd ones 2i+1 take cos.": swapped,
        "the exponent is 2i/d_model, where 2i is the even dimension (not the pair index i).": exponent_i,
        "the paper interleaves them: dimension 2i is sin, 2i+1 is cos (not all sin then all cos).": halves,
    }


def check_sinusoidal_table(fn: Callable) -> ExerciseResult:
    """``fn(max_len, d_model)`` must return the ``(max_len, d_model)`` table with
    ``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and ``PE[pos, 2i+1] = cos(...)``."""
    return check_against(fn, sinusoidal_table, _table_inputs, atol=1e-4, rtol=1e-4, hints=_table_slips())


# ----------------------------------------------------------------------------- 2. RoPE
def _rope_inputs(gen: torch.Generator) -> tuple:
    b, h, t = (int(torch.randint(1, n, (1,), generator=gen)) for n in (3, 4, 40))
    d_head = 2 * int(torch.randint(1, 17, (1,), generator=gen))
    return (torch.randn(b, h, t, d_head, generator=gen),)


def _rope_reference(x: torch.Tensor) -> torch.Tensor:
    return RotaryEmbedding(x.shape[-1])(x)


def _rope_slips() -> dict[str, Callable]:
    def inverse(x):  # rotates by -angle: diag(1, -1) R(a) diag(1, -1) = R(-a)
        flip = torch.tensor([1.0, -1.0], dtype=x.dtype).repeat(x.shape[-1] // 2)
        return _rope_reference(x * flip) * flip

    def halves(x):  # GPT-NeoX/LLaMA-HF pairing (i, i + d/2) instead of (2i, 2i+1)
        d = x.shape[-1]
        perm = torch.stack((torch.arange(d // 2), torch.arange(d // 2, d)), dim=-1).flatten()
        inv = torch.argsort(perm)
        return _rope_reference(x[..., perm])[..., inv]

    return {
        "your rotation goes the wrong way: the pair (x1, x2) becomes (x1 cos - x2 sin, x1 sin + x2 cos).": inverse,
        "this chapter pairs neighbouring features (2i, 2i+1); you paired i with i + d_head/2 "
        "(the GPT-NeoX layout, also valid but a different convention).": halves,
    }


def check_rope(fn: Callable) -> ExerciseResult:
    """``fn(x)``, ``x: (B, H, T, d_head)``, must rotate each feature pair ``(x[..., 2i], x[..., 2i+1])`` at
    position ``t`` by the angle ``t * 10000^(-2i/d_head)`` (what ``RotaryEmbedding`` does)."""
    return check_against(fn, _rope_reference, _rope_inputs, atol=1e-4, rtol=1e-4, hints=_rope_slips())


# ----------------------------------------------------------------------------- 3. ALiBi
def _alibi_inputs(gen: torch.Generator) -> tuple:
    n_heads = 2 ** int(torch.randint(0, 5, (1,), generator=gen))  # 1, 2, 4, 8 or 16
    return n_heads, int(torch.randint(1, 16, (1,), generator=gen))


def _alibi_reference(n_heads: int, t: int) -> torch.Tensor:
    return alibi_bias(n_heads, t)


def _alibi_slips() -> dict[str, Callable]:
    def positive(n_heads, t):
        return -alibi_bias(n_heads, t)

    def no_clamp(n_heads, t):  # future keys get a positive bias
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return -alibi_slopes(n_heads)[:, None, None] * (i - j).float()

    def reversed_slopes(n_heads, t):
        return alibi_bias(n_heads, t).flip(0)

    return {
        "the bias must be negative: -slope * distance, so far keys lose score.": positive,
        "keys in the future (j > i) should get 0 here (the causal mask hides them); "
        "clamp the distance i - j at 0.": no_clamp,
        "head 0 gets the steepest slope 2^(-8/n_heads), the last head the gentlest 2^(-8).": reversed_slopes,
    }


def check_alibi_bias(fn: Callable) -> ExerciseResult:
    """``fn(n_heads, t)`` (``n_heads`` a power of two) must return the ``(n_heads, t, t)`` bias
    ``-m_h * max(i - j, 0)`` with slopes ``m_h = 2^(-8 (h + 1) / n_heads)``."""
    return check_against(fn, _alibi_reference, _alibi_inputs, atol=1e-6, rtol=1e-5, hints=_alibi_slips())


# ----------------------------------------------------------------------------- 4. predict, then run
def explain_longest_wavelength_prediction(guess, d_model: int = 16, base: float = 10000.0) -> ExerciseResult:
    """Compare a predicted wavelength (in positions) of the *last* (sin, cos) pair of a ``d_model``-wide
    sinusoidal table with the one measured on the table itself: the period of its last column.

    Right within 5%. A wrong guess is compared with the usual slips (the limit ``2 pi base``, forgetting
    ``2 pi``, pair 0's ``2 pi``) and the message says which one it looks like.
    """
    try:
        guess = float(guess)
    except (TypeError, ValueError):
        return ExerciseResult(False, f"write your guess as a number of positions, got {guess!r}.")
    angle_step = math.atan2(*_last_pair_step(d_model))  # radians the last pair turns per position
    real = 2 * math.pi / angle_step
    if abs(guess - real) <= 0.05 * real:
        return ExerciseResult(
            True,
            f"the last pair of a {d_model}-wide table turns once every {real:,.0f} positions: "
            f"2 pi * {base:g}^(({d_model} - 2) / {d_model}).",
        )
    slips = {
        2 * math.pi * base: "that is 2 pi * base, the limit the last pair approaches only as d_model grows; "
        "the last pair is 2i = d_model - 2, so its exponent is (d_model - 2) / d_model, not 1",
        real / (2 * math.pi): "that is the right power of the base without the factor 2 pi: a wavelength is "
        "2 pi / omega_i, and omega_i = base^(-2i / d_model)",
        2 * math.pi: "that is pair 0's wavelength (the fastest hand); the last pair is the slowest",
        base ** ((d_model - 2) / d_model): "that is 1 / omega_i, a radian's worth of positions; "
        "one full turn takes 2 pi times as many",
    }
    why = next((msg for value, msg in slips.items() if abs(guess - value) <= 0.05 * value), None)
    return ExerciseResult(
        False,
        f"the last pair turns once every {real:,.0f} positions, your guess is {guess:,.0f}"
        + (f": {why}." if why else f" (2 pi * {base:g}^((d_model - 2) / d_model))."),
    )


def _last_pair_step(d_model: int) -> tuple[float, float]:
    """(sin, cos) of the angle the last pair turns from position 0 to position 1, read off the table."""
    table = sinusoidal_table(2, d_model).double()  # (2, d_model)
    return float(table[1, -2]), float(table[1, -1])  # position 1: sin and cos of omega_last
