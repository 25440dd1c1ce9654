"""Static pictures of the live figures' default state, for a page read without JavaScript.

A live figure (``viz/live.py``, ``viz/live_attention.py``, ``viz/token_flow.py``) is drawn by JavaScript in the
reader's browser. A reader without JavaScript, a printed page, a screen reader and a search engine would see
nothing, so displaying one first writes the picture made here: a PNG (matplotlib) with alt text that states
what it shows, or an HTML table, of the settings the figure starts with. Each is computed from the numbers the
widget sends to the browser (its traits, decoded) by the library functions the tests compare the JavaScript with
(``torch.softmax``, ``attention.scaled_dot_product_attention``, ``positional.sinusoidal_table``,
``positional.RotaryEmbedding``, ``serving.kv_cache.kv_cache_bytes``, ``quant.grids.fake_quantize``,
``flash.trace_one_query_block``, ``moe.top_k_gating``). Once the live figure has drawn, its JavaScript hides
the picture (``hideFallback`` in ``js/common.js``).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math

import numpy as np
import torch

from ..serving.kv_cache import human_bytes

NOTE = (
    "A picture of the live figure at its first settings. With JavaScript, the live figure takes its place and "
    "lets you change them."
)


def decode_float32(b64: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The inverse of ``live.encode_float32``: base64 of little-endian float32 -> a tensor of ``shape``."""
    a = np.frombuffer(base64.b64decode(b64), dtype="<f4").astype(np.float32)
    return torch.from_numpy(a.copy()).reshape(shape)


def fallback(element_id: str, inner: str) -> str:
    """The HTML a live figure's page carries before the widget: ``inner`` in a box the JavaScript can hide."""
    return f'<div class="tl-live-fallback" id="{html.escape(element_id)}">{inner}</div>'


def display_with_picture(widget) -> None:
    """Display ``widget``'s static picture (HTML, and a line for text-only front-ends), then the widget itself."""
    from IPython.display import display

    display(
        {
            "text/html": fallback(widget.fallback_id, widget.static_html()),
            "text/plain": f"[{type(widget).__name__}: a live figure; the picture shows its first settings]",
        },
        raw=True,
    )
    data, metadata = widget._repr_mimebundle_()  # the widget view, as anywidget writes it
    display(data, metadata=metadata, raw=True)


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def image(fig, alt: str, caption: str) -> str:
    """``fig`` as an inline PNG ``<img>`` with ``alt``, in a ``<figure>`` with ``caption`` and the note."""
    return (
        f'<figure style="margin:0.5em 0"><img src="data:image/png;base64,{_png(fig)}" alt="{html.escape(alt)}" '
        f'style="max-width:100%"><figcaption style="font-size:85%">{html.escape(caption)} {NOTE}'
        f"</figcaption></figure>"
    )


def table(headers, rows, caption: str, after: str = "") -> str:
    """An HTML table (cells escaped) with ``caption`` and the note, then the sentence ``after``."""
    head = "".join(f'<th style="text-align:left;padding:1px 8px">{html.escape(str(h))}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td style="padding:1px 8px">{html.escape(str(c))}</td>' for c in row) + "</tr>"
        for row in rows
    )
    return (
        f'<figure style="margin:0.5em 0"><table style="border-collapse:collapse;font-size:90%">'
        f'<caption style="text-align:left">{html.escape(caption)}</caption><tr>{head}</tr>{body}</table>'
        f'<figcaption style="font-size:85%">{html.escape(after)} {NOTE}</figcaption></figure>'
    )


def _plt():
    """pyplot, under whatever backend is active (never switched: a notebook keeps its inline plots); every
    figure made here is closed once saved, so no backend shows it."""
    import matplotlib.pyplot as plt

    return plt


def show(token: str) -> str:
    """A token in quotes, spaces and newlines visible (``show`` in ``js/token_flow.js``)."""
    return json.dumps(token, ensure_ascii=False)


def _vec(v) -> str:
    return "(" + ", ".join(f"{float(x):.2f}" for x in v) + ")"


# ----------------------------------------------------------------------------- one picture per figure


def token_flow(w) -> str:
    T, L, H, k = len(w.tokens), w.n_layers, w.n_heads, w.top_k
    t, lay, hd, stage = w.position, w.layer, w.head, w.stage
    att = decode_float32(w.attention, (L, H, T, T))
    a_norm, f_norm = decode_float32(w.attn_norm, (L, T)), decode_float32(w.ffn_norm, (L, T))
    emb_norm = decode_float32(w.emb_norm, (T,))
    p = torch.exp(decode_float32(w.top_logits, (T, k))[t] - decode_float32(w.logsumexp, (T,))[t])  # softmax(z)[top]
    row = att[lay, hd, t]
    j = int(row.argmax())
    flow = (
        f"{show(w.tokens[t])} → id {w.ids[t]} → |x| = {emb_norm[t]:.2f} → layer {lay} head {hd} looks "
        f"most at {show(w.tokens[j])} ({row[j]:.2f}) → FFN adds |f| = {f_norm[lay, t]:.2f} → next: "
        f"{show(w.top_tokens[t][0])} ({p[0]:.3f})"
    )
    if stage == "ids":
        rows, what = [(show(x), i) for x, i in zip(w.tokens, w.ids)], ("token", "id")
    elif stage == "embedding":
        dims = decode_float32(w.emb_dims, (T, w.n_dims))[t]
        rows, what = [(f"x[{i}]", f"{x:.3f}") for i, x in enumerate(dims)], ("entry", "value")
    elif stage == "attention":
        rows, what = [(show(x), f"{a:.3f}") for x, a in zip(w.tokens[: t + 1], row[: t + 1])], ("key token", "weight")
    elif stage == "feed-forward":
        rows = [(f"{name} {m}", f"{v[m, t]:.3f}") for m in range(L) for name, v in (("attn", a_norm), ("FFN", f_norm))]
        what = ("sub-layer", "norm of what it adds")
    else:
        rows, what = [(show(x), f"{q:.3f}") for x, q in zip(w.top_tokens[t], p)], ("next token", "probability")
    return table(
        what,
        rows,
        f"Position {t} ({show(w.tokens[t])}), stage {stage!r}: {flow}",
        f"Stage {stage!r} of layer {lay}, head {hd} at position {t}.",
    )


def attention_steps(w) -> str:
    from ..blocks.attention import scaled_dot_product_attention

    T, d, dv = len(w.tokens), w.d, w.d_v
    q, k, v = (decode_float32(x, (T, n)).double() for x, n in ((w.q, d), (w.k, d), (w.v, dv)))
    i, tau = w.query, w.temperature
    out, weights = scaled_dot_product_attention(q, k, v, need_weights=True, temperature=tau)  # (T, dv), (T, T)
    scores = q[i] @ k.T / math.sqrt(d)
    rows = [(tok, _vec(k[j]), f"{scores[j]:.3f}", f"{weights[i, j]:.3f}", _vec(v[j])) for j, tok in enumerate(w.tokens)]
    named = (" (" + ", ".join(f"{f} {o:.2f}" for f, o in zip(w.features, out[i])) + ")") if w.features else ""
    return table(
        ["key token", "key k_j", "1. score q·k_j/√d_k", "2. weight a_j", "value v_j"],
        rows,
        f'query "{w.tokens[i]}": q = {_vec(q[i])}, temperature τ = {tau:.2f}',
        f'3. output for "{w.tokens[i]}" = Σ_j a_j v_j = {_vec(out[i])}{named}; the weights sum to '
        f"{weights[i].sum():.3f}.",
    )


def attention_heatmap(w) -> str:
    plt = _plt()
    tokens = w.tokens[w.sentence]
    T, L, H, lay, tau = len(tokens), w.n_layers, w.n_heads, w.layer, w.temperature
    A = torch.softmax(decode_float32(w.scores[w.sentence], (L, H, T, T)).double() / tau, dim=-1)[lay]  # (H, T, T)
    heads = list(range(H)) if w.mode == "all" else [w.head]
    words = " ".join(tokens[1:-1])
    cols = min(len(heads), 6)
    fig, axes = plt.subplots(
        (len(heads) + cols - 1) // cols,
        cols,
        squeeze=False,
        figsize=(2.0 * cols, 2.1 * ((len(heads) + cols - 1) // cols))
        if len(heads) > 1
        else (0.32 * T + 1.8, 0.32 * T + 1.0),
    )
    for ax in axes.flat:
        ax.set_axis_off()
    described = []
    for ax, hd in zip(axes.flat, heads):
        ax.set_axis_on()
        im = ax.imshow(A[hd].numpy(), cmap="viridis", vmin=0, vmax=1)
        label = w.head_labels[w.sentence][lay][hd] if w.head_labels else ""
        if len(heads) == 1:
            ax.set_xticks(range(T), tokens, rotation=90, fontsize=8)
            ax.set_yticks(range(T), tokens, fontsize=8)
            ax.set_xlabel("key token")
            ax.set_ylabel("query token")
            best = A[hd].argmax(-1)
            described.append(
                "; ".join(f"{tokens[r]} → {tokens[c]} {A[hd, r, c]:.2f}" for r, c in enumerate(best.tolist()))
            )
        else:
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(f"head {hd}" + (f": {label}" if label else ""), fontsize=7)
            r, c = divmod(int(A[hd].argmax()), T)
            described.append(
                f"head {hd}{' (' + label + ')' if label else ''}: largest {tokens[r]} → {tokens[c]} {A[hd, r, c]:.2f}"
            )
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    which = f"the {H} heads of layer {lay}" if len(heads) > 1 else f"layer {lay}, head {w.head}"
    alt = (
        f"Heatmap of the attention weights softmax(S / τ) of {which} at temperature τ = {tau:.2f} on the sentence "
        f'"{words}": rows are query tokens, columns key tokens, colour from 0 to 1. '
        + ("Strongest key for each query: " if len(heads) == 1 else "")
        + "; ".join(described)
        + "."
    )
    return image(fig, alt, f'Attention weights of {which} at τ = {tau:.2f} on "{words}".')


def sinusoid_table(w) -> str:
    from ..blocks.positional import sinusoidal_table

    plt = _plt()
    n, d, p, p2 = w.n_positions, w.d_model, w.position, w.other
    pe = sinusoidal_table(n, d).double()  # (n, d)
    sims = pe @ pe[p]  # (n,)
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 2.8), gridspec_kw={"width_ratios": [1.2, 1]}, layout="constrained")
    im = a.imshow(pe.numpy(), aspect="auto", cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    for pos, colour in ((p, "#d62728"), (p2, "white")):
        a.axhline(pos, color=colour, lw=1.5)
    a.set_xlabel("dimension i"), a.set_ylabel("position pos")
    a.set_title(f"PE[pos, i], d_model = {d} (red: {p}, white: {p2})", fontsize=9)
    fig.colorbar(im, ax=a, label="PE value")
    b.plot(sims.numpy(), color="#1f77b4")
    b.plot([p], [sims[p].item()], "s", color="#d62728")
    b.set_xlabel("position pos"), b.set_ylabel(f"PE[{p}] · PE[pos]")
    b.set_title(f"dot product with position {p}", fontsize=9)
    alt = (
        f"Left: the sinusoidal table PE[pos, i] for positions 0 to {n - 1} (rows) and its {d} dimensions "
        f"(columns), values from -1 to 1, fast waves in the first dimensions and slow ones in the last. Right: the "
        f"dot product PE[{p}] · PE[pos] against pos, largest ({sims[p]:.1f} = d_model / 2) at pos = {p}. "
        f"PE[{p}] · PE[{p2}] = {pe[p] @ pe[p2]:.3f}."
    )
    return image(fig, alt, f"The sinusoidal table for d_model = {d}; PE[{p}] · PE[{p2}] = {pe[p] @ pe[p2]:.3f}.")


def rope_rotation(w) -> str:
    from ..blocks.positional import RotaryEmbedding

    plt = _plt()
    d = len(base64.b64decode(w.q)) // 4
    q, k = decode_float32(w.q, (d,)), decode_float32(w.k, (d,))
    rope = RotaryEmbedding(d, base=w.base)
    qm = rope(q.reshape(1, 1, 1, d), offset=w.m).reshape(d)
    kn = rope(k.reshape(1, 1, 1, d), offset=w.n).reshape(d)
    score = float(qm @ kn)
    pairs, cols = d // 2, min(8, d // 2)
    fig, axes = plt.subplots(
        (pairs + cols - 1) // cols, cols, squeeze=False, figsize=(1.2 * cols, 1.3 * ((pairs + cols - 1) // cols))
    )
    r = float(torch.cat([q, k]).abs().max()) * math.sqrt(2)
    for i, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if i >= pairs:
            continue
        ax.add_patch(plt.Circle((0, 0), 1, fill=False, color="#bbb"))
        for vec, colour in ((qm, "#0072b2"), (kn, "#e69f00")):
            ax.plot([0, vec[2 * i] / r], [0, vec[2 * i + 1] / r], color=colour, lw=2)
        ax.set_xlim(-1.1, 1.1), ax.set_ylim(-1.1, 1.1), ax.set_aspect("equal")
        ax.set_title(f"pair {i}", fontsize=7)
    alt = (
        f"{pairs} small circles, one per pair of dimensions: in each, the query's pair after RoPE at position "
        f"m = {w.m} (blue arrow) and the key's at n = {w.n} (orange arrow); pair i turns by position × "
        f"{w.base:g}^(-2i/{d}), so the first pairs turn fastest. Score RoPE(q, {w.m}) · RoPE(k, {w.n}) = "
        f"{score:.3f} at offset m - n = {w.m - w.n}."
    )
    return image(
        fig, alt, f"RoPE(q, {w.m}) · RoPE(k, {w.n}) = {score:.3f}; offset m - n = {w.m - w.n} (blue: q, orange: k)."
    )


def kv_cache_calculator(w) -> str:
    from ..serving.kv_cache import kv_cache_bytes

    rows = []
    for name, layers, heads, d_head, context, nbytes in w.models:
        total = kv_cache_bytes(
            layers, heads, d_head, min(context, w.max_length), batch_size=1, bytes_per_element=nbytes
        )
        per_token = kv_cache_bytes(layers, heads, d_head, 1, batch_size=1, bytes_per_element=nbytes)
        rows.append(
            (
                name,
                layers,
                heads,
                d_head,
                context,
                nbytes,
                f"{human_bytes(total)} ({total:,} bytes)",
                human_bytes(per_token),
            )
        )
    return table(
        ["model", "layers", "kv heads", "d_head", "length T", "bytes per number", "KV cache, batch 1", "per token"],
        rows,
        "KV cache = 2 × layers × batch × kv heads × d_head × T × bytes per number",
        "Each model of the calculator at its full context length, one sequence.",
    )


def quant_grid(w) -> str:
    from ..quant.grids import BITS, fake_quantize

    plt = _plt()
    row = decode_float32(w.row, (len(base64.b64decode(w.row)) // 4,))
    at = int(row.abs().argmax())
    x = row.clone()
    x[at] = x[at] * w.outlier
    g = w.group_size or x.numel()
    qmax = 2 ** (w.bits - 1) - 1
    scales = x.reshape(-1, g).abs().amax(-1) / qmax  # (n_groups,)
    if w.bits in BITS:
        deq = fake_quantize(x[None], w.bits, True, "group" if w.group_size else "channel", w.group_size or None)[0]
    else:  # the same absmax round trip in closed form (the library stores 4 and 8 bits only)
        deq = (torch.round(x.reshape(-1, g) / scales[:, None]).clamp(-qmax, qmax) * scales[:, None]).reshape(-1)
    err = x - deq
    rel = float(err.pow(2).mean().sqrt() / x.pow(2).mean().sqrt())
    outlier_s = float(scales[at // g])
    typical_s = float(scales.sort().values[len(scales) // 2])  # the median scale, as quant.js picks it
    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 4.6), layout="constrained")
    a.hist(x.numpy(), bins=80, color="#999")
    a.set_ylim(0, a.get_ylim()[1] * 1.35)  # room above the bars for the two grids
    codes = torch.arange(-qmax, qmax + 1, dtype=torch.float32)
    for s, colour, y0, label in (
        (outlier_s, "#e69f00", 0.93, "outlier's group"),
        (typical_s, "#0072b2", 0.85, "typical group"),
    ):
        a.vlines(
            (codes * s).numpy(), y0 - 0.06, y0, transform=a.get_xaxis_transform(), color=colour, lw=0.8, label=label
        )
    a.set_xlabel("weight"), a.set_ylabel("count"), a.legend(fontsize=7, loc="center right")
    a.set_title("the row's weights; grid of the outlier's group (orange), of a typical group (blue)", fontsize=9)
    bound = (scales / 2).repeat_interleave(g)
    b.plot(err.numpy(), ".", ms=2, color="#0072b2", label="error w - q·s")
    b.plot(bound.numpy(), color="#d55e00", lw=1, label="±s/2")
    b.plot((-bound).numpy(), color="#d55e00", lw=1)
    b.set_xlabel("weight index"), b.set_ylabel("error"), b.legend(fontsize=7)
    where = f"groups of {w.group_size}" if w.group_size else "one scale per row"
    b.set_title(f"int{w.bits}, {where}: error w - q·s per weight (blue), bound ±s/2 (orange)", fontsize=9)
    steps = (
        f"step of the outlier's group {outlier_s:.2e}, of a typical group {typical_s:.2e}"
        if w.group_size
        else f"one step for the whole row, {outlier_s:.2e}"
    )
    alt = (
        f"Top: histogram of the row's {x.numel()} weights with two grids of representable values, the outlier's "
        f"group's (orange) and a typical group's (blue). Bottom: each weight's rounding error after absmax "
        f"int{w.bits} quantization with {where}, inside the bound ±s/2 of its group; RMS error / RMS weight = "
        f"{100 * rel:.2f}%; {steps}."
    )
    return image(fig, alt, f"int{w.bits}, {where}: RMS error / RMS weight = {100 * rel:.2f}%; {steps}.")


def online_softmax_tiles(w) -> str:
    from ..blocks.flash import trace_one_query_block

    plt = _plt()
    q, k, v = (decode_float32(x, (n, c)) for x, n, c in ((w.q, w.bq, w.d), (w.k, w.t_k, w.d), (w.v, w.t_k, w.d_v)))
    steps = trace_one_query_block(q, k, v, block_k=w.block_k)
    first = steps[0]
    scores = (q.double() @ k.double().T / math.sqrt(w.d)).numpy()  # (bq, Tk)
    shown = np.ma.masked_where(np.broadcast_to(np.arange(w.t_k)[None, :] >= first["j1"], scores.shape), scores)
    fig, ax = plt.subplots(figsize=(8, 0.45 * w.bq + 1.0))
    ax.imshow(shown, aspect="auto", cmap="viridis", vmin=scores.min(), vmax=scores.max())
    ax.add_patch(
        plt.Rectangle((first["j0"] - 0.5, -0.5), first["j1"] - first["j0"], w.bq, fill=False, color="#d62728", lw=2)
    )
    ax.set_xlabel("key"), ax.set_ylabel("query"), ax.set_yticks(range(w.bq))
    ax.set_title(f"tiles of {w.block_k} keys: after tile 1 of {len(steps)} (white: keys not yet seen)", fontsize=9)
    out = ", ".join(f"{x:.3f}" for x in first["out"][0][:4]) + (", ..." if w.d_v > 4 else "")
    text = (
        f"after 1 tile(s), query 0: running max m = {first['m'][0]:.3f}, running sum l = {first['l'][0]:.3f}, "
        f"output o / l = [{out}]"
    )
    alt = (
        f"The scores of {w.bq} queries (rows) against {w.t_k} keys (columns); only the first tile of {w.block_k} "
        f"keys is coloured, the rest not yet folded in. {text}."
    )
    return image(fig, alt, text + ".")


def expert_routing(w) -> str:
    from ..blocks.moe import expert_shares, top_k_gating

    plt = _plt()
    T, E = len(w.tokens), w.n_experts
    logits = decode_float32(w.logits, (w.n_layers, T, E))[w.layer]  # (T, E)
    weights, experts = top_k_gating(logits, w.top_k)
    gates = torch.zeros(T, E).scatter(-1, experts, weights)
    shares = expert_shares(experts, E)
    fig, ax = plt.subplots(figsize=(0.32 * T + 1.5, 0.3 * E + 1.0))
    im = ax.imshow(np.ma.masked_equal(gates.T.numpy(), 0), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(T), ["␣" if t == " " else t for t in w.tokens], fontsize=8)
    ax.set_yticks(range(E), [f"expert {e}" for e in range(E)], fontsize=8)
    fig.colorbar(im, ax=ax, label="gate weight")
    ax.set_title(f"layer {w.layer}, top-{w.top_k} (white: not chosen)", fontsize=9)
    share_text = ", ".join(f"expert {e} {100 * s:.0f}%" for e, s in enumerate(shares.tolist()))
    alt = (
        f"For each of the {T} tokens (columns), the gate weight of each of the {E} experts (rows) in layer "
        f"{w.layer} with top-{w.top_k} routing; experts not chosen are blank. Share of the {T * w.top_k} "
        f"assignments: {share_text}."
    )
    return image(fig, alt, f"Layer {w.layer}, k = {w.top_k}: share of the assignments per expert: {share_text}.")
