"""Chapter 12: the self-checking exercises. A correct reader solution (written without the library) passes, a stub
is reported, and the usual mistakes fail with a message naming them."""

import pytest
import torch

from transformer_lib.exercises.fine_tuning import adam_bytes_parts, check_lora_forward, explain_adam_bytes
from transformer_lib.training.lora import LoRALinear, optimizer_state_bytes


def lora(x, w, b, a, bb, alpha):
    return torch.addmm(b, x, w.t()) + (alpha / a.shape[0]) * torch.mm(torch.mm(x, a.t()), bb.t())


def stub(*args):
    raise NotImplementedError


def test_correct_solution_passes_and_stub_is_reported():
    assert check_lora_forward(lora)
    result = check_lora_forward(stub)
    assert not result and "not written yet" in result.message


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda x, w, b, a, bb, alpha: x @ w.T + b + alpha * (x @ a.T @ bb.T), "divide by the rank"),
        (lambda x, w, b, a, bb, alpha: x @ w.T + b + x @ a.T @ bb.T, "scaling alpha / r is missing"),
        (lambda x, w, b, a, bb, alpha: alpha / a.shape[0] * (x @ a.T @ bb.T), "frozen layer's output"),
        (lambda x, w, b, a, bb, alpha: x @ w.T + alpha / a.shape[0] * (x @ a.T @ bb.T), "bias is missing"),
    ],
)
def test_lora_mistakes_are_named(wrong, words):
    result = check_lora_forward(wrong)
    assert not result and words in result.message


def measured_adam_bytes(n_in, n_out, r):
    layer = LoRALinear(torch.nn.Linear(n_in, n_out), r=r)
    opt = torch.optim.Adam([p for p in layer.parameters() if p.requires_grad])
    layer(torch.randn(3, n_in)).sum().backward()
    opt.step()
    return optimizer_state_bytes(opt)


def test_adam_bytes_closed_form_equals_the_measurement():
    for n_in, n_out, r in ((384, 1152, 8), (20, 30, 2)):
        assert adam_bytes_parts(n_in, n_out, r)["lora"] == measured_adam_bytes(n_in, n_out, r)
        full = torch.nn.Linear(n_in, n_out)
        opt = torch.optim.Adam(full.parameters())
        full(torch.randn(2, n_in)).sum().backward()
        opt.step()
        assert adam_bytes_parts(n_in, n_out, r)["full"] == optimizer_state_bytes(opt)


def test_adam_bytes_right_answer_passes_and_mistakes_are_named():
    n_in, n_out, r = 384, 1152, 8
    measured = measured_adam_bytes(n_in, n_out, r)
    assert explain_adam_bytes(measured, measured, n_in, n_out, r)
    assert "first" in explain_adam_bytes(None, measured, n_in, n_out, r).message
    for guess, words in (
        (4 * r * (n_in + n_out) + 8, "two"),
        (adam_bytes_parts(n_in, n_out, r)["full"], "frozen"),
        (measured - 8, "step counters"),
        (8 * r * n_in + 8, "B's size"),
        (measured + 1, "off by"),
    ):
        result = explain_adam_bytes(guess, measured, n_in, n_out, r)
        assert not result and words in result.message
