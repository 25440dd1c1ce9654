// Chapter 02: scaled dot-product attention for one query, step by step (Vaswani et al. 2017, eq. 1):
//   1. scores   s_j = q . k_j / sqrt(d_k)      for every key j
//   2. weights  a_j = softmax(s / tau)_j       (tau = 1: the formula as written)
//   3. output   o   = sum_j a_j v_j            a weighted average of the values

import { commit, decodeFloat32, dot, fmt, figureRoot, follow, h, hideFallback, labelled, readout, select, slider,
         softmax, strings, viridis } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    query: "query token",
    temperature: "temperature τ",
    columns: ["key token", "key k_j", "1. score q·k_j/√d_k", "2. weight a_j", "value v_j"],
    caption: (token, q) => `query "${token}": q = ${q}`,
    output: (token, o, named, total) =>
      `3. output for "${token}" = Σ_j a_j v_j = ${o}${named ? ` (${named})` : ""}; the weights sum to ${total}.`,
  },
  zh: {
    query: "查询词元",
    temperature: "温度 τ",
    columns: ["键词元", "键 k_j", "1. 分数 q·k_j/√d_k", "2. 权重 a_j", "值 v_j"],
    caption: (token, q) => `查询“${token}”：q = ${q}`,
    output: (token, o, named, total) =>
      `3. “${token}”的输出 = Σ_j a_j v_j = ${o}${named ? `（${named}）` : ""}；权重之和为 ${total}。`,
  },
};

export function scoresFor(q, K) {
  return K.map((k) => dot(q, k) / Math.sqrt(q.length));
}

export function weightedSum(a, V) {
  return V[0].map((_, f) => a.reduce((acc, w, j) => acc + w * V[j][f], 0));
}

// Rows of a (T, d) matrix from its flat float32 array.
function rows(flat, d) {
  return Array.from({ length: flat.length / d }, (_, i) => Array.from(flat.subarray(i * d, (i + 1) * d)));
}

function vec(v) {
  return `(${v.map((x) => fmt(x, 2)).join(", ")})`;
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "steps");
  const text = strings(TEXT);
  const tokens = model.get("tokens"), features = model.get("features"), d = model.get("d");
  const Q = rows(decodeFloat32(model.get("q")), d), K = rows(decodeFloat32(model.get("k")), d);
  const V = rows(decodeFloat32(model.get("v")), model.get("d_v"));
  const state = { i: model.get("query"), tau: model.get("temperature") };
  const queryBox = select(tokens, state.i), tauBox = slider(0.05, 5, 0.01, state.tau), tauText = h("output");
  const table = h("table", { style: "border-collapse:collapse;font-size:90%;margin:6px 0" });
  const out = readout();
  el.append(h("div", {}, [labelled(text.query, queryBox), labelled(text.temperature, tauBox, tauText)]), table, out);

  function cell(content, style = "") {
    return h("td", { style: "padding:2px 8px;border-bottom:1px solid #ddd;" + style }, [content]);
  }

  function draw() {
    tauText.textContent = fmt(state.tau, 2);
    const q = Q[state.i], s = scoresFor(q, K), a = softmax(s, state.tau), o = weightedSum(a, V);
    const head = h("tr", {}, text.columns.map((t) => h("th", { style: "padding:2px 8px;text-align:left" }, [t])));
    const body = tokens.map((tok, j) => h("tr", {}, [
      cell(tok), cell(vec(K[j])), cell(fmt(s[j], 3)),
      cell(h("span", {}, [h("span", { style: `display:inline-block;width:${Math.round(80 * a[j])}px;height:10px;` +
        `background:${viridis(a[j])};margin-right:6px;vertical-align:middle` }), fmt(a[j], 3)])),
      cell(vec(V[j])),
    ]));
    table.replaceChildren(h("caption", { style: "text-align:left" },
      [text.caption(tokens[state.i], vec(q))]), head, ...body);
    const named = features.map((f, k) => `${f} ${fmt(o[k], 2)}`).join(", "); // "" without feature names
    out.textContent = text.output(tokens[state.i], vec(o), named, fmt(a.reduce((x, y) => x + y, 0), 3));
  }
  function redraw() {
    queryBox.value = String(state.i);
    tauBox.value = String(state.tau);
    draw();
  }
  queryBox.addEventListener("change", () => { state.i = Number(queryBox.value); commit(model, { query: state.i }); draw(); });
  tauBox.addEventListener("input", () => { state.tau = Number(tauBox.value); commit(model, { temperature: state.tau }); draw(); });
  follow(model, { query: "i", temperature: "tau" }, state, redraw);
  draw();
  hideFallback(model);
}

export default { render };
