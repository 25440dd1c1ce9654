"""Recurrent networks written out, and how their gradients vanish or explode (chapter 01).

Used in chapter 01.

* ``rnn_step`` / ``ElmanRNN``: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (Elman 1990),
  with ``nn.RNN``'s parameter layout so weights copy one-to-one.
* ``lstm_step`` / ``LSTM``: the LSTM of Hochreiter & Schmidhuber 1997 with a forget gate (Gers et al. 2000),
  gates in ``nn.LSTM``'s order (input, forget, cell, output).
* ``state_jacobian``, ``spectral_radius``, ``set_spectral_radius``, ``input_gradient_norms``: how a gradient
  shrinks or grows as it travels back through the time steps.

Chapter 01's two other measurements are experiments: ``experiments.recall`` (a long-range recall task) and
``experiments.sequence_cost`` (operator calls, FLOPs and time of a loop against attention).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_choice, check_fields, check_int, check_number, check_tensor, check_type

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "linear": lambda z: z}


# ----------------------------------------------------------------------------- the recurrent cells
def rnn_step(x_t, h, w_ih, w_hh, b_ih=None, b_hh=None, nonlinearity: str = "tanh") -> torch.Tensor:
    """One Elman step: ``x_t: (B, D)``, ``h: (B, H)`` -> new ``h: (B, H)``.

    ``w_ih: (H, D)``, ``w_hh: (H, H)``, biases ``(H,)`` (``nn.RNNCell``'s layout).
    """
    check_choice("nonlinearity", nonlinearity, ACTIVATIONS)
    z = F.linear(x_t, w_ih, b_ih) + F.linear(h, w_hh, b_hh)  # (B, H)
    return ACTIVATIONS[nonlinearity](z)


def lstm_step(x_t, h, c, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step: ``x_t: (B, D)``, ``h, c: (B, H)`` -> new ``(h, c)``.

    ``w_ih: (4H, D)``, ``w_hh: (4H, H)`` stack the gates in ``nn.LSTM``'s order: input, forget, cell, output.
    """
    i, f, g, o = (F.linear(x_t, w_ih, b_ih) + F.linear(h, w_hh, b_hh)).chunk(4, dim=-1)  # each (B, H)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # forget some of the old, write some new
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


class _Recurrent(nn.Module):
    """Parameters shared by ``ElmanRNN`` and ``LSTM`` (``gates`` = 1 or 4), initialised like PyTorch's."""

    def __init__(self, d_in: int, d_hidden: int, gates: int, bias: bool):
        super().__init__()
        check_int("d_in", d_in, min=1), check_int("d_hidden", d_hidden, min=1)
        self.d_in, self.d_hidden = d_in, d_hidden
        self.weight_ih = nn.Parameter(torch.empty(gates * d_hidden, d_in))  # (G*H, D)
        self.weight_hh = nn.Parameter(torch.empty(gates * d_hidden, d_hidden))  # (G*H, H)
        self.bias_ih = nn.Parameter(torch.empty(gates * d_hidden)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(gates * d_hidden)) if bias else None
        bound = 1.0 / math.sqrt(d_hidden)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def _zeros(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(x.shape[0], self.d_hidden)  # (B, H)

    @torch.no_grad()
    def load_from_torch(self, module: nn.RNNBase) -> "_Recurrent":
        """Copy the weights of a one-layer, one-direction ``nn.RNN`` / ``nn.LSTM`` of the same sizes."""
        sizes = dict(input_size=self.d_in, hidden_size=self.d_hidden, bias=self.bias_ih is not None)
        check_fields("module", module, num_layers=1, bidirectional=False, proj_size=0, **sizes)
        self.weight_ih.copy_(module.weight_ih_l0)
        self.weight_hh.copy_(module.weight_hh_l0)
        if self.bias_ih is not None:
            self.bias_ih.copy_(module.bias_ih_l0)
            self.bias_hh.copy_(module.bias_hh_l0)
        return self


class ElmanRNN(_Recurrent):
    """A vanilla RNN as a Python loop: T dependent calls of ``rnn_step``. ``x: (B, T, D) -> (B, T, H)``."""

    def __init__(self, d_in: int, d_hidden: int, nonlinearity: str = "tanh", bias: bool = True):
        check_choice("nonlinearity", nonlinearity, ACTIVATIONS)
        super().__init__(d_in, d_hidden, 1, bias)
        self.nonlinearity = nonlinearity

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None):
        """Returns ``(outputs (B, T, H), h_T (B, H))``; ``h0: (B, H)`` defaults to zeros."""
        check_tensor("x", x, shape=("B", "T", self.d_in), floating=True, note=f"d_in={self.d_in}")
        h = self._zeros(x) if h0 is None else h0
        outputs = []
        for t in range(x.shape[1]):  # step t needs h from step t-1: no two steps can run at once
            h = rnn_step(x[:, t], h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, self.nonlinearity)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h

    @torch.no_grad()
    def load_from_torch(self, module: nn.RNN) -> "ElmanRNN":
        check_type("module", module, nn.RNN, expected="an nn.RNN")
        check_fields("module", module, nonlinearity=self.nonlinearity)
        return super().load_from_torch(module)


class LSTM(_Recurrent):
    """An LSTM as a Python loop of ``lstm_step``. ``x: (B, T, D) -> (B, T, H)``."""

    def __init__(self, d_in: int, d_hidden: int, bias: bool = True):
        super().__init__(d_in, d_hidden, 4, bias)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None):
        """Returns ``(outputs (B, T, H), (h_T, c_T))``; ``state = (h0, c0)``, each ``(B, H)``, defaults to zeros."""
        check_tensor("x", x, shape=("B", "T", self.d_in), floating=True, note=f"d_in={self.d_in}")
        h, c = (self._zeros(x), self._zeros(x)) if state is None else state
        outputs = []
        for t in range(x.shape[1]):
            h, c = lstm_step(x[:, t], h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
            outputs.append(h)
        return torch.stack(outputs, dim=1), (h, c)

    @torch.no_grad()
    def load_from_torch(self, module: nn.LSTM) -> "LSTM":
        check_type("module", module, nn.LSTM, expected="an nn.LSTM")
        return super().load_from_torch(module)


# ----------------------------------------------------------------------------- vanishing and exploding gradients
def state_jacobian(w_hh: torch.Tensor, hiddens: torch.Tensor) -> torch.Tensor:
    """``d h_k / d h_0`` of a tanh RNN that visited ``hiddens = (h_1, ..., h_k): (k, H)``: ``(H, H)``.

    Chain rule: ``d h_t / d h_{t-1} = diag(1 - h_t^2) W_hh``, so the product is
    ``diag(1 - h_k^2) W_hh ... diag(1 - h_1^2) W_hh``. With all ``h_t = 0`` it is ``W_hh^k``.
    """
    check_tensor("w_hh", w_hh, shape=("H", "H"), note="square")
    check_tensor("hiddens", hiddens, shape=("k", len(w_hh)), note=f"H={len(w_hh)}")
    jac = torch.eye(w_hh.shape[0], dtype=w_hh.dtype, device=w_hh.device)
    for h in hiddens:  # h_1 first
        jac = (1 - h**2)[:, None] * w_hh @ jac  # diag(1 - h_t^2) W_hh  (product so far)
    return jac


def spectral_radius(w: torch.Tensor) -> torch.Tensor:
    """Largest eigenvalue magnitude of a square matrix ``w: (H, H)`` (a 0-d tensor)."""
    check_tensor("w", w, shape=("H", "H"), note="square")
    return torch.linalg.eigvals(w.double()).abs().max().to(w.dtype)


def set_spectral_radius(w: torch.Tensor, rho: float) -> torch.Tensor:
    """``w`` rescaled so that its spectral radius is ``rho``: ``w * rho / spectral_radius(w)``."""
    check_number("rho", rho, min=0)
    radius = spectral_radius(w)
    check_number("spectral_radius(w)", float(radius), min=0, min_open=True, note="a nilpotent w cannot be rescaled")
    return w * (rho / radius)


def input_gradient_norms(
    model: Callable, x: torch.Tensor, u: torch.Tensor | None = None, seed: int = 0
) -> torch.Tensor:
    """How much the last output depends on each input: ``(T,)``.

    ``model`` maps ``x: (B, T, D)`` to ``y: (B, T, H)`` (or a tuple whose first item is ``y``).
    The loss of sequence b is ``u_b . y_b[T-1]`` (``u: (B, H)``, random unit vectors by default); entry t is
    the root mean square over the batch of ``|| d loss_b / d x_b[t] ||``. Sequences must not mix in ``model``.
    """
    check_tensor("x", x, shape=("B", "T", "D"), floating=True)
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = model(x)
        y = y[0] if isinstance(y, tuple) else y  # (B, T, H)
        if u is None:
            gen = torch.Generator().manual_seed(seed)
            u = F.normalize(torch.randn(y.shape[0], y.shape[-1], generator=gen), dim=-1).to(y)
        check_tensor("u", u, shape=(y.shape[0], y.shape[-1]), note=f"B={y.shape[0]}, H={y.shape[-1]}")
        (grad,) = torch.autograd.grad((y[:, -1] * u).sum(), x)  # (B, T, D)
    return grad.norm(dim=-1).pow(2).mean(dim=0).sqrt()  # (T,)
