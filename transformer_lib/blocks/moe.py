"""A sparse mixture of experts (MoE): a router sends each token to ``top_k`` of ``n_experts`` feed-forwards.

Used in chapter 11.

* Shazeer et al. 2017 ("Outrageously Large Neural Networks"): a trained gate picks the top-k experts per token;
  only those run, so parameters grow with the number of experts while the work per token stays that of k.
* Switch Transformer (Fedus et al. 2021): top-1 routing, an **expert capacity** (at most
  ``capacity_factor * tokens * k / n_experts`` tokens per expert; the rest skip the layer through the residual)
  and an auxiliary **load-balancing loss** ``n_experts * sum_e f_e P_e``: ``f_e`` the share of tokens sent to
  expert e, ``P_e`` the mean router probability of e. It is smallest when both are uniform.
* Mixtral (Jiang et al. 2024): 8 SwiGLU experts, top-2, the two weights renormalized to sum to 1, no capacity
  (no token is dropped). ``MoE(..., capacity_factor=None)`` computes what Hugging Face's
  ``MixtralSparseMoeBlock`` computes (``tests/blocks/test_moe.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_int, check_number, check_tensor
from .activations import SwiGLU


def _check_positive_int(name: str, value) -> None:
    check_int(name, value, min=1)


def top_k_gating(router_logits: torch.Tensor, top_k: int, normalize: bool = True):
    """Each token's ``top_k`` experts and their weights from ``router_logits: (N, E)``.

    Returns ``(weights: (N, k) fp32, experts: (N, k) int64)``, best expert first. The weights are the softmax
    probabilities of the chosen experts (Switch, top-1), renormalized to sum to 1 when ``normalize`` (Mixtral).
    """
    E = router_logits.shape[-1]
    check_int("top_k", top_k, 1, E, note="n_experts")
    probs = router_logits.float().softmax(dim=-1)  # (N, E)
    weights, experts = probs.topk(top_k, dim=-1)  # (N, k)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, experts


def expert_capacity(n_tokens: int, n_experts: int, top_k: int, capacity_factor: float) -> int:
    """Slots per expert: ``ceil(capacity_factor * n_tokens * top_k / n_experts)`` (1.0 = a perfectly even share)."""
    check_number("capacity_factor", capacity_factor, min=0, min_open=True, note="None: no capacity")
    return math.ceil(capacity_factor * n_tokens * top_k / n_experts)


def capacity_keep(experts: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Bool ``(N, k)``: which assignments fit in their expert's ``capacity`` slots.

    Slots are filled in priority order: every token's first choice (in token order), then every second choice
    (GShard's order); an assignment past its expert's capacity is dropped.
    """
    N, k = experts.shape
    flat = experts.t().reshape(-1)  # (k N,): slot 0 of every token, then slot 1, ...
    onehot = F.one_hot(flat, n_experts)  # (k N, E)
    rank = (onehot.cumsum(dim=0) * onehot).sum(dim=-1) - 1  # how many earlier assignments this expert took
    return (rank < capacity).view(k, N).t()  # (N, k)


def load_balancing_loss(router_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch's auxiliary loss ``E * sum_e f_e P_e`` for one layer's ``router_logits: (N, E)``.

    ``f_e``: the top-k assignments that went to expert e, divided by the number of tokens N (summing to k, as
    Hugging Face's ``load_balancing_loss_func`` counts them; Switch's top-1 case sums to 1);
    ``P_e``: the mean softmax probability of e. A perfectly even router gives ``top_k``; one expert taking
    everything gives ``top_k * E``. ``f`` has no gradient; ``P`` carries it to the router.
    """
    N, E = check_tensor("router_logits", router_logits, shape=(None, None), floating=True).shape
    check_int("top_k", top_k, 1, E, note="n_experts")
    probs = router_logits.float().softmax(dim=-1)  # (N, E)
    experts = probs.topk(top_k, dim=-1).indices  # (N, k)
    f = F.one_hot(experts, E).sum(dim=(0, 1)).float() / N  # (E,)
    P = probs.mean(dim=0)  # (E,)
    return E * (f * P).sum()


def expert_shares(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Share of all top-k assignments each expert received: ``(E,)`` summing to 1 (uniform: ``1 / E`` each)."""
    counts = torch.bincount(experts.reshape(-1), minlength=n_experts).float()
    return counts / counts.sum()


class MoE(nn.Module):
    """A router and ``n_experts`` SwiGLU experts, ``(B, T, d_model) -> (B, T, d_model)``, no biases.

    Each token runs through its ``top_k`` experts; their outputs are added with the gating weights.
    ``capacity_factor``: None (Mixtral: every assignment runs) or a number (Switch: at most ``expert_capacity``
    tokens per expert in this call; a dropped assignment contributes 0, so with a residual the token passes through).
    With a capacity a token's output depends on the other tokens of the call: cached decoding (one token per call)
    then differs from a full forward.
    After a forward, ``router_logits: (B * T, E)`` and ``experts_chosen: (B * T, k)`` hold what the router did, and
    ``kept: (B * T, k)`` which assignments ran.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        top_k: int = 2,
        capacity_factor: float | None = None,
        normalize: bool = True,
    ):
        super().__init__()
        for name, value in (("d_model", d_model), ("d_ff", d_ff), ("n_experts", n_experts)):
            _check_positive_int(name, value)
        check_int("top_k", top_k, 1, n_experts, note="n_experts")
        if capacity_factor is not None:
            expert_capacity(1, n_experts, top_k, capacity_factor)  # validates it
        self.n_experts, self.top_k = n_experts, top_k
        self.capacity_factor, self.normalize = capacity_factor, normalize
        self.router = nn.Linear(d_model, n_experts, bias=False)  # W_r: (E, d_model)
        self.experts = nn.ModuleList(SwiGLU(d_model, d_ff) for _ in range(n_experts))
        self.router_logits = self.experts_chosen = self.kept = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, shape=("B", "T", self.router.in_features), floating=True, note="B, T, d_model")
        B, T, d = x.shape
        h = x.reshape(B * T, d)  # (N, d): tokens are routed one by one
        logits = self.router(h)  # (N, E)
        weights, experts = top_k_gating(logits, self.top_k, self.normalize)  # (N, k) each
        keep = torch.ones_like(experts, dtype=torch.bool)
        if self.capacity_factor is not None:
            cap = expert_capacity(B * T, self.n_experts, self.top_k, self.capacity_factor)
            keep = capacity_keep(experts, self.n_experts, cap)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where((experts == e) & keep)  # the assignments expert e runs
            if token.numel():
                y = expert(h[token]) * weights[token, slot, None].to(h.dtype)  # (n_e, d)
                out.index_add_(0, token, y)
        self.router_logits, self.experts_chosen, self.kept = logits, experts, keep
        return out.view(B, T, d)

    def balance_loss(self) -> torch.Tensor:
        """``load_balancing_loss`` of the last forward's router logits."""
        if self.router_logits is None:
            raise RuntimeError("balance_loss() needs a forward pass first")
        return load_balancing_loss(self.router_logits, self.top_k)


def moe_params(d_model: int, d_ff: int, n_experts: int, top_k: int) -> dict[str, int]:
    """Parameters of one ``MoE`` layer: ``total`` (router + every expert) and ``active`` (router + k experts), the
    weights one token's forward multiplies."""
    for name, value in (("d_model", d_model), ("d_ff", d_ff), ("n_experts", n_experts), ("top_k", top_k)):
        _check_positive_int(name, value)
    expert = 3 * d_model * d_ff  # gate, up, down
    router = n_experts * d_model
    return {"total": router + n_experts * expert, "active": router + top_k * expert}


@torch.no_grad()
def load_from_hf_mixtral_block(moe: MoE, block) -> MoE:
    """Copy a Hugging Face ``MixtralSparseMoeBlock``'s weights into ``moe`` (same sizes).

    Hugging Face stacks the experts: ``experts.gate_up_proj: (E, 2 d_ff, d_model)`` (gate rows, then up rows)
    and ``experts.down_proj: (E, d_model, d_ff)``; the router is ``gate.weight: (E, d_model)``.
    """
    E, d_model, d_ff = moe.n_experts, moe.router.in_features, moe.experts[0].down.in_features  # moe's sizes
    gate_up = check_tensor(
        "block.experts.gate_up_proj",
        getattr(block.experts, "gate_up_proj", None),  # None: transformers < 5, one module per expert
        shape=(E, 2 * d_ff, d_model),
        note="E, 2 d_ff, d_model: transformers 5 stacks the experts (the book pins 5.24.0); < 5 is not read here",
    )
    down = check_tensor(
        "block.experts.down_proj", block.experts.down_proj, shape=(E, d_model, d_ff), note="E, d_model, d_ff"
    )
    check_tensor("block.gate.weight", block.gate.weight, shape=(E, d_model), note="E, d_model")
    moe.router.weight.copy_(block.gate.weight)
    for e, expert in enumerate(moe.experts):
        expert.gate.weight.copy_(gate_up[e, :d_ff])
        expert.up.weight.copy_(gate_up[e, d_ff:])
        expert.down.weight.copy_(down[e])
    return moe
