"""Chapter 08 exercise checks: the right answer passes, common mistakes fail with a hint."""

import pytest
import torch

from transformer_lib.exercises.pruning import (
    check_head_weight_norms,
    check_magnitude_mask,
    check_prune_qkv,
    explain_pruned_params,
)


# ----------------------------------------------------------------------------- exercise 1: qkv rows
def prune_qkv(w_qkv, keep, n_heads):
    """Written from the layout: three blocks of n_heads * d_head rows, head h owns a d_head slice of each."""
    q, k, v = w_qkv.chunk(3)
    return torch.cat([torch.cat([block.chunk(n_heads)[h] for h in keep]) for block in (q, k, v)])


def test_prune_qkv_solution_passes():
    result = check_prune_qkv(prune_qkv)
    assert result and "Correct." in repr(result)


def test_prune_qkv_solution_builds_a_working_smaller_attention():
    # independent of the check: the kept rows, loaded into a 2-head module, give the kept heads' outputs
    from transformer_lib import MultiHeadAttention
    from transformer_lib.compression.pruning import attention_with_heads

    big = MultiHeadAttention(12, 4, bias=False)
    small = attention_with_heads(big, 2)  # 2 heads of big's d_head = 3
    with torch.no_grad():
        small.qkv.weight.copy_(prune_qkv(big.qkv.weight, [1, 3], 4))
        small.out.weight.copy_(big.out.weight[:, [3, 4, 5, 9, 10, 11]])
        x = torch.randn(2, 5, 12)
        q, k, v = big.project_qkv(x)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, 4, T, 3)
        y[:, [0, 2]] = 0
        torch.testing.assert_close(small(x)[0], big.out(y.transpose(1, 2).flatten(2)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w, keep, H: w.view(H, -1, w.shape[1])[keep].flatten(0, 1), "three blocks"),
        (lambda w, keep, H: prune_qkv(w, [h for h in range(H) if h not in keep], H), "NOT in keep"),
        (lambda w, keep, H: torch.cat([w.chunk(3)[0].chunk(H)[h] for h in keep]), "only the W_Q rows"),
    ],
)
def test_prune_qkv_common_mistakes_get_their_hint(wrong, hint):
    result = check_prune_qkv(wrong)
    assert not result and hint in result.message


def test_prune_qkv_stub_is_reported_not_raised():
    def stub(w_qkv, keep, n_heads):
        raise NotImplementedError

    result = check_prune_qkv(stub)
    assert not result and "NotImplementedError" in result.message


# ----------------------------------------------------------------------------- exercise 2: head norms
def head_norms(w_qkv, w_o, n_heads):
    total = torch.zeros(n_heads)
    for block in w_qkv.chunk(3):
        for h, rows in enumerate(block.chunk(n_heads)):
            total[h] += (rows**2).sum()
    for h, cols in enumerate(w_o.chunk(n_heads, dim=1)):
        total[h] += (cols**2).sum()
    return total.sqrt()


def test_head_weight_norms_solution_passes():
    assert check_head_weight_norms(head_norms)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w_qkv, w_o, H: head_norms(w_qkv, torch.zeros_like(w_o), H), "left out W_O"),
        (
            lambda w_qkv, w_o, H: torch.stack(
                [sum(b.chunk(H)[h].norm() for b in w_qkv.chunk(3)) + w_o.chunk(H, dim=1)[h].norm() for h in range(H)]
            ),
            "SUM OF SQUARES",
        ),
    ],
)
def test_head_weight_norms_common_mistakes_get_their_hint(wrong, hint):
    result = check_head_weight_norms(wrong)
    assert not result and hint in result.message


# ----------------------------------------------------------------------------- exercise 3: magnitude mask
def magnitude_mask(w, amount):
    n = round(amount * w.numel())
    threshold = w.abs().flatten().sort().values[n - 1] if n > 0 else -1.0
    return w.abs() > threshold


def test_magnitude_mask_solution_passes():
    assert check_magnitude_mask(magnitude_mask)


def test_magnitude_mask_solution_matches_torch_prune_on_a_linear():
    # independent of the check's reference: apply prune.l1_unstructured to a real Linear and read its mask
    lin = torch.nn.Linear(8, 6)
    w = lin.weight.detach().clone()
    torch.nn.utils.prune.l1_unstructured(lin, "weight", amount=0.5)
    assert torch.equal(magnitude_mask(w, 0.5), lin.weight_mask.bool())


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w, a: w.abs() < w.abs().flatten().sort(descending=True).values[round(a * w.numel()) - 1], "LARGEST"),
        (lambda w, a: w > w.flatten().sort().values[round(a * w.numel()) - 1], "signed"),
        (lambda w, a: ~magnitude_mask(w, a), "inverted"),
    ],
)
def test_magnitude_mask_common_mistakes_get_their_hint(wrong, hint):
    result = check_magnitude_mask(wrong)
    assert not result and hint in result.message


# ----------------------------------------------------------------------------- predict, then run: parameters kept
def real_counts(d_model=16, n_heads=4, keep=2):
    """Parameters of a biased attention layer with n_heads and with keep heads, built with torch.nn.Linear
    (independent of the library's pruning): qkv (d_model -> 3 * H * d_head) and out (H * d_head -> d_model)."""
    d_head = d_model // n_heads

    def count(h):
        return sum(p.numel() for p in torch.nn.Linear(d_model, 3 * h * d_head).parameters()) + sum(
            p.numel() for p in torch.nn.Linear(h * d_head, d_model).parameters()
        )

    return count(n_heads), count(keep), n_heads - keep, d_model, d_head


def test_pruned_params_right_answer_passes():
    before, after, n, d, dh = real_counts()
    result = explain_pruned_params(after, before, after, n, d, dh)
    assert result and f"{after:,}" in result.message


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda b, n, d, dh: b - n * 3 * dh * (d + 1), "W_O"),
        (lambda b, n, d, dh: b - n * 4 * d * dh, "biases"),
        (lambda b, n, d, dh: b - n * (dh * (d + 1) + d * dh), "W_K and W_V"),
        (lambda b, n, d, dh: b - 1, "off by"),
    ],
)
def test_pruned_params_explains_a_wrong_guess(wrong, words):
    before, after, n, d, dh = real_counts()
    result = explain_pruned_params(wrong(before, n, d, dh), before, after, n, d, dh)
    assert not result and words in result.message and f"{after:,}" in result.message


def test_pruned_params_rejects_a_non_number():
    before, after, n, d, dh = real_counts()
    assert "a number" in explain_pruned_params(None, before, after, n, d, dh).message
