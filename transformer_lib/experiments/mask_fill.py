"""Chapter 06's fill-value experiment: ``-1e9`` vs ``-inf`` vs ``finfo.min`` for a blocked score, in fp32 / fp16 /
bf16, replaced or added (``mask_fill_table``), and the weight a key gets when its score is *replaced* by a fixed
value such as GPT-2's former ``-1e4`` (``masked_weight``; karpathy/minGPT#75, huggingface/transformers#17121).

Used in chapter 06.

The library itself never fills masks with ``-1e9`` or ``-1e4`` (see ``masking.py``); those constants appear here
only as the pitfalls being measured.
"""

from __future__ import annotations

import torch

from ..blocks.attention import attention_weights
from ..utils.checks import check_choice

NAIVE_FILL = -1e9  # a common tutorial fill value: the pitfall measured in chapter 06
GPT2_OLD_FILL = -1e4  # the value GPT-2 implementations replaced masked scores with (huggingface/transformers#17121)

FILLS = ("-1e9", "-inf", "finfo.min")


def fill_value(fill: str, dtype: torch.dtype) -> float:
    """The Python number a mask uses for a blocked score."""
    check_choice("fill", fill, FILLS)
    return {"-1e9": NAIVE_FILL, "-inf": float("-inf"), "finfo.min": torch.finfo(dtype).min}[fill]


def apply_fill(scores: torch.Tensor, keep: torch.Tensor, fill: str, how: str) -> torch.Tensor:
    """Block the scores where ``keep`` is False, in ``scores``' dtype.

    ``how="replace"``: ``scores.masked_fill(~keep, value)``; ``how="add"``: ``scores + additive`` with an
    additive mask (0 / value) built in ``scores``' dtype, as many codebases do. May raise (fp16 cannot hold -1e9).
    """
    check_choice("how", how, ("replace", "add"))
    value = fill_value(fill, scores.dtype)
    if how == "replace":
        return scores.masked_fill(~keep, value)
    additive = torch.zeros((), dtype=torch.float64).new_tensor(value).to(scores.dtype)  # the cast is the pitfall
    return scores + torch.where(keep, torch.zeros((), dtype=scores.dtype), additive)  # how == "add"


TABLE_SCORES = torch.tensor([[1.5, -0.5, -30.0, 2.0], [1.5, -0.5, -30.0, 2.0]])  # (2, 4) one row, twice
TABLE_KEEP = torch.tensor([[True, True, False, False], [False, False, False, False]])  # partly / fully masked


def _describe_row(w: torch.Tensor) -> str:
    if torch.isnan(w).any():
        return "NaN"
    n = w.numel()
    if torch.allclose(w.double(), torch.full_like(w.double(), 1.0 / n), atol=1e-3):
        return f"uniform (1/{n} each)"
    return "[" + ", ".join(f"{v:.3g}" for v in w.tolist()) + "]"


def mask_fill_outcome(
    dtype: torch.dtype, fill: str, how: str, scores: torch.Tensor = TABLE_SCORES, keep: torch.Tensor = TABLE_KEEP
) -> dict:
    """One row of ``mask_fill_table``: what the blocked scores became, the weight left on the blocked keys of
    the partly masked row 0, and the softmax of the fully masked row 1 (softmax in the scores' dtype)."""
    row = {"dtype": str(dtype).replace("torch.", ""), "fill": fill, "how": how}
    try:
        filled = apply_fill(scores.to(dtype), keep, fill, how)
    except RuntimeError as err:
        return {
            **row,
            "blocked score": f"error: {str(err).splitlines()[0][:60]}",
            "weight on blocked keys": "-",
            "fully masked row": "-",
        }
    w = torch.softmax(filled, dim=-1).float()
    blocked = sorted({f"{v:.4g}" for v in filled[~keep].float().tolist()})
    return {
        **row,
        "blocked score": ", ".join(blocked),
        "weight on blocked keys": f"{w[0][~keep[0]].sum().item():.3g}",
        "fully masked row": _describe_row(w[1]),
    }


def mask_fill_table(
    dtypes=(torch.float32, torch.float16, torch.bfloat16), fills=FILLS, hows=("replace", "add")
) -> list[dict]:
    """Every (dtype, fill, how) combination on the same scores (``TABLE_SCORES``, ``TABLE_KEEP``)."""
    return [mask_fill_outcome(d, f, h) for d in dtypes for h in hows for f in fills]


def library_softmax(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The library's masked softmax (``attention_weights``) applied to given scores ``(R, T)`` and a boolean
    ``keep: (R, T)``. The scores are passed as ``q k / sqrt(1)`` with ``q = 1`` and ``k = scores``."""
    q = torch.ones(*scores.shape[:-1], 1, 1, dtype=scores.dtype, device=scores.device)  # (R, 1, 1)
    return attention_weights(q, scores[..., :, None], keep[..., None, :])[..., 0, :]  # (R, T)


def masked_weight(
    allowed_scores: torch.Tensor, n_masked: int, fill: float | None, dtype: torch.dtype = torch.float32
) -> float:
    """Total weight that ``n_masked`` blocked keys receive when their scores are **replaced** by ``fill`` (as
    GPT-2 code did with ``-1e4``), next to real keys with ``allowed_scores: (n,)``; softmax in ``dtype``.

    Closed form: ``n_masked e^fill / (n_masked e^fill + sum_j e^{s_j})``. ``fill=None`` uses the library's
    boolean mask instead (``attention_weights``), for which the answer is exactly 0.
    """
    n = allowed_scores.numel()
    if fill is None:
        scores = torch.cat([allowed_scores.double(), torch.zeros(n_masked, dtype=torch.float64)]).to(dtype)
        keep = torch.arange(n + n_masked) < n
        return library_softmax(scores[None], keep[None])[0, n:].double().sum().item()
    scores = torch.cat([allowed_scores.double(), torch.full((n_masked,), float(fill), dtype=torch.float64)])
    return torch.softmax(scores.to(dtype), dim=-1)[n:].double().sum().item()
