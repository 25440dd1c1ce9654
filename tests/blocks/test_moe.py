"""The mixture of experts against Hugging Face's Mixtral block and loss, and against a token-by-token loop."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.serving.generation import generate
from transformer_lib.models.llama import Llama, LlamaConfig, config_from_hf, hf_llama_to_ours
from transformer_lib.blocks.moe import (
    MoE,
    capacity_keep,
    expert_capacity,
    expert_shares,
    load_balancing_loss,
    load_from_hf_mixtral_block,
    moe_params,
    top_k_gating,
)

transformers = pytest.importorskip("transformers")
from transformers.models.mixtral import modeling_mixtral  # noqa: E402


def _hf_block(E=4, k=2, d=32, d_ff=48, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.MixtralConfig(
        hidden_size=d,
        intermediate_size=d_ff,
        num_local_experts=E,
        num_experts_per_tok=k,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    block = modeling_mixtral.MixtralSparseMoeBlock(cfg).eval()
    with torch.no_grad():  # a block built alone starts from uninitialised memory: set every weight
        for p in block.parameters():
            p.normal_(0, 0.2)
    return block


@pytest.mark.parametrize("E, k", [(4, 2), (8, 2), (4, 1)])
def test_moe_matches_hf_mixtral_block(E, k):
    block = _hf_block(E, k)
    moe = load_from_hf_mixtral_block(MoE(32, 48, E, k), block).eval()
    x = torch.randn(3, 17, 32)
    with torch.no_grad():
        theirs = block(x)
        mine = moe(x)
        logits = block.gate(x.view(-1, 32))[0]
    assert (mine - theirs).abs().max() < 1e-5 and theirs.abs().max() > 0.1
    assert torch.allclose(moe.router_logits, logits, atol=1e-6)


def _loop_reference(moe, x, keep=None):
    """Token by token: softmax, top-k, renormalize, weighted sum of the chosen experts (skip dropped ones)."""
    h = x.reshape(-1, x.shape[-1])
    out = torch.zeros_like(h)
    for n in range(h.shape[0]):
        probs = (h[n] @ moe.router.weight.T).softmax(-1)
        w, idx = probs.topk(moe.top_k)
        w = w / w.sum()
        for j in range(moe.top_k):
            if keep is None or keep[n, j]:
                out[n] += w[j] * moe.experts[int(idx[j])](h[n][None])[0]
    return out.view_as(x)


def test_moe_equals_token_by_token_loop():
    moe = MoE(16, 24, 4, 2)
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        assert torch.allclose(moe(x), _loop_reference(moe, x), atol=1e-5)


def test_load_balancing_loss_matches_hf():
    logits = torch.randn(50, 8) * 2
    theirs = modeling_mixtral.load_balancing_loss_func((logits,), num_experts=8, top_k=2)
    assert torch.allclose(load_balancing_loss(logits, 2), theirs, atol=1e-6)


def test_load_balancing_loss_bounds():
    E, k, N = 4, 2, 400
    even = torch.zeros(N, E)  # uniform probabilities; top-k picks by index, so make the picks rotate
    even[torch.arange(N), torch.arange(N) % E] = 1e-3
    even[torch.arange(N), (torch.arange(N) + 1) % E] = 1e-3
    assert abs(float(load_balancing_loss(even, k)) - k) < 1e-2  # the minimum: k
    collapsed = torch.zeros(N, E)
    collapsed[:, 0] = collapsed[:, 1] = 50.0
    assert abs(float(load_balancing_loss(collapsed, k)) - k * E / 2) < 1e-2  # all on 2 of 4 experts, probs 1/2 each


def test_load_balancing_loss_gradient_reaches_router_only_through_probabilities():
    logits = torch.randn(30, 4, requires_grad=True)
    load_balancing_loss(logits, 2).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_top_k_gating_weights():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    w, idx = top_k_gating(logits, 2)
    assert idx.tolist() == [[0, 1]]
    assert torch.allclose(w, torch.softmax(torch.tensor([[2.0, 1.0]]), -1))  # renormalized = softmax over the two
    w1, _ = top_k_gating(logits, 1, normalize=False)
    assert torch.allclose(w1, torch.softmax(logits, -1)[:, :1])  # Switch: the probability itself
    with pytest.raises(ValueError, match="top_k"):
        top_k_gating(logits, 5)


def test_capacity_keeps_first_choices_first():
    experts = torch.tensor([[0, 1], [0, 2], [0, 1], [1, 0]])  # expert 0: first choice of tokens 0-2
    keep = capacity_keep(experts, 3, capacity=2)
    # expert 0 takes the first choices of tokens 0 and 1, so token 2's first choice and token 3's second are
    # dropped; expert 1 takes token 3's first choice, then token 0's second: token 2's second is dropped too
    assert keep.tolist() == [[True, True], [True, True], [False, False], [True, False]]
    assert expert_capacity(100, 8, 2, 1.25) == 32


def test_moe_with_capacity_runs_at_most_capacity_tokens_per_expert_and_matches_loop():
    torch.manual_seed(1)
    moe = MoE(16, 24, 4, 2, capacity_factor=0.5)
    with torch.no_grad():
        moe.router.weight[0] += 1.0  # make expert traffic uneven, so that some assignments overflow
        x = torch.randn(2, 16, 16)
        y = moe(x)
    cap = expert_capacity(32, 4, 2, 0.5)
    counts = torch.bincount(moe.experts_chosen[moe.kept], minlength=4)
    assert (counts <= cap).all() and (~moe.kept).any()
    assert torch.allclose(y, _loop_reference(moe, x, moe.kept), atol=1e-5)


def test_large_capacity_equals_no_capacity():
    moe = MoE(16, 24, 4, 2)
    big = MoE(16, 24, 4, 2, capacity_factor=4.0)
    big.load_state_dict(moe.state_dict())
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        assert torch.equal(moe(x), big(x)) and big.kept.all()


def test_expert_shares_sum_to_one():
    s = expert_shares(torch.tensor([[0, 1], [0, 3]]), 4)
    assert s.tolist() == [0.5, 0.25, 0.0, 0.25]


def test_moe_params_count_modules_and_active_flops():
    moe = MoE(32, 48, 8, 2)
    counts = moe_params(32, 48, 8, 2)
    assert counts["total"] == sum(p.numel() for p in moe.parameters())
    x = torch.randn(1, 1, 32)  # one token: FLOPs = 2 x the weights it is multiplied by
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        moe(x)
    assert fc.get_total_flops() == 2 * counts["active"]


def _hf_mixtral(seed=0):
    torch.manual_seed(seed)
    hc = transformers.MixtralConfig(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        sliding_window=None,
    )
    hf = transformers.MixtralForCausalLM(hc).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    ours = Llama(config_from_hf(hc)).eval()
    ours.load_state_dict(hf_llama_to_ours(hf.state_dict(), 2), strict=True)
    return hf, ours


def test_mixtral_model_logits_and_aux_loss_match_hf():
    hf, ours = _hf_mixtral()
    ids = torch.randint(0, 61, (2, 19))
    with torch.no_grad():
        out = hf(ids, output_router_logits=True)
        mine = ours(ids)[0]
    assert (mine - out.logits).abs().max() < 1e-5
    for block, theirs in zip(ours.blocks, out.router_logits):
        assert torch.allclose(block.ffn.router_logits, theirs, atol=1e-5)
        assert torch.allclose(
            block.ffn.balance_loss(), modeling_mixtral.load_balancing_loss_func((theirs,), 4, 2), atol=1e-5
        )


def test_mixtral_cached_generation_equals_recomputation():
    _, ours = _hf_mixtral()
    prompt = torch.randint(0, 61, (2, 5))
    assert torch.equal(generate(ours, prompt, 20, use_cache=True), generate(ours, prompt, 20, use_cache=False))


def test_training_loss_adds_the_balancing_term():
    cfg = LlamaConfig(vocab_size=20, n_layers=2, d_model=16, n_heads=2, n_experts=4, top_k=2, aux_loss_coef=0.5)
    model = Llama(cfg)
    x, y = torch.randint(0, 20, (2, 7)), torch.randint(0, 20, (2, 7))
    logits, loss = model(x, y)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    assert torch.allclose(loss, ce + 0.5 * model.balance_loss())
    loss.backward()
    assert model.blocks[0].ffn.router.weight.grad.abs().sum() > 0


def test_moe_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 4\] \(n_experts\), got 5"):
        MoE(8, 8, 4, 5)
    with pytest.raises(ValueError, match="capacity_factor"):
        MoE(8, 8, 4, 2, capacity_factor=0)
    with pytest.raises(ValueError, match=r"x must be a tensor of shape \(B, T, 8\) \(B, T, d_model\), got \(1, 2, 6\)"):
        MoE(8, 8, 4, 2)(torch.zeros(1, 2, 6))
    with pytest.raises(RuntimeError, match="forward"):
        MoE(8, 8, 4, 2).balance_loss()
    with pytest.raises(ValueError, match=r"block.experts.gate_up_proj must be a tensor of shape \(8, 96, 32\)"):
        load_from_hf_mixtral_block(MoE(32, 48, 8, 2), _hf_block(4, 2))


def test_hf_reference_sets_every_weight_and_restores_loggers():
    import logging
    from transformer_lib.experiments import hf_reference as H

    block = H.random_mixtral_block(
        hidden_size=16,
        intermediate_size=8,
        num_local_experts=4,
        num_experts_per_tok=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    assert all(torch.isfinite(p).all() and p.abs().sum() > 0 for p in block.parameters())
    lg = logging.getLogger("torchao")
    before = lg.level
    with H.quiet_loggers("torchao"):
        assert lg.level == logging.ERROR
    assert lg.level == before
    moe = load_from_hf_mixtral_block(MoE(16, 8, 4, 2), block)
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        assert (moe(x) - block(x)).abs().max() < 1e-5


@pytest.mark.parametrize("top_k", [0, 5, -1])
def test_load_balancing_loss_refuses_top_k_outside_one_to_n_experts(top_k):
    logits = torch.randn(6, 4)
    with pytest.raises(ValueError, match=rf"top_k must be an int in \[1, 4\] \(n_experts\), got {top_k}"):
        load_balancing_loss(logits, top_k)
    with pytest.raises(ValueError, match=r"router_logits must be a tensor of shape \(any, any\), got \(4,\)"):
        load_balancing_loss(logits[0], 1)
