"""The token-flow figure (viz/token_flow.py + js/token_flow.js) shows the numbers of the model's own forward pass.

* Python-side validation (fast): bad input gets an error naming the argument.
* The recorded stages equal what ``GPT.forward`` itself computes, caught with forward hooks and
  ``need_weights=True``, and the next-token probabilities equal ``torch.softmax`` of its logits.
* ``browser``: the ES module, rendered in headless Chromium, shows the model's most likely next token.
"""

from __future__ import annotations

import base64
import json

import pytest
import torch

from transformer_lib.models.configs import GPTConfig

from transformer_lib.models.transformer import GPT
from transformer_lib.viz.token_flow import FlowRecord, TokenFlow, trace_token_flow


def decode(b64: str) -> torch.Tensor:
    """Inverse of live.encode_float32 (as decodeFloat32 in the browser)."""
    return torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=torch.float32)


def _model(positional="rope", seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=50, block_size=16, n_layers=2, n_heads=4, d_model=32, positional=positional)).eval()


def _record(T=6, L=2, H=4, D=32, V=50):
    return FlowRecord(
        list(range(T)),
        torch.randn(T, D),
        torch.rand(L, H, T, T),
        torch.randn(L, T, D),
        torch.randn(L, T, D),
        torch.randn(T, V),
    )


VOCAB = [f"t{i}" for i in range(50)]
TOKENS = [f"t{i}" for i in range(6)]


@pytest.mark.parametrize("positional", ["rope", "learned", "none"])
def test_recorded_stages_equal_the_models_own_forward_pass(positional):
    model = _model(positional)
    ids = torch.tensor([[3, 14, 15, 9, 2, 6, 5]])
    caught = {"attn": [], "ffn": []}
    hooks = [model.tok_emb.register_forward_hook(lambda m, i, o: caught.__setitem__("emb", o))]
    for block in model.blocks:
        hooks.append(block.self_attn.register_forward_hook(lambda m, i, o: caught["attn"].append(o[0])))
        hooks.append(block.ffn.register_forward_hook(lambda m, i, o: caught["ffn"].append(o)))
    with torch.no_grad():
        logits, _ = model(ids, need_weights=True)  # (1, T, V)
    for h in hooks:
        h.remove()
    record = trace_token_flow(model, ids)
    emb = caught["emb"][0] if model.pos is None else model.pos(caught["emb"])[0]
    torch.testing.assert_close(record.embedding, emb)
    torch.testing.assert_close(record.attention, torch.stack([b.self_weights[0] for b in model.blocks]))
    torch.testing.assert_close(record.attn_out, torch.cat(caught["attn"]))
    torch.testing.assert_close(record.ffn_out, torch.cat(caught["ffn"]))
    torch.testing.assert_close(record.logits, logits[0])
    assert record.ids == ids[0].tolist()
    # causal: no position gives weight to a later one; rows sum to 1
    assert torch.all(record.attention.triu(diagonal=1) == 0)
    torch.testing.assert_close(record.attention.sum(-1), torch.ones(2, 4, 7))


@pytest.mark.parametrize("positional", ["rope", "learned"])
def test_trace_is_bit_identical_to_the_written_out_pre_norm_loop_it_replaced(positional):
    """The trace used to loop over the blocks itself; it now watches the model's own forward. Same numbers, exactly:
    the pre-norm block ``x + attn(LN(x))``, ``x + ffn(LN(x))`` written out here as it was."""
    model = _model(positional)
    ids = torch.tensor([[3, 14, 15, 9, 2, 6, 5]])
    record = trace_token_flow(model, ids)
    with torch.no_grad():
        x = model.tok_emb(ids) if model.pos is None else model.pos(model.tok_emb(ids))
        assert torch.equal(record.embedding, x[0])
        for i, block in enumerate(model.blocks):
            a, w = block.self_attn(block.res_self.norm(x), is_causal=True, need_weights=True)
            x = x + a
            f = block.ffn(block.res_ffn.norm(x))
            x = x + f
            assert torch.equal(record.attention[i], w[0]) and torch.equal(record.attn_out[i], a[0])
            assert torch.equal(record.ffn_out[i], f[0])
        assert torch.equal(record.logits, model.lm_head(model.norm(x))[0])


def test_trace_restores_training_mode_and_removes_its_hooks_even_when_the_forward_fails():
    model = _model().train()
    model.blocks[1].ffn.eval()  # a mixed state must come back as it was, not as all-train
    before = {name: m.training for name, m in model.named_modules()}
    record = trace_token_flow(model, torch.tensor([1, 2, 3]))
    assert {name: m.training for name, m in model.named_modules()} == before
    with torch.no_grad():
        model.eval()
        want = model(torch.tensor([[1, 2, 3]]), need_weights=True)[0][0]
        for name, m in model.named_modules():
            m.training = before[name]
    assert torch.equal(record.logits, want)  # traced in eval mode: no dropout

    def boom(module, args):
        raise RuntimeError("boom")

    hook = model.blocks[1].register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        trace_token_flow(model, torch.tensor([1, 2, 3]))
    hook.remove()
    assert {name: m.training for name, m in model.named_modules()} == before
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_widget_sends_top_k_logits_whose_probabilities_are_the_softmax():
    model = _model()
    record = trace_token_flow(model, torch.tensor([1, 2, 3, 4, 5, 6]))
    w = TokenFlow(TOKENS, record, VOCAB, top_k=3)
    probs = torch.softmax(model(torch.tensor([[1, 2, 3, 4, 5, 6]]))[0][0].detach(), dim=-1)  # (T, V)
    top = probs.topk(3, dim=-1)
    assert w.top_ids == top.indices.tolist()
    assert w.top_tokens == [[VOCAB[i] for i in row] for row in top.indices.tolist()]
    p = torch.exp(decode(w.top_logits).reshape(6, 3) - decode(w.logsumexp)[:, None])  # what the JS computes
    torch.testing.assert_close(p, top.values, atol=1e-6, rtol=0)
    torch.testing.assert_close(decode(w.emb_norm), record.embedding.norm(dim=-1))
    assert (w.position, w.stage, w.n_layers, w.n_heads, w.d_model) == (5, "attention", 2, 4, 32)
    assert len(w.attention) <= 4 * 2 * 4 * 6 * 6 * 4 / 3 + 4  # float32 in base64, nothing else


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(tokens=[]), ValueError, r"tokens must hold at least 1 item\(s\) \(one string per position\), got 0"),
        (dict(tokens="abc"), TypeError, "tokens must be a list or tuple, got str 'abc'"),
        (dict(tokens=["a", 1, "c", "d", "e", "f"]), TypeError, r"tokens\[1\] must be a str, got int 1"),
        (
            dict(tokens=TOKENS[:5]),
            ValueError,
            r"record.ids must hold exactly 5 item\(s\) \(one id per token of tokens\), got 6",
        ),
        (dict(record="x"), TypeError, "record must be a FlowRecord"),
        (
            dict(
                record=FlowRecord(
                    list(range(6)),
                    torch.randn(6, 32),
                    torch.rand(2, 4, 5, 5),
                    torch.randn(2, 6, 32),
                    torch.randn(2, 6, 32),
                    torch.randn(6, 50),
                )
            ),
            ValueError,
            r"record.attention must be a tensor of shape \(any, any, 6, 6\)",
        ),
        (
            dict(
                record=FlowRecord(
                    list(range(6)),
                    torch.full((6, 32), float("nan")),
                    torch.rand(2, 4, 6, 6),
                    torch.randn(2, 6, 32),
                    torch.randn(2, 6, 32),
                    torch.randn(6, 50),
                )
            ),
            ValueError,
            "record.embedding must be finite",
        ),
        (dict(vocab=VOCAB[:10]), ValueError, r"vocab must hold exactly 50 item\(s\) \(one string per logit\), got 10"),
        (dict(top_k=0), ValueError, r"top_k must be an int in \[1, 20\], got 0"),
        (dict(n_dims=64), ValueError, r"n_dims must be an int in \[1, 32\], got 64"),
        (dict(position=6), ValueError, r"position must be an int in \[0, 5\], got 6"),
        (dict(layer=2), ValueError, r"layer must be an int in \[0, 1\], got 2"),
        (dict(head=-1), ValueError, r"head must be an int in \[0, 3\], got -1"),
        (dict(stage="logits"), ValueError, "stage must be one of .*'probabilities'.*got 'logits'"),
    ],
)
def test_token_flow_rejects_bad_input_naming_the_argument(kwargs, err, match):
    args = {**dict(tokens=TOKENS, record=_record(), vocab=VOCAB), **kwargs}
    with pytest.raises(err, match=match):
        TokenFlow(**args)


@pytest.mark.parametrize(
    "ids, match",
    [
        (
            torch.zeros(2, 3, dtype=torch.long),
            r"ids must be a tensor of shape \(1, T\) \(\(T,\) or \(1, T\).*got \(2, 3\)",
        ),
        (
            torch.zeros(1, 1, 3, dtype=torch.long),
            r"ids must be a tensor of shape \(T,\) \(\(T,\) or \(1, T\).*got \(1, 1, 3\)",
        ),
        (
            torch.zeros(17, dtype=torch.long),
            r"ids.shape\[-1\] must be an int <= 16 \(T: at most model.cfg.block_size tokens\), got 17",
        ),
    ],
)
def test_trace_rejects_bad_ids(ids, match):
    with pytest.raises(ValueError, match=match):
        trace_token_flow(_model(), ids)


def test_trace_refuses_ids_that_are_not_a_tensor():
    with pytest.raises(TypeError, match=r"ids must be a tensor of shape \(T,\) .*got list"):
        trace_token_flow(_model(), [1, 2])


def test_trace_refuses_what_is_not_a_gpt_or_uses_alibi():
    with pytest.raises(TypeError, match="model must be a transformer_lib GPT"):
        trace_token_flow(torch.nn.Linear(2, 2), torch.tensor([1]))
    with pytest.raises(ValueError, match="alibi"):
        trace_token_flow(_model("alibi"), torch.tensor([1]))


def test_trace_leaves_the_models_mode_alone():
    model = _model().train()
    trace_token_flow(model, torch.tensor([1, 2]))
    assert model.training


# ------------------------------------------------------------------------------------ in the browser
page = pytest.importorskip("test_live_widgets").page  # the headless-Chromium page fixture of the live figures


@pytest.mark.browser
@pytest.mark.parametrize("position", [0, 3, 5])
def test_browser_shows_the_models_most_likely_next_token(page, position):
    model = _model()
    record = trace_token_flow(model, torch.tensor([7, 1, 4, 2, 9, 3]))
    w = TokenFlow(TOKENS, record, VOCAB, top_k=4, position=position, stage="probabilities")
    probs = torch.softmax(record.logits, dim=-1)[position]
    best = int(probs.argmax())
    state = json.dumps(
        {
            name: getattr(w, name)
            for name in w.keys
            if not name.startswith("_") and name not in ("layout", "tabbable", "tooltip", "comm")
        },
        default=str,
    )
    text = json.loads(
        page.js(
            f"""(async () => {{
      const url = URL.createObjectURL(new Blob([{json.dumps(TokenFlow._esm)}], {{type: 'text/javascript'}}));
      const m = await import(url);
      const state = {state};
      const el = document.createElement('div');
      document.getElementById('root').replaceChildren(el);
      m.default.render({{ model: {{ get: (k) => state[k], on() {{}}, set() {{}}, save_changes() {{}} }}, el }});
      return JSON.stringify(el.querySelector('[role=status]').textContent);
    }})()""",
            await_promise=True,
        )
    )
    assert (
        f"Most likely next token: {json.dumps(VOCAB[best])} (id {best}) with probability {probs[best]:.3f}" in text
    ), text
