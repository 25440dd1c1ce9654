"""Chapter 09 exercises: absmax int8 codes per row, group-wise int4 round trip, packing two int4 codes per byte,
and a predict-then-run question on the bytes of a quantized layer (``explain_layer_bytes``).

Used in chapter 09.

Each ``check_*`` runs the reader's function and the library's (``transformer_lib.quant``) on the same random inputs
(``checking.check_against``, which also wants the library's dtype: int8 codes, uint8 packed bytes), and when
they differ tries the usual mistakes: if the reader's function matches one, the message names it.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..quant import fake_quantize, pack_int4, quantize
from .checking import ExerciseResult, check_against


def _weights(gen: torch.Generator, K_choices=(8, 16, 32, 64)) -> torch.Tensor:
    """A random ``(N, K)`` weight matrix with a few large entries, like a trained layer's."""
    N = int(torch.randint(2, 9, (1,), generator=gen))
    K = K_choices[int(torch.randint(len(K_choices), (1,), generator=gen))]
    w = torch.randn(N, K, generator=gen) * 0.05
    spikes = torch.rand(N, K, generator=gen) < 0.03
    return torch.where(spikes, w * 8, w)


# ----------------------------------------------------------------------------- exercise 1
def _absmax_codes(w: torch.Tensor) -> torch.Tensor:
    return quantize(w, 8, True, "channel").q


def check_absmax_int8(fn: Callable) -> ExerciseResult:
    """``fn(w) -> q``: int8 absmax codes with one scale per row: ``q = round(w / s)``, ``s = max|w_row| / 127``.

    ``w: (N, K)`` float32 -> ``q: (N, K)`` int8 in ``[-127, 127]``.
    """

    def make_inputs(gen):
        return (_weights(gen),)

    return check_against(
        fn,
        _absmax_codes,
        make_inputs,
        atol=0,
        rtol=0,
        hints={
            "one scale for the whole matrix: compute max|w| per row (dim=1, keepdim=True).": lambda w: torch.round(
                w / (w.abs().max() / 127)
            ).to(torch.int8),
            (
                "the codes are truncated toward zero: .to(torch.int8) drops the fraction, call torch.round first."
            ): lambda w: (w / (w.abs().amax(1, keepdim=True) / 127)).to(torch.int8),
            "the scale uses 128: with 128 the largest weight maps to 128, which int8 cannot hold; use 127.": lambda w: (
                torch.round(w / (w.abs().amax(1, keepdim=True) / 128)).clamp(-128, 127).to(torch.int8)
            ),
            (
                "the scale uses 255 (the whole int8 range): absmax maps [-max, max] onto [-127, 127], so divide "
                "max by 127."
            ): lambda w: torch.round(w / (w.abs().amax(1, keepdim=True) / 255)).clamp(-128, 127).to(torch.int8),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _int4_groups(w: torch.Tensor, group_size: int) -> torch.Tensor:
    return fake_quantize(w, 4, True, "group", group_size)


def check_int4_group_round_trip(fn: Callable) -> ExerciseResult:
    """``fn(w, group_size) -> w_hat``: group-wise absmax int4 (codes ``-7..7``), then back to float.

    ``w: (N, K)`` float32, ``group_size`` divides ``K``: each run of ``group_size`` consecutive weights of a row
    has its own scale ``max|group| / 7``. Returns ``(N, K)`` float32 ``round(w / s) * s``.
    """

    def make_inputs(gen):
        w = _weights(gen, K_choices=(16, 32, 64))
        return w, (4, 8, 16)[int(torch.randint(3, (1,), generator=gen))]

    return check_against(
        fn,
        _int4_groups,
        make_inputs,
        atol=1e-6,
        rtol=1e-5,
        hints={
            "you used one scale per row: reshape each row into (K // group_size, group_size) and take the max of "
            "each group.": lambda w, g: fake_quantize(w, 4, True, "channel"),
            (
                "you divided by 8 (or 15): symmetric int4 uses the codes -7..7, so the scale is max|group| / 7."
            ): lambda w, g: _grouped_round_trip(w, g, 8),
            "you returned the integer codes: multiply them by their group's scale to get back floats.": lambda w, g: (
                quantize(w, 4, True, "group", g).q.float()
            ),
        },
    )


def _grouped_round_trip(w: torch.Tensor, g: int, qmax: int) -> torch.Tensor:
    wg = w.reshape(w.shape[0], -1, g)
    s = wg.abs().amax(-1, keepdim=True) / qmax
    return (torch.round(wg / s).clamp(-qmax, qmax) * s).reshape(w.shape)


# ----------------------------------------------------------------------------- exercise 3
def check_pack_int4(fn: Callable) -> ExerciseResult:
    """``fn(q) -> packed``: two int4 codes per byte, element ``2i`` in the low nibble of byte ``i``, ``2i + 1`` in
    the high nibble, negative codes in two's complement (-1 is ``0b1111``).

    ``q: (N, K)`` int8 in ``[-8, 7]``, K even -> ``(N, K // 2)`` uint8.
    """

    def make_inputs(gen):
        N, half = (int(n) for n in torch.randint(1, 9, (2,), generator=gen))
        return (torch.randint(-8, 8, (N, 2 * half), generator=gen).to(torch.int8),)

    return check_against(
        fn,
        pack_int4,
        make_inputs,
        atol=0,
        rtol=0,
        hints={
            (
                "the nibbles are swapped: element 2i goes into the LOW 4 bits, element 2i + 1 into the high 4 bits."
            ): lambda q: pack_int4(torch.stack([q[:, 1::2], q[:, 0::2]], -1).flatten(-2)),
            (
                "negative codes spill into the other nibble: keep only their low 4 bits (q & 0xF) before shifting."
            ): lambda q: ((q[:, 0::2].to(torch.int16) | (q[:, 1::2].to(torch.int16) << 4)) & 0xFF).to(torch.uint8),
        },
    )


# ----------------------------------------------------------------------------- predict, then run
def explain_layer_bytes(guess, measured: int, d_in: int, d_out: int, bits: int, group_size: int) -> ExerciseResult:
    """Compare the reader's predicted bytes ``guess`` of a quantized ``nn.Linear(d_in, d_out)``'s ``state_dict``
    (``measured``: the bytes its tensors hold) with its parts: ``bits``-bit codes packed into bytes, one float16
    scale per group of ``group_size`` weights of a row, and the float32 bias. A guess that leaves one part out or
    stores it wider is named.
    """
    if isinstance(guess, bool) or not isinstance(guess, (int, float)):
        return ExerciseResult(False, f"put your prediction (a number of bytes) in the variable first, got {guess!r}.")
    codes, scales, bias = d_in * d_out * bits // 8, 2 * d_out * (d_in // group_size), 4 * d_out
    why = (
        f"codes {d_out} x {d_in} x {bits} bits = {codes:,} bytes, {d_out} x {d_in // group_size} float16 scales "
        f"= {scales:,} bytes, float32 bias {bias:,} bytes: {measured:,} bytes in all"
    )
    if guess == measured:
        return ExerciseResult(True, why + ".")
    wrong = {
        "the scales: every group of weights carries one": codes + bias,
        "the bias, which stays float32": codes + scales,
        f"the packing: two {bits}-bit codes share a byte, they do not take one byte each": d_in * d_out + scales + bias,
        "the scales' format: they are float16 (2 bytes), not float32": codes + 2 * scales + bias,
        "the bias's format: it stays float32 (4 bytes per value)": codes + scales + bias // 2,
    }
    for what, count in wrong.items():
        if guess == count:
            return ExerciseResult(False, f"you guessed {guess:,}: check {what}. In fact, {why}.")
    return ExerciseResult(False, f"you guessed {guess:,}, off by {guess - measured:+,}. In fact, {why}.")
