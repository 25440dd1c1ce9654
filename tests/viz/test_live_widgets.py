"""The live figures (transformer_lib/viz/live.py, live_attention.py + viz/js/) compute what the library computes.

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
import html
import os
import json
import math
import re
import shutil
import tempfile
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from devtools import no_built_site
import torch

from transformer_lib.viz import esm, live, live_attention

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "_build" / "html"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


# ------------------------------------------------------------------------ Python-side validation


def _scores(L=2, H=3, T=4):
    return torch.randn(L, H, T, T)


def test_attention_heatmap_accepts_scores_and_encodes_them_compactly():
    w = live_attention.AttentionHeatmap([list("abcd")], [_scores()], layer=1, head=2, temperature=0.5)
    assert (w.n_layers, w.n_heads, w.layer, w.head) == (2, 3, 1, 2)
    assert len(w.scores[0]) == math.ceil(2 * 3 * 4 * 4 * 4 / 3) * 4  # base64 of float32: 4 bytes a number


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(tokens=[list("abc")], scores=[_scores()]),
            r"scores\[0\] must be a tensor of shape \(any, any, 3, 3\) .*T = len\(tokens\[0\]\)",
        ),
        (
            dict(tokens=[list("abcd")], scores=[_scores(), _scores()]),
            "scores must hold exactly 1 item.*same length as tokens",
        ),
        (
            dict(tokens=[list("abcd"), list("ab")], scores=[_scores(), _scores(L=3, T=2)]),
            r"scores\[1\] must be a tensor of shape \(2, 3, 2, 2\)",
        ),
        (dict(tokens=[list("abcd")], scores=[_scores()], layer=2), r"layer must be an int in \[0, 1\], got 2"),
        (dict(tokens=[list("abcd")], scores=[_scores()], head=-1), r"head must be an int in \[0, 2\], got -1"),
        (dict(tokens=[list("abcd")], scores=[_scores()], temperature=0.0), "temperature must be a number"),
        (
            dict(tokens=[list("abcd")], scores=[_scores()], mode="grid"),
            r"mode must be one of \['all', 'one'\], got 'grid'",
        ),
        (dict(tokens=[list("abcd")], scores=[torch.full((2, 3, 4, 4), float("nan"))]), "must be finite"),
        (
            dict(tokens=[list("abcd")], scores=[_scores()], head_labels=[[["x"] * 3]]),
            r"head_labels\[0\] must hold exactly 2 item\(s\) \(one list per layer\), got 1",
        ),
    ],
)
def test_attention_heatmap_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live_attention.AttentionHeatmap(**kwargs)


def test_scaled_scores_give_the_pretrained_models_own_attention_at_temperature_one():
    from transformer_lib.models.pretrained import attention_maps, load_minilm

    model, tokenizer = load_minilm(torch.device("cpu"))
    sentence = "The cat sat on the mat."
    tokens, scores = live_attention.scaled_scores(model, tokenizer, sentence)  # (L, H, T, T)
    ref_tokens, maps = attention_maps(model, tokenizer, sentence)  # the model's forward pass, need_weights=True
    assert tokens == ref_tokens and scores.shape == maps.shape
    torch.testing.assert_close(torch.softmax(scores, dim=-1), maps, atol=1e-5, rtol=0)
    widget = live_attention.AttentionHeatmap.from_model(model, tokenizer, [sentence])
    assert (widget.n_layers, widget.n_heads) == maps.shape[:2]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d_model=63), r"d_model must be an int in \[2, 512\], a multiple of 2 \(sin and cos pairs\), got 63"),
        (dict(d_model=1024), r"d_model must be an int in \[2, 512\].*got 1024"),
        (dict(position=100), r"position must be an int in \[0, 99\], got 100"),
        (dict(other=-1), "other must be an int"),
        (dict(n_positions=1), "n_positions must be an int"),
    ],
)
def test_sinusoid_table_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.SinusoidTable(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(q=torch.randn(7), k=torch.randn(7)), r"d_head must be an int in \[2, 64\], a multiple of 2.*got 7"),
        (dict(q=torch.randn(2, 4), k=torch.randn(8)), r"q must be a tensor of shape \(d_head,\), got \(2, 4\)"),
        (dict(q=torch.randn(8), k=torch.randn(6)), r"k must be a tensor of shape \(8,\) \(q's shape\), got \(6,\)"),
        (dict(q=torch.randn(8), k=torch.randn(8), m=65), r"m must be an int in \[0, 64\], got 65"),
        (dict(q=torch.randn(8), k=torch.randn(8), base=float("nan")), "base must be a number"),
    ],
)
def test_rope_rotation_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.RopeRotation(**kwargs)


def test_rope_rotation_refuses_a_non_tensor_with_type_error():
    with pytest.raises(TypeError, match=r"k must be a tensor of shape \(8,\) \(q's shape\), got list"):
        live.RopeRotation(q=torch.randn(8), k=[0.0] * 8)


@pytest.mark.parametrize(
    "models, kwargs, match",
    [
        ([], {}, r"models must hold at least 1 item\(s\) \(one \(name, n_layers"),
        ([("GPT-2", 12, 12, 64, 1024)], {}, r"models\[0\] must hold exactly 6 item\(s\) \(\(name, n_layers.*got 5"),
        ([("GPT-2", 0, 12, 64, 1024, 2)], {}, r"models\[0\] n_layers must be an int in \[1, 128\], got 0"),
        ([("GPT-2", 12, 12, 64, 1024, 3)], {}, r"models\[0\] bytes_per_element must be one of \[1, 2, 4\], got 3"),
        ([("GPT-2", 12, 12, 64, 4096, 2)], dict(max_length=2048), r"context_length must be an int in \[1, 2048\]"),
    ],
)
def test_kv_cache_calculator_rejects_bad_input_naming_the_argument(models, kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.KVCacheCalculator(models, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(row=torch.randn(4, 8)), r"row must be a tensor of shape \(K,\) \(one weight row\), got \(4, 8\)"),
        (dict(row=torch.arange(8)), "row must be a floating-point tensor, got torch.int64"),
        (dict(row=torch.randn(1)), r"K must be an int >= 2 \(row's length\), got 1"),
        (
            dict(row=torch.randn(64), group_options=(None, 24)),
            r"group_options\[1\] must be one of \[1, 2, 4, 8, 16, 32, 64\], got 24",
        ),
        (dict(row=torch.randn(128), bits=5), r"bits must be one of \[2, 3, 4, 8\], got 5"),
        (dict(row=torch.randn(64), bits_options=(1, 4)), r"bits_options\[0\] must be an int in \[2, 8\], got 1"),
        (dict(row=torch.randn(64), group_size=16, group_options=(None, 8)), r"group_size must be one of \[8\], got 16"),
        (
            dict(row=torch.randn(64), group_size=None, group_options=(32, 8)),
            r"group_size must be one of \[8, 32\], got None",
        ),
        (dict(row=torch.randn(128), outlier=0.5), r"outlier must be a number in \[1.0, 10.0\]"),
    ],
)
def test_quant_grid_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.QuantGrid(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(q=torch.randn(3, 4)),
            r"q must be a tensor of shape \(4, any\) \(\(T, d\), T = len\(tokens\) = 4\), got \(3, 4\)",
        ),
        (dict(k=torch.randn(4, 5)), r"k.shape must be \(4, 4\) \(q's: \(T, d_k\)\), got \(4, 5\)"),
        (dict(features=["a"]), r"features must hold exactly 2 item\(s\).*d_v dimensions\), got 1"),
        (dict(query=4), r"query must be an int in \[0, 3\], got 4"),
        (dict(v=torch.full((4, 2), float("inf"))), "v must be finite"),
    ],
)
def test_attention_steps_rejects_bad_input_naming_the_argument(kwargs, match):
    args = dict(tokens=list("abcd"), q=torch.randn(4, 4), k=torch.randn(4, 4), v=torch.randn(4, 2)) | kwargs
    with pytest.raises(ValueError, match=match):
        live_attention.AttentionSteps(**args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(logits=torch.randn(2, 3, 4)),
            r"logits must be a tensor of shape \(any, 5, any\) \(\(n_layers, T, n_experts\), T = len\(tokens\)\)",
        ),
        (dict(logits=torch.randn(2, 5, 1)), r"logits.shape\[2\] must be an int >= 2 \(n_experts"),
        (dict(tokens=[]), r"tokens must hold at least 1 item"),
        (dict(layer=2), r"layer must be an int in \[0, 1\], got 2"),
        (dict(top_k=5), r"top_k must be an int in \[1, 4\], got 5"),
        (dict(logits=torch.full((2, 5, 4), float("nan"))), "finite"),
    ],
)
def test_expert_routing_rejects_bad_input_naming_the_argument(kwargs, match):
    args = dict(tokens=list("abcde"), logits=torch.randn(2, 5, 4)) | kwargs
    with pytest.raises(ValueError, match=match):
        live.ExpertRouting(**args)


def test_router_logits_are_what_each_mixture_layer_routed():
    from transformer_lib.experiments.moe_vs_dense import router_logits
    from transformer_lib.models.llama import Llama, LlamaConfig
    from transformer_lib.blocks.moe import top_k_gating

    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=30, n_layers=2, d_model=16, n_heads=2, n_experts=4, top_k=2)).eval()
    ids = torch.randint(0, 30, (9,))
    logits = router_logits(model, ids)
    assert logits.shape == (2, 9, 4)
    for block, layer_logits in zip(model.blocks, logits):
        assert torch.equal(top_k_gating(layer_logits, 2)[1], block.ffn.experts_chosen)
    with pytest.raises(ValueError, match=r"model.cfg.n_experts must be an int >= 1 \(router_logits needs a mixture"):
        router_logits(Llama(LlamaConfig(vocab_size=30, n_layers=1, d_model=16, n_heads=2)), ids)


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
    """Import ``widget_cls``'s ES module as anywidget does (its ``_esm``, from a Blob URL), and ``js/common.js``
    the same way (``esm.bundle``), and return ``body``'s value.

    ``body`` is the inside of an async function whose arguments are ``m``, the figure's module, and ``c``,
    the shared helpers' module.
    """
    src, common = json.dumps(widget_cls._esm), json.dumps(esm.bundle("common.js"))
    return page.js(
        f"""(async () => {{
      const load = (text) => import(URL.createObjectURL(new Blob([text], {{type: 'text/javascript'}})));
      const m = await load({src}), c = await load({common});
      return JSON.stringify(await (async (m, c) => {{ {body} }})(m, c));
    }})()""",
        await_promise=True,
    )


def as_json(x: torch.Tensor) -> str:
    return json.dumps(x.tolist())


@pytest.mark.browser
def test_browser_softmax_at_any_temperature_matches_torch(page):
    scores = torch.randn(2, 3, 5, 5) * 3  # (L, H, T, T)
    taus = [0.05, 0.3, 1.0, 2.7, 5.0]
    got = json.loads(
        run_module(
            page,
            live_attention.AttentionHeatmap,
            f"""
      const flat = c.decodeFloat32({json.dumps(live.encode_float32(scores))});
      return {json.dumps(taus)}.map(tau => {{
        const out = [];
        for (let l = 0; l < 2; l++) for (let h = 0; h < 3; h++)
          out.push(m.headWeights(m.headScores(flat, 3, 5, l, h), tau).map(r => Array.from(r)));
        return out;
      }});""",
        )
    )
    for tau, weights in zip(taus, got):
        expected = torch.softmax(scores.double() / tau, dim=-1).reshape(6, 5, 5)
        torch.testing.assert_close(torch.tensor(weights, dtype=torch.float64), expected, atol=1e-6, rtol=0)


@pytest.mark.browser
def test_browser_row_entropy_matches_head_stats(page):
    from transformer_lib.analysis.head_stats import row_entropy

    p = torch.softmax(torch.randn(7, 7) * 2, dim=-1)  # one square map: row_entropy checks the shape
    p[0] = torch.tensor([1.0, 0, 0, 0, 0, 0, 0])  # 0 log 0 = 0
    got = json.loads(run_module(page, live_attention.AttentionHeatmap, f"return {as_json(p)}.map(c.entropyBits);"))
    torch.testing.assert_close(torch.tensor(got), row_entropy(p), atol=1e-6, rtol=0)  # float32 reference


@pytest.mark.browser
def test_browser_viridis_is_matplotlibs(page):
    from matplotlib import colormaps

    ts = [i / 20 for i in range(21)]
    got = json.loads(run_module(page, live_attention.AttentionHeatmap, f"return {json.dumps(ts)}.map(c.viridisRGB);"))
    expected = [[round(255 * c) for c in colormaps["viridis"](t)[:3]] for t in ts]
    worst = max(abs(a - b) for g, e in zip(got, expected) for a, b in zip(g, e))
    assert worst <= 4, f"viridis in JS is {worst}/255 from matplotlib's somewhere: {got} vs {expected}"


@pytest.mark.browser
def test_browser_round_half_even_matches_torch(page):
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49, -0.51, 126.5, 7.0])
    got = json.loads(run_module(page, live_attention.AttentionHeatmap, f"return {as_json(x)}.map(c.roundHalfEven);"))
    assert got == torch.round(x).tolist()


@pytest.mark.browser
def test_browser_sinusoid_table_matches_the_library(page):
    import transformer_lib as tl

    for d in (2, 6, 64, 510):
        got = json.loads(
            run_module(
                page, live.SinusoidTable, f"return Array.from({{length: 200}}, (_, p) => m.sinusoidalRow(p, {d}));"
            )
        )
        torch.testing.assert_close(
            torch.tensor(got, dtype=torch.float32), tl.sinusoidal_table(200, d), atol=1e-6, rtol=0
        )


@pytest.mark.browser
def test_browser_dot_products_of_positions_match_torch(page):
    import transformer_lib as tl

    pe = tl.sinusoidal_table(100, 64).double()  # (100, 64)
    got = json.loads(
        run_module(
            page,
            live.SinusoidTable,
            """
      return Array.from({length: 100}, (_, p) => c.dot(m.sinusoidalRow(p, 64), m.sinusoidalRow(37, 64)));""",
        )
    )
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
    from transformer_lib.blocks.positional import RotaryEmbedding

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
    from transformer_lib.serving.kv_cache import DynamicCache, kv_cache_bytes

    shapes = [(12, 12, 64, 1024, 1, 2), (32, 32, 128, 2048, 16, 2), (80, 8, 128, 4096, 4, 1), (2, 4, 16, 128, 1, 4)]
    got = json.loads(
        run_module(page, live.KVCacheCalculator, f"return {json.dumps(shapes)}.map(s => m.kvCacheBytes(...s));")
    )
    assert got == [kv_cache_bytes(L, H, d, T, batch_size=B, bytes_per_element=nb) for L, H, d, T, B, nb in shapes]
    cache = DynamicCache()  # and what a real cache allocates: 2 layers, batch 1, 4 kv heads, 16 dims, 128 positions
    for layer in range(2):
        cache.update(torch.zeros(1, 4, 128, 16), torch.zeros(1, 4, 128, 16), layer)
    assert got[-1] == cache.nbytes()


@pytest.mark.browser
def test_browser_kv_cache_sizes_print_as_the_library_prints_them(page):
    from serving.test_kv_cache import HUMAN_BYTES  # the table of expected strings the Python twin is tested on
    from transformer_lib.serving.kv_cache import human_bytes

    ns = [n for n, _ in HUMAN_BYTES]
    got = json.loads(run_module(page, live.KVCacheCalculator, f"return {json.dumps(ns)}.map(n => m.human(n));"))
    assert got == [text for _, text in HUMAN_BYTES] == [human_bytes(n) for n in ns]


def quantize_reference(w: torch.Tensor, bits: int, group_size: int | None) -> torch.Tensor:
    """Absmax round trip: the library's for 4 and 8 bits, the same closed form in torch otherwise."""
    from transformer_lib.quant import BITS, fake_quantize

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
    got = json.loads(
        run_module(
            page,
            live.QuantGrid,
            f"""
      const w = Array.from(c.decodeFloat32({json.dumps(live.encode_float32(w))}));
      return {json.dumps(settings)}.map(([b, g]) => m.quantizeGroups(w, b, g).deq);""",
        )
    )
    for (bits, g), deq in zip(settings, got):
        torch.testing.assert_close(
            torch.tensor(deq),
            quantize_reference(w, bits, g),
            atol=1e-6,
            rtol=0,
            msg=lambda m: f"int{bits}, groups of {g}: {m}",
        )


@pytest.mark.browser
def test_browser_outlier_scales_the_largest_weight(page):
    w = torch.randn(64)
    got = json.loads(
        run_module(page, live.QuantGrid, f"const r = m.withOutlier({as_json(w)}, 7.5); return [r.at, r.w];")
    )
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
    got = json.loads(
        run_module(
            page,
            live_attention.AttentionSteps,
            f"""
      const [Q, K, V] = [{as_json(q)}, {as_json(k)}, {as_json(v)}];
      return {json.dumps(taus)}.map(tau => Q.map(q => {{
        const a = c.softmax(m.scoresFor(q, K), tau);
        return [a, m.weightedSum(a, V)];
      }}));""",
        )
    )
    for tau, per_query in zip(taus, got):
        out, weights = tl.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), need_weights=True, temperature=tau
        )
        torch.testing.assert_close(
            torch.tensor([w for w, _ in per_query], dtype=torch.float64), weights, atol=1e-6, rtol=0
        )
        torch.testing.assert_close(torch.tensor([o for _, o in per_query], dtype=torch.float64), out, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(q=torch.randn(4), k=torch.randn(16, 4), v=torch.randn(16, 2)), r"q must be a tensor of shape \(bq, d\)"),
        (
            dict(q=torch.randn(2, 4), k=torch.randn(16, 3), v=torch.randn(16, 2)),
            r"k must be a tensor of shape \(Tk, 4\)",
        ),
        (
            dict(q=torch.randn(2, 4), k=torch.randn(16, 4), v=torch.randn(8, 2)),
            r"v must be a tensor of shape \(16, d_v\)",
        ),
        (dict(q=torch.randn(2, 4).long(), k=torch.randn(16, 4), v=torch.randn(16, 2)), "q must be a floating-point"),
        (
            dict(q=torch.randn(2, 4), k=torch.randn(8, 4), v=torch.randn(8, 2), block_k=3, block_options=(1, 4)),
            "block_k must be one of",
        ),
        (
            dict(q=torch.randn(2, 4), k=torch.randn(8, 4), v=torch.randn(8, 2), block_options=(4, 9)),
            r"block_options\[1\] must be an int in \[1, 8\], got 9",
        ),
        (dict(q=torch.full((2, 4), math.nan), k=torch.randn(16, 4), v=torch.randn(16, 2)), "q must be finite"),
    ],
)
def test_online_softmax_tiles_rejects_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        live.OnlineSoftmaxTiles(**kwargs)


@pytest.mark.browser
def test_browser_online_softmax_steps_match_the_library(page):
    from transformer_lib.blocks.flash import trace_one_query_block

    q, k, v = torch.randn(3, 8), torch.randn(21, 8) * 2, torch.randn(21, 5)
    w = live.OnlineSoftmaxTiles(q, k, v, block_k=4, block_options=(1, 4, 8))
    for block in (1, 4, 8):
        got = json.loads(
            run_module(
                page,
                live.OnlineSoftmaxTiles,
                f"""
          const d = (b) => c.decodeFloat32(b);
          return m.onlineSoftmaxSteps(d({json.dumps(w.q)}), d({json.dumps(w.k)}), d({json.dumps(w.v)}),
                                      3, 21, 8, 5, {block});""",
            )
        )
        want = trace_one_query_block(q, k, v, block_k=block)
        assert [(s["j0"], s["j1"]) for s in got] == [(s["j0"], s["j1"]) for s in want]
        for g, r in zip(got, want):
            for key in ("m", "l", "out", "scores"):
                torch.testing.assert_close(
                    torch.tensor(g[key], dtype=torch.float64),
                    torch.tensor(r[key], dtype=torch.float64),
                    atol=1e-5,
                    rtol=1e-5,
                )
    out = torch.tensor(got[-1]["out"], dtype=torch.float64)  # the end of the sweep is attention itself
    torch.testing.assert_close(out.float(), torch.softmax(q @ k.T / math.sqrt(8), -1) @ v, atol=1e-5, rtol=0)


@pytest.mark.browser
def test_browser_online_softmax_figure_renders_and_follows_its_controls(page):
    w = live.OnlineSoftmaxTiles(
        torch.randn(2, 4), torch.randn(12, 4), torch.randn(12, 3), block_k=4, block_options=(1, 4)
    )
    traits = {name: getattr(w, name) for name in ("q", "k", "v", "bq", "t_k", "d", "d_v", "block_k", "block_options")}
    shown = json.loads(
        run_module(
            page,
            live.OnlineSoftmaxTiles,
            f"""
      const traits = {json.dumps(traits)};
      const el = document.createElement('div'); document.body.append(el);
      const model = {{ get: (name) => traits[name], on: () => {{}}, set: () => {{}}, save_changes: () => {{}} }};
      m.default.render({{ model, el }});
      const text = () => el.querySelector('[role=status]').textContent;
      const range = el.querySelector('input[type=range]'), first = text();
      range.value = range.max; range.dispatchEvent(new Event('input'));
      const last = text(), before = range.max;
      const box = el.querySelector('select'); box.value = '0'; box.dispatchEvent(new Event('change'));
      return [first, last, before, range.max];""",
        )
    )
    first, last, steps_at_4, steps_at_1 = shown
    assert first.startswith("after 1 tile(s)") and "every key seen" in last and first != last
    assert (steps_at_4, steps_at_1) == ("3", "12")  # 12 keys: 3 tiles of 4, then 12 tiles of 1


def test_browser_expert_routing_matches_top_k_gating(page):
    from transformer_lib.blocks.moe import expert_shares, top_k_gating

    torch.manual_seed(3)
    logits = torch.randn(6, 5) * 2
    for k in (1, 2, 3):
        got = json.loads(
            run_module(
                page,
                live.ExpertRouting,
                f"""
          const rows = {as_json(logits)};
          const gates = rows.map((r) => m.topKGates(r, {k}));
          return [gates, m.expertShares(gates)];""",
            )
        )
        weights, experts = top_k_gating(logits, k)
        dense = torch.zeros_like(logits).scatter(-1, experts, weights)
        torch.testing.assert_close(torch.tensor(got[0], dtype=torch.float32), dense, atol=1e-6, rtol=0)
        torch.testing.assert_close(
            torch.tensor(got[1], dtype=torch.float32), expert_shares(experts, 5), atol=1e-6, rtol=0
        )


# ------------------------------------------------------------------ the modules: real ES modules, linked

JS_FILES = sorted(p.name for p in esm.JS_DIR.glob("*.js"))


def _code(src: str) -> str:
    """``src`` without comments and without single- or double-quoted strings (template literals kept: their
    ``${...}`` parts are code)."""
    src = re.sub(r"//[^\n]*", "", src)
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', src)


@pytest.mark.parametrize("script", [f for f in JS_FILES if f != "common.js"])
def test_each_file_imports_exactly_the_shared_names_it_uses(script):
    shared = set(esm.module_exports("common.js"))
    src = (esm.JS_DIR / script).read_text()
    code = _code(re.sub(r"^import\s*\{[^}]*\}\s*from[^;]*;", "", src, flags=re.M))
    declared = set(re.findall(r"(?:function|const|let|class)\s+([A-Za-z_$][\w$]*)", code))
    used = {n for n in shared if re.search(rf"(?<![\w$.]){re.escape(n)}(?![\w$])", code)} - declared
    imported = {local for dep, pairs in esm.module_imports(script) for _, local in pairs}
    assert used <= imported, f"{script} uses {sorted(used - imported)} from common.js without importing them"
    assert imported <= used, f"{script} imports {sorted(imported - used)} and never uses them"


def _write(folder, files):
    for name, text in files.items():
        (folder / name).write_text(text)


@pytest.mark.parametrize(
    "files, match",
    [
        (
            {"a.js": 'import { nope } from "./b.js";\nexport default {};', "b.js": "export function f() {}"},
            r"a.js imports \['nope'\] from ./b.js, which exports \['f'\]",
        ),
        (
            {"a.js": 'import f from "./b.js";\nexport default {};', "b.js": "export function f() {}"},
            "every import must read",
        ),
        (
            {
                "a.js": 'import { f } from "./b.js";\nexport default {};',
                "b.js": 'import { g } from "./a.js";\nexport function f() {}',
            },
            "import cycle",
        ),
        (
            {"a.js": 'import { f } from "./b.js";\nexport default {};', "b.js": "function f() {}\nexport { f };"},
            "export only declarations",
        ),
        (
            {
                "a.js": 'import { f } from "./b.js";\nexport default {};',
                "b.js": "export function f() {}\nexport default {};",
            },
            "must not have a default export",
        ),
    ],
)
def test_bundle_refuses_what_it_cannot_link_naming_the_file(tmp_path, monkeypatch, files, match):
    _write(tmp_path, files)
    monkeypatch.setattr(esm, "JS_DIR", tmp_path)
    with pytest.raises(ValueError, match=match):
        esm.bundle("a.js")


def test_bundle_gives_each_imported_file_its_own_scope_and_renames_as_asked(tmp_path, monkeypatch):
    _write(
        tmp_path,
        {
            "a.js": 'import { twice as double } from "./b.js";\nconst k = 1;\nexport const y = double(k);',
            "b.js": "const k = 2;\nexport function twice(x) { return k * x / k * 2; }",
        },
    )
    monkeypatch.setattr(esm, "JS_DIR", tmp_path)
    text = esm.bundle("a.js")
    assert "const { twice: double } = __module_b_js;" in text and text.count("const k") == 2
    assert esm.module_exports("a.js") == ["y"]


@pytest.mark.browser
def test_every_file_loads_natively_and_its_bundle_exports_the_same(browser_path):
    """A browser links the files as they are (an import of a name not exported is a SyntaxError there), and the
    bundle anywidget receives exports exactly what the native module does."""
    folder = Path(tempfile.mkdtemp(prefix="live-native-"))
    shutil.copytree(esm.JS_DIR, folder / "js")
    (folder / "index.html").write_text("<!doctype html><html><body></body></html>")
    try:
        with served_in_chromium(browser_path, folder, ("Runtime", "Page")) as (chrome, base):
            chrome.send("Page.navigate", url=f"{base}/index.html")
            chrome.wait_for("document.readyState === 'complete'")
            bundles = json.dumps({f: esm.bundle(f) for f in JS_FILES})
            got = json.loads(
                chrome.js(
                    f"""(async () => {{
              const out = {{}};
              for (const [name, text] of Object.entries({bundles})) {{
                const native = await import('/js/' + name);
                const linked = await import(URL.createObjectURL(new Blob([text], {{type: 'text/javascript'}})));
                out[name] = [Object.keys(native).sort(), Object.keys(linked).sort()];
              }}
              return JSON.stringify(out);
            }})()""",
                    await_promise=True,
                )
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for name in JS_FILES:
        native, linked = got[name]
        assert native == linked == sorted(esm.module_exports(name)), name


# ------------------------------------------------------------------ the reader's choices reach Python


def _examples():
    """One small instance of every live figure (``TokenFlow`` on a tiny GPT)."""
    from test_token_flow import TOKENS, VOCAB, _model
    from transformer_lib.viz.live_lora import LoRARank
    from transformer_lib.viz.token_flow import TokenFlow, trace_token_flow

    torch.manual_seed(0)
    toks = ["[CLS]", "the", "cat", "sat", "[SEP]"]
    return {
        "token-flow": TokenFlow(TOKENS, trace_token_flow(_model(), torch.tensor([1, 2, 3, 4, 5, 6])), VOCAB, top_k=3),
        "attention": live_attention.AttentionHeatmap(
            [toks, toks[:4] + ["[SEP]"]], [torch.randn(2, 3, 5, 5)] * 2, head=1
        ),
        "attention-all": live_attention.AttentionHeatmap(
            [toks], [torch.randn(2, 3, 5, 5)], mode="all", head_labels=[[["a", "b", "c"], ["d", "e", "f"]]]
        ),
        "steps": live_attention.AttentionSteps(
            list("abcd"), torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 2), features=["x", "y"]
        ),
        "table": live.SinusoidTable(d_model=32, position=10, other=20),
        "rope": live.RopeRotation(torch.randn(16), torch.randn(16), m=3, n=1),
        "kvcache": live.KVCacheCalculator([("GPT-2", 12, 12, 64, 1024, 2), ("8B", 32, 8, 128, 8192, 2)]),
        "quant": live.QuantGrid(torch.randn(256) * 0.05, bits=4, group_size=32, group_options=(None, 128, 32, 8)),
        "flash": live.OnlineSoftmaxTiles(
            torch.randn(2, 4), torch.randn(12, 4), torch.randn(12, 3), block_k=4, block_options=(1, 4)
        ),
        "routing": live.ExpertRouting(list("abcde"), torch.randn(2, 5, 4)),
        "lora": LoRARank(
            [("qkv", 12, 4, 2), ("out", 4, 4, 2)],
            [("both", ["qkv", "out"]), ("qkv", ["qkv"])],
            [8, 2],
            1000,
            [("probe", 10, 0, -1, [0.4, 0.5]), ("LoRA", 106, 2, 0, [0.45])],
            0.25,
            rank=2,
            max_rank=4,
        ),
    }


EXAMPLES = [
    "token-flow",
    "attention",
    "attention-all",
    "steps",
    "table",
    "rope",
    "kvcache",
    "quant",
    "flash",
    "routing",
    "lora",
]
# Controls that change only the view, not a trait Python holds (the row whose numbers are read out).
VIEW_ONLY = {"query row", "show numbers of", "tiles folded in"}


def _state(w) -> dict:
    """The widget's synced state as the front-end receives it (``get_state``), without the module text."""
    return {k: v for k, v in w.get_state().items() if k not in ("_esm", "_css")}


# A model as the widget manager gives it: set() fires change:name synchronously (Backbone does), so a figure
# sees its own commits; fromPython(name, value) is a change arriving from the kernel.
HARNESS = """
  const traits = %s, listeners = {}, sets = [], saves = [];
  const fire = (name) => (listeners['change:' + name] || []).forEach((f) => f());
  const model = {
    get: (k) => traits[k],
    set: (k, v) => { const old = JSON.stringify(traits[k]); traits[k] = v; sets.push([k, v]);
                     if (old !== JSON.stringify(v)) fire(k); },
    save_changes: () => saves.push(sets.length),
    on: (ev, f) => (listeners[ev] ||= []).push(f),
  };
  const fromPython = (k, v) => { traits[k] = v; fire(k); };
  const el = document.createElement('div'); document.getElementById('root').replaceChildren(el);
  m.default.render({ model, el });
  const shown = %s;
  const controls = () => [...el.querySelectorAll('input[type=range], select')];
  const move = (control) => {
    if (control.tagName === 'SELECT') {
      control.selectedIndex = (control.selectedIndex + 1) %% control.options.length;
      control.dispatchEvent(new Event('change'));
    } else {
      control.value = String(Number(control.value) < Number(control.max) ? control.max : control.min);
      control.dispatchEvent(new Event('input'));
    }
  };
"""


@pytest.mark.browser
@pytest.mark.parametrize("name", EXAMPLES)
def test_a_readers_choice_reaches_python_and_a_python_change_redraws_the_same(page, name):
    """Move each control of a fresh figure: what it writes back (model.set, then save_changes) is applied to the
    Python widget as the kernel applies a front-end update (``set_state``) and must be accepted as is; the same
    values sent from Python to another fresh figure must make it show exactly what moving the control showed."""
    w = _examples()[name]
    shown = SHOWN.replace("(fig =>", "((fig) =>") + "(el)"
    state = json.dumps(_state(w))
    n = json.loads(run_module(page, w, HARNESS % (state, "null") + "return controls().length;"))
    assert n > 0
    for c in range(n):
        moved = json.loads(
            run_module(
                page,
                w,
                HARNESS % (state, "null")
                + f"""
          const control = controls()[{c}];
          move(control);
          return [control.closest('label')?.firstChild.textContent.trim(), sets, saves, sets.length, {shown}];""",
            )
        )
        label, sets, saves, n_sets, after = moved
        if label in VIEW_ONLY:
            assert sets == [], f"{name}: {label!r} should change only the view, wrote {sets}"
            continue
        assert sets, f"{name}: moving {label!r} wrote nothing back to the widget"
        assert saves and saves[-1] == n_sets, f"{name}: {label!r}: model.set without save_changes after it"
        changes = dict(sets)
        w.set_state(changes)  # what ipywidgets does with an update message from the front-end
        for trait, value in changes.items():
            assert getattr(w, trait) == value, (name, label, trait)
        replay = json.loads(
            run_module(
                page,
                w,
                HARNESS % (state, "null")
                + f"""
          for (const [k, v] of {json.dumps(sets)}) fromPython(k, v);
          return {shown};""",
            )
        )
        assert replay == after, f"{name}: setting {changes} from Python shows something else than moving {label!r}"


# ------------------------------------------------------------------ a static picture for readers without JavaScript


def _subclasses(cls):
    for sub in cls.__subclasses__():
        if sub.__dict__.get("script"):  # a figure class (anywidget's add_traits makes unnamed subclasses)
            yield sub
        yield from _subclasses(sub)


def test_every_live_figure_class_has_an_example_here():
    from transformer_lib.viz.live_lora import LoRARank  # noqa: F401  (LiveWidgets defined outside live.py)
    from transformer_lib.viz.token_flow import TokenFlow  # noqa: F401

    covered = {
        type(w).__mro__[0] if type(w).__dict__.get("script") else type(w).__mro__[1] for w in _examples().values()
    }
    assert set(_subclasses(live.LiveWidget)) <= covered


@pytest.mark.parametrize("name", EXAMPLES)
def test_displaying_a_live_figure_writes_its_static_picture_first(name, monkeypatch):
    import IPython.display

    w = _examples()[name]
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append((obj, kw)))
    w._ipython_display_()
    assert len(shown) == 2, shown
    (picture, kw1), (view, kw2) = shown
    assert kw1.get("raw") and kw2.get("raw")
    page = picture["text/html"]
    assert f'id="{w.fallback_id}"' in page and 'class="tl-live-fallback"' in page
    alts = re.findall(r'<img src="data:image/png;base64,[^"]+" alt="([^"]*)"', page)
    assert alts or "<table" in page, "neither an image nor a table"
    assert all(len(a) > 80 for a in alts), f"alt text too short to say what the picture shows: {alts}"
    assert picture["text/plain"]
    assert view["application/vnd.jupyter.widget-view+json"]["model_id"] == w.model_id


def _text(page: str) -> str:
    """What a reader of the static picture reads: its alt texts and its text, tags removed."""
    alts = " ".join(re.findall(r'alt="([^"]*)"', page))
    return html.unescape(alts + " " + re.sub(r"<[^>]+>", " ", page))


def _numbers(pattern: str, text: str) -> list[float]:
    """The numbers ``pattern``'s groups catch at its first match in ``text``."""
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text[:400]!r}"
    return [float(x.replace(",", "")) for x in found.groups()]


# What the live figure writes at its first settings and the static picture must agree on (regex of numbers).
SAME_NUMBERS = {
    "token-flow": r"\|x\| = (\d+\.\d+) .*? \((\d\.\d\d)\) .*?\|f\| = (\d+\.\d+) .*? \((\d\.\d+)\)",
    "steps": r"3\. output for \"[^\"]+\" = Σ_j a_j v_j = \((-?\d+\.\d+), (-?\d+\.\d+)\)",
    "table": r"PE\[10\] · PE\[20\] = (-?\d+\.\d+)",
    "rope": r"RoPE\(q, 3\) · RoPE\(k, 1\) = (-?\d+\.\d+)",
    "kvcache": r"\(([\d,]+) bytes\)",
    "quant": r"RMS error / RMS weight = (\d+\.\d+)%",
    "flash": r"running max m = (-?\d+\.\d+), running sum l = (-?\d+\.\d+)",
    "routing": r"expert 0 (\d+)%, expert 1 (\d+)%, expert 2 (\d+)%, expert 3 (\d+)%",
    "lora": r"= ([\d,]+) trainable, (\d+\.\d)% .*? Adam keeps ([\d,]+) bytes",
}


@pytest.mark.browser
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_static_picture_says_what_the_live_figure_shows_and_is_hidden_once_it_draws(page, name):
    w = _examples()[name]
    static = w.static_html()
    state = json.dumps(_state(w))
    hidden, live_text, weights = json.loads(
        run_module(
            page,
            w,
            f"""
      const fb = document.createElement('div'); fb.id = {json.dumps(w.fallback_id)};
      document.body.append(fb);
    """
            + HARNESS % (state, "null")
            + """
      const out = [fb.hidden, el.innerText, null];
      fb.remove();
      if (traits.scores) {  // the heatmap: its weights, as the figure computes them
        const T = traits.tokens[traits.sentence].length;
        const flat = c.decodeFloat32(traits.scores[traits.sentence]);
        out[2] = [...Array(traits.n_heads).keys()].map((hd) =>
          m.headWeights(m.headScores(flat, traits.n_heads, T, traits.layer, hd), traits.temperature)
           .map((r) => Array.from(r)));
      }
      return out;""",
        )
    )
    assert hidden, "the live figure drew but left the static picture visible"
    text = _text(static)
    if name.startswith("attention"):  # the alt text names each head's (or query's) strongest weight
        A = torch.tensor(weights)  # (H, T, T), computed in the browser
        tokens = w.tokens[w.sentence]
        if w.mode == "one":
            for r, c in enumerate(A[w.head].argmax(-1).tolist()):
                assert f"{tokens[r]} → {tokens[c]} {A[w.head, r, c]:.2f}" in text
        else:
            for hd in range(w.n_heads):
                r, c = divmod(int(A[hd].argmax()), len(tokens))
                assert f"head {hd}" in text and f"{tokens[r]} → {tokens[c]} {A[hd, r, c]:.2f}" in text
        return
    got, want = _numbers(SAME_NUMBERS[name], live_text), _numbers(SAME_NUMBERS[name], text)
    assert len(got) == len(want) and all(abs(a - b) <= 1.01e-3 * max(1, abs(b)) for a, b in zip(got, want)), (
        f"live figure {got} vs static picture {want}"
    )


# ------------------------------------------------------------------ the page's language

FIGURE_FILES = [f for f in JS_FILES if f != "common.js"]
CJK = re.compile(r"[\u4e00-\u9fff]")  # a Chinese character
WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z]{3,}(?![A-Za-z0-9_])")  # an English word (not d_model, int4, x_j)
# English names a Chinese page keeps: formulas and the names of methods, units and layers.
KEPT_WORDS = {"Adam", "FFN", "GiB", "KiB", "LoRA", "MiB", "RMS", "RoPE", "cos", "pos", "sin", "softmax", "top"}
BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4}){2,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
# Chinese strings without a Chinese character that differ from the English one: (file, key).
SYMBOL_STRINGS = {("flash.js", "stepOf")}  # " 2 / 3" next to the slider


def run_file(page, script: str, body: str):
    """Import ``js/<script>`` as anywidget does (``esm.bundle``, from a Blob URL) and return ``body``'s value, the
    inside of an async function whose argument ``m`` is the module."""
    return page.js(
        f"""(async () => {{
      const m = await import(URL.createObjectURL(new Blob([{json.dumps(esm.bundle(script))}],
                                                          {{type: 'text/javascript'}})));
      return JSON.stringify(await (async (m) => {{ {body} }})(m));
    }})()""",
        await_promise=True,
    )


def in_language(lang: str, body: str) -> str:
    """``body`` run with ``<html lang="{lang}">``; the page's own lang is put back afterwards."""
    return f"""
      const html = document.documentElement, pageLang = html.lang;
      html.lang = {json.dumps(lang)};
      try {{ {body} }} finally {{ html.lang = pageLang; }}"""


@pytest.mark.browser
def test_the_page_language_is_read_from_the_html_lang_attribute(page):
    langs = ["zh-CN", "zh", "ZH-Hans", "zh_CN", "zh-TW", "en", "en-US", "", "fr", "ja"]
    table = {"en": {"a": "A", "b": "B"}, "zh": {"a": "甲"}}  # "b" has no Chinese: English is the fallback
    got = json.loads(
        run_module(
            page,
            live.SinusoidTable,
            f"""
      const html = document.documentElement, pageLang = html.lang;
      try {{
        return {json.dumps(langs)}.map((lang) => {{
          html.lang = lang;
          return [lang, c.pageLanguage(), c.strings({json.dumps(table)})];
        }});
      }} finally {{
        html.lang = pageLang;
      }}""",
        )
    )
    for lang, language, text in got:
        chinese = lang.lower().startswith("zh")
        assert language == ("zh" if chinese else "en"), lang
        assert text == ({"a": "甲", "b": "B"} if chinese else {"a": "A", "b": "B"}), lang


def _kind(entry) -> str:
    """What an entry of a TEXT table is, from its ``[kind, size, source]``: "a string", "a function of 2 arguments"."""
    kind, size, _ = entry
    return {"function": f"a function of {size} arguments", "array": f"an array of {size}"}.get(kind, kind)


@pytest.mark.browser
@pytest.mark.parametrize("script", FIGURE_FILES)
def test_every_figures_chinese_strings_match_its_english_ones(page, script):
    """One Chinese entry for each English one, of the same kind: a string, a list of as many strings, or a function
    of as many arguments; each Chinese entry has Chinese in it, unless it is a symbol kept as the English has it."""
    tables = json.loads(
        run_file(
            page,
            script,
            """
      const kind = (v) => typeof v === 'function' ? ['function', v.length, String(v)]
                        : Array.isArray(v) ? ['array', v.length, JSON.stringify(v)] : [typeof v, 0, String(v)];
      return Object.fromEntries(Object.entries(m.TEXT).map(([lang, t]) =>
        [lang, Object.fromEntries(Object.entries(t).map(([k, v]) => [k, kind(v)]))]));""",
        )
    )
    assert set(tables) == {"en", "zh"}, f"{script}: TEXT has the languages {sorted(tables)}"
    en, zh = tables["en"], tables["zh"]
    assert list(zh) == list(en), f"{script}: keys only in en {set(en) - set(zh)}, only in zh {set(zh) - set(en)}"
    for key, (kind, size, source) in en.items():
        assert zh[key][:2] == [kind, size], f"{script}: {key} is {_kind(en[key])} in en, {_kind(zh[key])} in zh"
        assert kind in ("string", "array", "function"), f"{script}: {key} is a {kind}"
        chinese = CJK.search(zh[key][2]) or zh[key][2] == source or (script, key) in SYMBOL_STRINGS
        assert chinese, f"{script}: the Chinese {key} has no Chinese in it: {zh[key][2]}"
        assert not CJK.search(source), f"{script}: the English {key} has Chinese in it: {source}"


# Everything a figure writes, control by control: each select set to every option, each slider to both ends,
# a pointer moved over and a click on every canvas; text drawn on canvases is caught at fillText.
EVERYTHING_WRITTEN = """
  const drawn = new Set(), fillText = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
    drawn.add(String(text));
    return fillText.call(this, text, ...rest);
  };
  try {
    %s
    const found = { labels: new Set(), statuses: new Set(), arias: new Set(), other: drawn };
    const look = () => {
      el.querySelectorAll('label').forEach((l) => found.labels.add(l.firstChild.textContent.trim()));
      el.querySelectorAll('[role=status]').forEach((s) => s.textContent && found.statuses.add(s.textContent));
      el.querySelectorAll('[aria-label]').forEach((n) => found.arias.add(n.getAttribute('aria-label')));
      el.querySelectorAll('option').forEach((o) => found.other.add(o.textContent));
      found.other.add(el.innerText);
    };
    const point = (canvas, type) => {
      const box = canvas.getBoundingClientRect();
      const at = { clientX: box.left + box.width / 2, clientY: box.top + box.height / 2 };
      canvas.dispatchEvent(new MouseEvent(type, at));
    };
    look();
    for (const control of controls()) {
      if (control.tagName === 'SELECT') {
        for (let i = 0; i < control.options.length; i++) {
          control.selectedIndex = i; control.dispatchEvent(new Event('change')); look();
        }
      } else {
        for (const end of [control.min, control.max]) {
          control.value = end; control.dispatchEvent(new Event('input')); look();
        }
      }
    }
    for (const canvas of el.querySelectorAll('canvas')) { point(canvas, 'mousemove'); point(canvas, 'click'); look(); }
    return Object.fromEntries(Object.entries(found).map(([k, v]) => [k, [...v].sort()]));
  } finally {
    CanvasRenderingContext2D.prototype.fillText = fillText;
  }
"""


def _written(page, w, lang: str) -> dict[str, list[str]]:
    """What the figure ``w`` writes on a page with ``<html lang="{lang}">``: its control labels, its readouts
    (``role=status``), its aria-labels, and the rest (options, text drawn on canvases, the figure's text)."""
    body = in_language(lang, EVERYTHING_WRITTEN % (HARNESS % (json.dumps(_state(w)), "null")))
    return json.loads(run_module(page, w, body))


def _data_words(w) -> set[str]:
    """The English words in what Python sends (tokens, model and run names, feature names): the figure shows them
    as they are, in every language."""
    found = set()

    def walk(value):
        if isinstance(value, str) and not BASE64.fullmatch(value):  # not numbers (live.encode_float32)
            found.update(WORD.findall(value))
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    walk([v for k, v in _state(w).items() if not k.startswith("_")])
    return found


@pytest.mark.browser
@pytest.mark.parametrize("name", EXAMPLES)
def test_a_live_figure_writes_its_labels_in_the_page_language(page, name):
    """On a page with ``<html lang="zh-CN">`` (the Chinese edition) every label, readout and aria-label is Chinese
    (or a formula) and no English word of the English figure is left, but the data Python sent; on an English page,
    or one without a lang, the figure is the English one."""
    w = _examples()[name]
    en, zh, unset = (_written(page, w, lang) for lang in ("en", "zh-CN", ""))
    assert en == unset, f"{name}: a page without a lang attribute must get the English figure"
    for kind in ("labels", "statuses"):
        assert en[kind] and zh[kind], f"{name}: no {kind} found to read"
    for kind, texts in en.items():
        chinese = [t for t in texts if CJK.search(t)]
        assert chinese == [], f"{name}: Chinese in the English figure's {kind}: {chinese}"
    kept = KEPT_WORDS | _data_words(w)
    for kind in ("labels", "statuses", "arias"):  # each one Chinese, or a formula such as d_model or PE[3, 4] = ...
        english = [t for t in zh[kind] if not CJK.search(t) and set(WORD.findall(t)) - kept]
        assert english == [], f"{name}: {kind} of the Chinese figure without Chinese: {english}"
    left = {word for texts in en.values() for t in texts for word in WORD.findall(t)} - kept
    untranslated = sorted({(word, t) for texts in zh.values() for t in texts for word in set(WORD.findall(t)) & left})
    assert untranslated == [], f"{name}: English words left in the Chinese figure: {untranslated[:10]}"


# ------------------------------------------------------------------------------ the built book

# Chapter pages and the number of live figures each must show.
LIVE_PAGES = {
    "notebooks/quickstart": 1,
    "notebooks/attention": 2,
    "notebooks/multi_head_attention": 1,
    "notebooks/positional_encoding": 2,
    "notebooks/kv_cache": 1,
    "notebooks/quantization": 1,
    "notebooks/flash_attention": 1,
    "notebooks/modern_decoder": 1,
    "notebooks/fine_tuning": 1,
}
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
@pytest.mark.parametrize("page_name", list(LIVE_PAGES) + [f"zh/{name}" for name in LIVE_PAGES])  # zh/: 中文版
def test_live_figures_render_offline_and_follow_their_controls(book_browser, page_name):
    chrome, server = book_browser
    if not (SITE / f"{page_name}.html").exists():
        pytest.skip(f"{page_name}.html is not in {SITE}")
    chrome.events.clear()
    chrome.send("Page.navigate", url=f"{server}/{page_name}.html")
    chrome.wait_for("document.readyState === 'complete'")
    n = LIVE_PAGES[page_name.removeprefix("zh/")]
    chrome.wait_for(
        f"document.querySelectorAll('.tl-live canvas').length > 0 && "
        f"document.querySelectorAll('.tl-live').length >= {n}"
    )
    assert chrome.js("document.querySelectorAll('.tl-live').length") == n
    # each live figure drew, so the static picture of its default state that the page carries is hidden
    assert chrome.js("[...document.querySelectorAll('.tl-live-fallback')].map(f => f.hidden)") == [True] * n
    blank = chrome.js("""[...document.querySelectorAll('.tl-live canvas')].filter(c => {
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      return !px.some((v, i) => i % 4 === 3 && v > 0);  // no pixel drawn
    }).map(c => c.getAttribute('aria-label'))""")
    assert blank == [], f"blank canvases: {blank}"
    # the figures speak the page's language: Chinese labels in the Chinese edition, none in the English one
    chinese = chrome.js("[...document.querySelectorAll('.tl-live')].map(f => /[\\u4e00-\\u9fff]/.test(f.innerText))")
    assert chinese == [page_name.startswith("zh/")] * n, chinese
    moved = chrome.js(MOVE_EVERY_CONTROL)
    assert moved, "no control found in the live figures"
    still = [m for m in moved if not m[3]]
    assert still == [], f"moving these controls changed nothing shown: {still}"
    chrome.js("new Promise(r => setTimeout(() => r(true), 500))", await_promise=True)
    urls = [e["params"]["request"]["url"] for e in chrome.events if e.get("method") == "Network.requestWillBeSent"]
    outside = [
        u
        for u in urls
        if urllib.parse.urlsplit(u).scheme in ("http", "https", "ws", "wss")
        and urllib.parse.urlsplit(u).hostname not in LOCAL_HOSTS
    ]
    assert outside == [], f"requests left the machine: {outside[:10]}"
    failed = [
        e["params"]["response"]["url"]
        for e in chrome.events
        if e.get("method") == "Network.responseReceived"
        and e["params"]["response"]["status"] >= 400
        and not e["params"]["response"]["url"].endswith("favicon.ico")
    ]
    assert failed == [], f"missing local files: {failed}"
    errors = [e["params"]["exceptionDetails"] for e in chrome.events if e.get("method") == "Runtime.exceptionThrown"]
    assert errors == [], [d.get("exception", {}).get("description", d.get("text", ""))[:300] for d in errors]


@pytest.mark.site
@pytest.mark.parametrize("page_name", list(LIVE_PAGES))
def test_every_live_figure_page_carries_its_static_picture(page_name):
    """Without JavaScript (a reader who turned it off, a printed page, a search engine) each live figure's place
    shows a picture of its default state: an image with alt text, or a table, in the page's HTML itself."""
    if not (SITE / "index.html").exists():
        no_built_site(f"no built book at {SITE}: run `make book` first (or set LIVE_SITE_HTML to a built html folder)")
    path = SITE / f"{page_name}.html"
    if not path.exists():
        pytest.skip(f"{page_name}.html is not in {SITE}")
    page = path.read_text()
    pictures = re.findall(r'<div class="tl-live-fallback" id="tl-fallback-[0-9a-f]+">(.*?)</figure></div>', page, re.S)
    n = LIVE_PAGES[page_name]
    assert len(pictures) == n, f"{len(pictures)} static pictures for {n} live figures"
    for picture in pictures:
        alts = re.findall(r'<img src="data:image/png;base64,[^"]+" alt="([^"]{80,})"', picture)
        assert alts or "<table" in picture, picture[:300]


def test_static_pictures_leave_pyplots_backend_and_no_open_figure():
    """In a notebook the inline backend must survive a live figure, and its picture must not show twice."""
    import matplotlib
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    plt.switch_backend("svg")  # any backend but Agg, which the pictures render with
    try:
        opened = set(plt.get_fignums())
        for w in _examples().values():
            w.static_html()
        assert matplotlib.get_backend() == "svg"
        assert set(plt.get_fignums()) == opened
    finally:
        plt.switch_backend(before)
