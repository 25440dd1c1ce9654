"""The live figures (transformer_lib/viz/live.py + viz/js/) compute what the library computes.

Three kinds of test:

* Python-side validation (fast, unmarked): bad input gets a ValueError naming the argument.
* The maths in the browser (``browser``): each widget's ES module, exactly as anywidget receives it, is
  imported in headless Chromium (the DevTools harness of ``devtools.py``) and its functions are compared
  with torch on the same inputs at 1e-6.
* The built book (``browser``): every live widget renders on its chapter page with no outside request and
  no script error, and moving its control changes what it shows. Needs ``_build/html`` (``make book``).
"""
from __future__ import annotations

import contextlib
import functools
import os
import json
import math
import shutil
import tempfile
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from devtools import no_built_site
import torch

from transformer_lib.viz import live

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "_build" / "html"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


# ------------------------------------------------------------------------ Python-side validation

def _scores(L=2, H=3, T=4):
    return torch.randn(L, H, T, T)


def test_attention_heatmap_accepts_scores_and_encodes_them_compactly():
    w = live.AttentionHeatmap([list("abcd")], [_scores()], layer=1, head=2, temperature=0.5)
    assert (w.n_layers, w.n_heads, w.layer, w.head) == (2, 3, 1, 2)
    assert len(w.scores[0]) == math.ceil(2 * 3 * 4 * 4 * 4 / 3) * 4  # base64 of float32: 4 bytes a number


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokens=[list("abc")], scores=[_scores()]), r"scores\[0\] must be a tensor .*T = len\(tokens\[0\]\) = 3"),
    (dict(tokens=[list("abcd")], scores=[_scores(), _scores()]), "same length"),
    (dict(tokens=[list("abcd"), list("ab")], scores=[_scores(), _scores(L=3, T=2)]), r"expected \(2, 3\)"),
    (dict(tokens=[list("abcd")], scores=[_scores()], layer=2), r"layer must be an int in \[0, 1\], got 2"),
    (dict(tokens=[list("abcd")], scores=[_scores()], head=-1), r"head must be an int in \[0, 2\], got -1"),
    (dict(tokens=[list("abcd")], scores=[_scores()], temperature=0.0), "temperature must be a number"),
    (dict(tokens=[list("abcd")], scores=[_scores()], mode="grid"), "mode must be 'one' or 'all', got 'grid'"),
    (dict(tokens=[list("abcd")], scores=[torch.full((2, 3, 4, 4), float("nan"))]), "must be finite"),
    (dict(tokens=[list("abcd")], scores=[_scores()], head_labels=[[["x"] * 3]]), r"head_labels must hold.*\(2, 3\)"),
])
def test_attention_heatmap_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.AttentionHeatmap(**kwargs)


def test_scaled_scores_give_the_pretrained_models_own_attention_at_temperature_one():
    from transformer_lib.pretrained import attention_maps, load_minilm
    model, tokenizer = load_minilm(torch.device("cpu"))
    sentence = "The cat sat on the mat."
    tokens, scores = live.scaled_scores(model, tokenizer, sentence)  # (L, H, T, T)
    ref_tokens, maps = attention_maps(model, tokenizer, sentence)  # the model's forward pass, need_weights=True
    assert tokens == ref_tokens and scores.shape == maps.shape
    torch.testing.assert_close(torch.softmax(scores, dim=-1), maps, atol=1e-5, rtol=0)
    widget = live.AttentionHeatmap.from_model(model, tokenizer, [sentence])
    assert (widget.n_layers, widget.n_heads) == maps.shape[:2]


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=63), "d_model must be even"),
    (dict(d_model=1024), r"d_model must be an int in \[2, 512\], got 1024"),
    (dict(position=100), r"position must be an int in \[0, 99\], got 100"),
    (dict(other=-1), "other must be an int"),
    (dict(n_positions=1), "n_positions must be an int"),
])
def test_sinusoid_table_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.SinusoidTable(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(q=torch.randn(7), k=torch.randn(7)), r"q must be a 1-D tensor \(d_head,\) with d_head even.*got \(7,\)"),
    (dict(q=torch.randn(8), k=torch.randn(6)), "q and k must have the same shape"),
    (dict(q=torch.randn(8), k=torch.randn(8), m=65), r"m must be an int in \[0, 64\], got 65"),
    (dict(q=torch.randn(8), k=[0.0] * 8), "k must be a 1-D tensor"),
    (dict(q=torch.randn(8), k=torch.randn(8), base=float("nan")), "base must be a number"),
])
def test_rope_rotation_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.RopeRotation(**kwargs)


@pytest.mark.parametrize("models, kwargs, match", [
    ([], {}, "models must list at least one"),
    ([("GPT-2", 12, 12, 64, 1024)], {}, r"models\[0\] must be \(name, n_layers"),
    ([("GPT-2", 0, 12, 64, 1024, 2)], {},
     r"models\[0\] n_layers must be an int in \[1, 128\], got 0"),
    ([("GPT-2", 12, 12, 64, 1024, 3)], {}, "bytes_per_element must be 1, 2 or 4, got 3"),
    ([("GPT-2", 12, 12, 64, 4096, 2)], dict(max_length=2048), r"context_length must be an int in \[1, 2048\]"),
])
def test_kv_cache_calculator_rejects_bad_input_naming_the_argument(models, kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.KVCacheCalculator(models, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(row=torch.randn(4, 8)), r"row must be a 1-D floating-point tensor \(K,\) with K >= 2, got \(\(4, 8\)"),
    (dict(row=torch.arange(8)), "row must be a 1-D floating-point tensor"),
    (dict(row=torch.randn(64), group_options=(None, 24)), "ints dividing K=64, got 24"),
    (dict(row=torch.randn(128), bits=5), r"bits must be one of bits_options=\(2, 3, 4, 8\), got bits=5"),
    (dict(row=torch.randn(64), bits_options=(1, 4)), r"bits_options entries must be an int in \[2, 8\]"),
    (dict(row=torch.randn(64), group_size=16, group_options=(None, 8)), "group_size must be one of"),
    (dict(row=torch.randn(128), outlier=0.5), r"outlier must be a number in \[1.0, 10.0\]"),
])
def test_quant_grid_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.QuantGrid(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(q=torch.randn(3, 4)), r"q must be a finite \(T, d\) tensor with T = len\(tokens\) = 4, got \(3, 4\)"),
    (dict(k=torch.randn(4, 5)), r"q and k must have the same shape"),
    (dict(features=["a"]), "features must name the d_v = 2 value dimensions, got 1 names"),
    (dict(query=4), r"query must be an int in \[0, 3\], got 4"),
    (dict(v=torch.full((4, 2), float("inf"))), "v must be a finite"),
])
def test_attention_steps_rejects_bad_input_naming_the_argument(kwargs, match):
    args = dict(tokens=list("abcd"), q=torch.randn(4, 4), k=torch.randn(4, 4), v=torch.randn(4, 2)) | kwargs
    with pytest.raises(ValueError, match=match):
        live.AttentionSteps(**args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(logits=torch.randn(2, 3, 4)), r"logits must be a finite \(n_layers, T, n_experts\) tensor with T = len\(tokens\) = 5"),
    (dict(logits=torch.randn(2, 5, 1)), "n_experts >= 2"),
    (dict(layer=2), r"layer must be an int in \[0, 1\], got 2"),
    (dict(top_k=5), r"top_k must be an int in \[1, 4\], got 5"),
    (dict(logits=torch.full((2, 5, 4), float("nan"))), "finite"),
])
def test_expert_routing_rejects_bad_input_naming_the_argument(kwargs, match):
    args = dict(tokens=list("abcde"), logits=torch.randn(2, 5, 4)) | kwargs
    with pytest.raises(ValueError, match=match):
        live.ExpertRouting(**args)


def test_router_logits_are_what_each_mixture_layer_routed():
    from transformer_lib.llama import Llama, LlamaConfig
    from transformer_lib.moe import top_k_gating
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=30, n_layers=2, d_model=16, n_heads=2, n_experts=4, top_k=2)).eval()
    ids = torch.randint(0, 30, (9,))
    logits = live.router_logits(model, ids)
    assert logits.shape == (2, 9, 4)
    for block, layer_logits in zip(model.blocks, logits):
        assert torch.equal(top_k_gating(layer_logits, 2)[1], block.ffn.experts_chosen)
    with pytest.raises(ValueError, match="mixture"):
        live.router_logits(Llama(LlamaConfig(vocab_size=30, n_layers=1, d_model=16, n_heads=2)), ids)


# ------------------------------------------------------------------ a browser page for the modules

def _no_browser(error: Exception):
    message = f"headless Chromium did not start ({error})"
    if os.environ.get("CI") or os.environ.get("REQUIRE_BROWSER"):
        pytest.fail(message)
    pytest.skip(message)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def served_in_chromium(browser_path, folder: Path, domains=("Network", "Page", "Runtime")):
    """Serve ``folder`` on 127.0.0.1 and open headless Chromium (devtools.py's harness): ``(chrome, base_url)``."""
    pytest.importorskip("websocket")  # websocket-client, used by the harness
    from devtools import Chromium  # the DevTools client
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    try:
        chrome = Chromium(browser_path, profile)
    except (OSError, RuntimeError) as e:
        httpd.shutdown()
        _no_browser(e)
    try:
        for domain in domains:
            chrome.send(f"{domain}.enable")
        yield chrome, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        chrome.close()
        httpd.shutdown()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def page(browser_path):
    """A blank page on 127.0.0.1 in headless Chromium, with a helper to load modules."""
    folder = Path(tempfile.mkdtemp(prefix="live-page-"))
    (folder / "index.html").write_text("<!doctype html><html><body><div id='root'></div></body></html>")
    try:
        with served_in_chromium(browser_path, folder, ("Runtime", "Page")) as (chrome, base):
            chrome.send("Page.navigate", url=f"{base}/index.html")
            chrome.wait_for("document.readyState === 'complete'")
            yield chrome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_module(page, widget_cls, body: str):
    """Import ``widget_cls``'s ES module (as anywidget does: from a Blob) and return ``body``'s value.

    ``body`` is the inside of an async function whose argument ``m`` is the module.
    """
    src = json.dumps(widget_cls._esm)
    return page.js(f"""(async () => {{
      const url = URL.createObjectURL(new Blob([{src}], {{type: 'text/javascript'}}));
      const m = await import(url);
      return JSON.stringify(await (async (m) => {{ {body} }})(m));
    }})()""", await_promise=True)


def as_json(x: torch.Tensor) -> str:
    return json.dumps(x.tolist())


@pytest.mark.browser
def test_browser_softmax_at_any_temperature_matches_torch(page):
    scores = torch.randn(2, 3, 5, 5) * 3  # (L, H, T, T)
    taus = [0.05, 0.3, 1.0, 2.7, 5.0]
    got = json.loads(run_module(page, live.AttentionHeatmap, f"""
      const flat = m.decodeFloat32({json.dumps(live.encode_float32(scores))});
      return {json.dumps(taus)}.map(tau => {{
        const out = [];
        for (let l = 0; l < 2; l++) for (let h = 0; h < 3; h++)
          out.push(m.headWeights(m.headScores(flat, 3, 5, l, h), tau).map(r => Array.from(r)));
        return out;
      }});"""))
    for tau, weights in zip(taus, got):
        expected = torch.softmax(scores.double() / tau, dim=-1).reshape(6, 5, 5)
        torch.testing.assert_close(torch.tensor(weights, dtype=torch.float64), expected, atol=1e-6, rtol=0)


@pytest.mark.browser
def test_browser_row_entropy_matches_head_stats(page):
    from transformer_lib.head_stats import row_entropy
    p = torch.softmax(torch.randn(7, 7) * 2, dim=-1)  # one square map: row_entropy checks the shape
    p[0] = torch.tensor([1.0, 0, 0, 0, 0, 0, 0])  # 0 log 0 = 0
    got = json.loads(run_module(page, live.AttentionHeatmap, f"return {as_json(p)}.map(m.entropyBits);"))
    torch.testing.assert_close(torch.tensor(got), row_entropy(p), atol=1e-6, rtol=0)  # float32 reference


@pytest.mark.browser
def test_browser_viridis_is_matplotlibs(page):
    from matplotlib import colormaps
    ts = [i / 20 for i in range(21)]
    got = json.loads(run_module(page, live.AttentionHeatmap, f"return {json.dumps(ts)}.map(m.viridisRGB);"))
    expected = [[round(255 * c) for c in colormaps["viridis"](t)[:3]] for t in ts]
    worst = max(abs(a - b) for g, e in zip(got, expected) for a, b in zip(g, e))
    assert worst <= 4, f"viridis in JS is {worst}/255 from matplotlib's somewhere: {got} vs {expected}"


@pytest.mark.browser
def test_browser_round_half_even_matches_torch(page):
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49, -0.51, 126.5, 7.0])
    got = json.loads(run_module(page, live.AttentionHeatmap, f"return {as_json(x)}.map(m.roundHalfEven);"))
    assert got == torch.round(x).tolist()


@pytest.mark.browser
def test_browser_sinusoid_table_matches_the_library(page):
    import transformer_lib as tl
    for d in (2, 6, 64, 510):
        got = json.loads(run_module(page, live.SinusoidTable,
                                    f"return Array.from({{length: 200}}, (_, p) => m.sinusoidalRow(p, {d}));"))
        torch.testing.assert_close(torch.tensor(got, dtype=torch.float32), tl.sinusoidal_table(200, d),
                                   atol=1e-6, rtol=0)


@pytest.mark.browser
def test_browser_dot_products_of_positions_match_torch(page):
    import transformer_lib as tl
    pe = tl.sinusoidal_table(100, 64).double()  # (100, 64)
    got = json.loads(run_module(page, live.SinusoidTable, """
      return Array.from({length: 100}, (_, p) => m.dot(m.sinusoidalRow(p, 64), m.sinusoidalRow(37, 64)));"""))
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), pe @ pe[37], atol=1e-5, rtol=0)


def rope_closed_form(x: torch.Tensor, pos: int, base: float = 10000.0) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) by pos * base^(-2i/d) as complex numbers, in float64 (RoFormer eq. 34)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pairs = torch.view_as_complex(x.double().reshape(d // 2, 2).contiguous())  # (d / 2,) complex
    z = pairs * torch.polar(torch.ones_like(theta), pos * theta)
    return torch.view_as_real(z).reshape(d)


@pytest.mark.browser
def test_browser_rope_matches_the_closed_form_and_the_library(page):
    from transformer_lib.positional import RotaryEmbedding
    x = torch.randn(16)
    positions = [0, 1, 5, 37, 64]
    script = f"return {json.dumps(positions)}.map(p => m.ropeRotate({as_json(x)}, p));"
    got = torch.tensor(json.loads(run_module(page, live.RopeRotation, script)), dtype=torch.float64)  # (5, 16)
    exact = torch.stack([rope_closed_form(x, p) for p in positions])
    torch.testing.assert_close(got, exact, atol=1e-6, rtol=0)
    lib = torch.cat([RotaryEmbedding(16)(x.reshape(1, 1, 1, 16), offset=p).reshape(1, 16) for p in positions])
    torch.testing.assert_close(got.float(), lib, atol=1e-4, rtol=0)  # the library's angles are float32


@pytest.mark.browser
def test_browser_kv_cache_bytes_match_the_library(page):
    from transformer_lib.kv_cache import DynamicCache, kv_cache_bytes
    shapes = [(12, 12, 64, 1024, 1, 2), (32, 32, 128, 2048, 16, 2), (80, 8, 128, 4096, 4, 1), (2, 4, 16, 128, 1, 4)]
    got = json.loads(run_module(page, live.KVCacheCalculator,
                                f"return {json.dumps(shapes)}.map(s => m.kvCacheBytes(...s));"))
    assert got == [kv_cache_bytes(L, H, d, T, batch_size=B, bytes_per_element=nb) for L, H, d, T, B, nb in shapes]
    cache = DynamicCache()  # and what a real cache allocates: 2 layers, batch 1, 4 kv heads, 16 dims, 128 positions
    for layer in range(2):
        cache.update(torch.zeros(1, 4, 128, 16), torch.zeros(1, 4, 128, 16), layer)
    assert got[-1] == cache.nbytes()


def quantize_reference(w: torch.Tensor, bits: int, group_size: int | None) -> torch.Tensor:
    """Absmax round trip: the library's for 4 and 8 bits, the same closed form in torch otherwise."""
    from transformer_lib.quantization import BITS, fake_quantize
    if bits in BITS:
        return fake_quantize(w[None], bits, True, "channel" if group_size is None else "group", group_size)[0]
    qmax = 2 ** (bits - 1) - 1
    g = w.reshape(-1, group_size or w.numel())  # (n_groups, group)
    scale = g.abs().amax(-1, keepdim=True) / qmax
    return (torch.round(g / scale).clamp(-qmax, qmax) * scale).reshape(-1)


@pytest.mark.browser
def test_browser_quantization_grid_matches_the_library(page):
    w = torch.randn(512) * 0.05
    settings = [(b, g) for b in (2, 3, 4, 8) for g in (None, 128, 32, 8)]
    got = json.loads(run_module(page, live.QuantGrid, f"""
      const w = Array.from(m.decodeFloat32({json.dumps(live.encode_float32(w))}));
      return {json.dumps(settings)}.map(([b, g]) => m.quantizeGroups(w, b, g).deq);"""))
    for (bits, g), deq in zip(settings, got):
        torch.testing.assert_close(torch.tensor(deq), quantize_reference(w, bits, g), atol=1e-6, rtol=0,
                                   msg=lambda m: f"int{bits}, groups of {g}: {m}")


@pytest.mark.browser
def test_browser_outlier_scales_the_largest_weight(page):
    w = torch.randn(64)
    got = json.loads(run_module(page, live.QuantGrid,
                                f"const r = m.withOutlier({as_json(w)}, 7.5); return [r.at, r.w];"))
    at = int(w.abs().argmax())
    expected = w.clone()
    expected[at] *= 7.5
    assert got[0] == at
    torch.testing.assert_close(torch.tensor(got[1]), expected, atol=1e-6, rtol=0)


@pytest.mark.browser
def test_browser_attention_steps_match_the_library(page):
    import transformer_lib as tl
    q, k, v = torch.randn(6, 8), torch.randn(6, 8), torch.randn(6, 3)
    taus = [0.1, 1.0, 3.3]
    got = json.loads(run_module(page, live.AttentionSteps, f"""
      const [Q, K, V] = [{as_json(q)}, {as_json(k)}, {as_json(v)}];
      return {json.dumps(taus)}.map(tau => Q.map(q => {{
        const a = m.softmax(m.scoresFor(q, K), tau);
        return [a, m.weightedSum(a, V)];
      }}));"""))
    for tau, per_query in zip(taus, got):
        out, weights = tl.scaled_dot_product_attention(q.double(), k.double(), v.double(), need_weights=True,
                                                       temperature=tau)
        torch.testing.assert_close(torch.tensor([w for w, _ in per_query], dtype=torch.float64), weights,
                                   atol=1e-6, rtol=0)
        torch.testing.assert_close(torch.tensor([o for _, o in per_query], dtype=torch.float64), out,
                                   atol=1e-6, rtol=0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(q=torch.randn(4), k=torch.randn(16, 4), v=torch.randn(16, 2)), "q must be a 2-D floating-point tensor"),
    (dict(q=torch.randn(2, 4), k=torch.randn(16, 3), v=torch.randn(16, 2)), "expected q"),
    (dict(q=torch.randn(2, 4), k=torch.randn(8, 4), v=torch.randn(8, 2), block_k=3, block_options=(1, 4)), "block_k must be one of"),
    (dict(q=torch.randn(2, 4), k=torch.randn(8, 4), v=torch.randn(8, 2), block_options=(4, 9)), "block_options"),
    (dict(q=torch.full((2, 4), math.nan), k=torch.randn(16, 4), v=torch.randn(16, 2)), "q must be finite"),
])
def test_online_softmax_tiles_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.OnlineSoftmaxTiles(**kwargs)


@pytest.mark.browser
def test_browser_online_softmax_steps_match_the_library(page):
    from transformer_lib.flash import trace_one_query_block
    q, k, v = torch.randn(3, 8), torch.randn(21, 8) * 2, torch.randn(21, 5)
    w = live.OnlineSoftmaxTiles(q, k, v, block_k=4, block_options=(1, 4, 8))
    for block in (1, 4, 8):
        got = json.loads(run_module(page, live.OnlineSoftmaxTiles, f"""
          const d = (b) => m.decodeFloat32(b);
          return m.onlineSoftmaxSteps(d({json.dumps(w.q)}), d({json.dumps(w.k)}), d({json.dumps(w.v)}),
                                      3, 21, 8, 5, {block});"""))
        want = trace_one_query_block(q, k, v, block_k=block)
        assert [(s["j0"], s["j1"]) for s in got] == [(s["j0"], s["j1"]) for s in want]
        for g, r in zip(got, want):
            for key in ("m", "l", "out", "scores"):
                torch.testing.assert_close(torch.tensor(g[key], dtype=torch.float64),
                                           torch.tensor(r[key], dtype=torch.float64), atol=1e-5, rtol=1e-5)
    out = torch.tensor(got[-1]["out"], dtype=torch.float64)  # the end of the sweep is attention itself
    torch.testing.assert_close(out.float(), torch.softmax(q @ k.T / math.sqrt(8), -1) @ v, atol=1e-5, rtol=0)


@pytest.mark.browser
def test_browser_online_softmax_figure_renders_and_follows_its_controls(page):
    w = live.OnlineSoftmaxTiles(torch.randn(2, 4), torch.randn(12, 4), torch.randn(12, 3), block_k=4,
                                block_options=(1, 4))
    traits = {name: getattr(w, name) for name in ("q", "k", "v", "bq", "t_k", "d", "d_v", "block_k", "block_options")}
    shown = json.loads(run_module(page, live.OnlineSoftmaxTiles, f"""
      const traits = {json.dumps(traits)};
      const el = document.createElement('div'); document.body.append(el);
      m.default.render({{ model: {{ get: (name) => traits[name], on: () => {{}} }}, el }});
      const text = () => el.querySelector('[role=status]').textContent;
      const range = el.querySelector('input[type=range]'), first = text();
      range.value = range.max; range.dispatchEvent(new Event('input'));
      const last = text(), before = range.max;
      const box = el.querySelector('select'); box.value = '0'; box.dispatchEvent(new Event('change'));
      return [first, last, before, range.max];"""))
    first, last, steps_at_4, steps_at_1 = shown
    assert first.startswith("after 1 tile(s)") and "every key seen" in last and first != last
    assert (steps_at_4, steps_at_1) == ("3", "12")  # 12 keys: 3 tiles of 4, then 12 tiles of 1


def test_browser_expert_routing_matches_top_k_gating(page):
    from transformer_lib.moe import expert_shares, top_k_gating
    torch.manual_seed(3)
    logits = torch.randn(6, 5) * 2
    for k in (1, 2, 3):
        got = json.loads(run_module(page, live.ExpertRouting, f"""
          const rows = {as_json(logits)};
          const gates = rows.map((r) => m.topKGates(r, {k}));
          return [gates, m.expertShares(gates)];"""))
        weights, experts = top_k_gating(logits, k)
        dense = torch.zeros_like(logits).scatter(-1, experts, weights)
        torch.testing.assert_close(torch.tensor(got[0], dtype=torch.float32), dense, atol=1e-6, rtol=0)
        torch.testing.assert_close(torch.tensor(got[1], dtype=torch.float32), expert_shares(experts, 5), atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------ the built book

# Chapter pages and the number of live figures each must show.
LIVE_PAGES = {"notebooks/00_quickstart": 1, "notebooks/02_attention": 2, "notebooks/03_multi_head_attention": 1,
              "notebooks/04_positional_encoding": 2, "notebooks/07_kv_cache": 1, "notebooks/09_quantization": 1,
              "notebooks/10_flash_attention": 1, "notebooks/11_modern_decoder": 1}
SITE = Path(os.environ.get("LIVE_SITE_HTML", BUILT))  # another built copy of the book, e.g. a one-page build

# Everything a figure shows: its canvases' pixels and its text.
SHOWN = """(fig => [...fig.querySelectorAll('canvas')].map(c => c.toDataURL()).join('|') + '|' + fig.innerText)"""

MOVE_EVERY_CONTROL = """(() => {
  const report = [];
  for (const [f, fig] of [...document.querySelectorAll('.tl-live')].entries()) {
    for (const [c, control] of [...fig.querySelectorAll('input[type=range], select')].entries()) {
      const before = %(shown)s(fig);
      if (control.tagName === 'SELECT') {
        control.selectedIndex = (control.selectedIndex + 1) %% control.options.length;
        control.dispatchEvent(new Event('change'));
      } else {
        const at = Number(control.value), max = Number(control.max), min = Number(control.min);
        control.value = String(at < max ? max : min);
        control.dispatchEvent(new Event('input'));
      }
      report.push([fig.dataset.figure, c, control.closest('label')?.innerText.trim(), before !== %(shown)s(fig)]);
    }
  }
  return report;
})()""" % {"shown": SHOWN}


@pytest.fixture(scope="module")
def book_browser(browser_path):
    if not (SITE / "index.html").exists():
        no_built_site(f"no built book at {SITE}: run `make book` first (or set LIVE_SITE_HTML to a built html folder)")
    with served_in_chromium(browser_path, SITE) as served:
        yield served


@pytest.mark.browser
@pytest.mark.site
@pytest.mark.parametrize("page_name", list(LIVE_PAGES))
def test_live_figures_render_offline_and_follow_their_controls(book_browser, page_name):
    chrome, server = book_browser
    if not (SITE / f"{page_name}.html").exists():
        pytest.skip(f"{page_name}.html is not in {SITE}")
    chrome.events.clear()
    chrome.send("Page.navigate", url=f"{server}/{page_name}.html")
    chrome.wait_for("document.readyState === 'complete'")
    n = LIVE_PAGES[page_name]
    chrome.wait_for(f"document.querySelectorAll('.tl-live canvas').length > 0 && "
                    f"document.querySelectorAll('.tl-live').length >= {n}")
    assert chrome.js("document.querySelectorAll('.tl-live').length") == n
    blank = chrome.js("""[...document.querySelectorAll('.tl-live canvas')].filter(c => {
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      return !px.some((v, i) => i % 4 === 3 && v > 0);  // no pixel drawn
    }).map(c => c.getAttribute('aria-label'))""")
    assert blank == [], f"blank canvases: {blank}"
    moved = chrome.js(MOVE_EVERY_CONTROL)
    assert moved, "no control found in the live figures"
    still = [m for m in moved if not m[3]]
    assert still == [], f"moving these controls changed nothing shown: {still}"
    chrome.js("new Promise(r => setTimeout(() => r(true), 500))", await_promise=True)
    urls = [e["params"]["request"]["url"] for e in chrome.events if e.get("method") == "Network.requestWillBeSent"]
    outside = [u for u in urls if urllib.parse.urlsplit(u).scheme in ("http", "https", "ws", "wss")
               and urllib.parse.urlsplit(u).hostname not in LOCAL_HOSTS]
    assert outside == [], f"requests left the machine: {outside[:10]}"
    failed = [e["params"]["response"]["url"] for e in chrome.events if e.get("method") == "Network.responseReceived"
              and e["params"]["response"]["status"] >= 400
              and not e["params"]["response"]["url"].endswith("favicon.ico")]
    assert failed == [], f"missing local files: {failed}"
    errors = [e["params"]["exceptionDetails"] for e in chrome.events if e.get("method") == "Runtime.exceptionThrown"]
    assert errors == [], [d.get("exception", {}).get("description", d.get("text", ""))[:300] for d in errors]
