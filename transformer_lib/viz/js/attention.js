// Chapter 02/03: a trained encoder's attention, recomputed in the browser at any temperature tau.
// The page carries each head's scaled scores S = Q K^T / sqrt(d_head) (T x T per head); the weights
// are A = softmax(S / tau) row by row (chapter 02's equation), so a temperature costs no download.

import { commit, decodeFloat32, entropyBits, figureRoot, fmt, follow, h, hideFallback, labelled, readout, select,
         slider, softmax, strings, viridis } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    weightScale: "weight 0",
    hint: "Point at a cell to read its weight; click a row (or pick a query) for its entropy.",
    sentence: "sentence",
    layer: "layer",
    head: "head",
    temperature: "temperature τ",
    queryRow: "query row",
    noRow: "(none)",
    headPrefix: (hd) => `head ${hd}: `,
    bits: (hBits) => `${hBits} bits`,
    rowWeights: (weights) => `; weights: ${weights.join(", ")}`,
    rowEntropy: (token, row, tau, parts, T, maxBits) =>
      `query "${token}" (row ${row}), τ = ${tau}: entropy ${parts.join(", ")} (0 = all weight on one key; ` +
      `uniform over ${T} keys = ${maxBits} bits)`,
    mapLabel: (l, hd, tau) => `attention weights of layer ${l}, head ${hd} at temperature ${tau}`,
    cell: (l, hd, query, key, w, tau) => `layer ${l}, head ${hd}: query "${query}" → key "${key}": weight ${w} at τ = ${tau}`,
    caption: (hd, label) => (label ? `head ${hd}: ${label}` : `head ${hd}`),
  },
  zh: {
    weightScale: "权重 0",
    hint: "指向一个格子可读出它的权重；点击一行（或选一个查询）可读出这一行的熵。",
    sentence: "句子",
    layer: "层",
    head: "头",
    temperature: "温度 τ",
    queryRow: "查询行",
    noRow: "（无）",
    headPrefix: (hd) => `头 ${hd} 为 `,
    bits: (hBits) => `${hBits} 比特`,
    rowWeights: (weights) => `；权重：${weights.join("，")}`,
    rowEntropy: (token, row, tau, parts, T, maxBits) =>
      `查询“${token}”（第 ${row} 行），τ = ${tau}，熵：${parts.join("，")}（0 = 全部权重落在一个键上；` +
      `均匀分布在 ${T} 个键上 = ${maxBits} 比特）`,
    mapLabel: (l, hd, tau) => `第 ${l} 层、头 ${hd} 在温度 ${tau} 下的注意力权重`,
    cell: (l, hd, query, key, w, tau) => `第 ${l} 层，头 ${hd}：查询“${query}”→ 键“${key}”：τ = ${tau} 时权重为 ${w}`,
    caption: (hd, label) => (label ? `头 ${hd}：${label}` : `头 ${hd}`),
  },
};

// The T x T scores of layer l, head hd from the flat (L, H, T, T) array, as T rows.
export function headScores(flat, H, T, l, hd) {
  const start = (l * H + hd) * T * T;
  return Array.from({ length: T }, (_, i) => flat.subarray(start + i * T, start + (i + 1) * T));
}

// A = softmax(S / tau) for every query row (mirrors attention_weights(q, k, temperature=tau)).
export function headWeights(rows, tau) {
  return rows.map((row) => softmax(row, tau));
}

// Draw one head's weights as a heatmap on a canvas: row i = query token i, column j = key token j.
// `tokens`: the axis labels, or [] for a small unlabelled map.
function drawHeatmap(canvas, A, tokens, cell, margin, selectedRow) {
  const T = A.length;
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.font = "11px sans-serif";
  ctx.fillStyle = "#000";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  tokens.forEach((tok, i) => ctx.fillText(tok, margin - 4, margin + (i + 0.5) * cell)); // query labels
  tokens.forEach((tok, j) => { // key labels, written upwards above the columns
    ctx.save();
    ctx.translate(margin + (j + 0.5) * cell, margin - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(tok, 0, 0);
    ctx.restore();
  });
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = viridis(A[i][j]); // one colour scale for every head: weight 0 to 1
      ctx.fillRect(margin + j * cell, margin + i * cell, cell, cell);
    }
  }
  if (selectedRow !== null) {
    ctx.strokeStyle = "#d62728";
    ctx.lineWidth = 2;
    ctx.strokeRect(margin + 1, margin + selectedRow * cell + 1, T * cell - 2, cell - 2);
  }
}

// The cell under a pointer event, or null outside the grid.
function cellAt(event, canvas, T, cell, margin) {
  const box = canvas.getBoundingClientRect();
  const x = (event.clientX - box.left) * (canvas.width / box.width) - margin;
  const y = (event.clientY - box.top) * (canvas.height / box.height) - margin;
  const i = Math.floor(y / cell), j = Math.floor(x / cell);
  return i >= 0 && j >= 0 && i < T && j < T ? [i, j] : null;
}

function colourBar(text) {
  const stops = Array.from({ length: 11 }, (_, k) => `${viridis(k / 10)} ${k * 10}%`).join(", ");
  return h("div", { style: "font-size:80%;display:flex;align-items:center;gap:4px;margin:4px 0" }, [
    text.weightScale, h("span", { style: `display:inline-block;width:140px;height:10px;background:linear-gradient(to right, ${stops})` }), "1",
  ]);
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "attention");
  const text = strings(TEXT);
  const L = model.get("n_layers"), H = model.get("n_heads");
  const allHeads = model.get("mode") === "all";
  const tokensOf = model.get("tokens");
  const labels = model.get("head_labels"); // per sentence, layer and head: a short description, or []
  const scoresOf = model.get("scores").map(decodeFloat32); // one (L, H, T, T) array per sentence
  const state = { s: model.get("sentence"), l: model.get("layer"), hd: model.get("head"),
                  tau: model.get("temperature"), row: null };

  const sentenceBox = select(tokensOf.map((t) => t.slice(1, -1).join(" ")), state.s);
  const layerBox = select([...Array(L).keys()], state.l);
  const headBox = select([...Array(H).keys()], state.hd);
  const tauBox = slider(model.get("tau_min"), model.get("tau_max"), 0.01, state.tau);
  const tauText = h("output", {}, [fmt(state.tau, 2)]);
  const rowBox = h("select");
  const hover = readout(text.hint);
  const rowInfo = readout("");
  const controls = h("div", { style: "margin-bottom:6px" }, [
    ...(tokensOf.length > 1 ? [labelled(text.sentence, sentenceBox)] : []), labelled(text.layer, layerBox),
    ...(allHeads ? [] : [labelled(text.head, headBox)]),
    labelled(text.temperature, tauBox, tauText), labelled(text.queryRow, rowBox),
  ]);
  const figures = h("div", { style: "display:flex;flex-wrap:wrap;gap:8px" });
  el.append(controls, figures, colourBar(text), hover, rowInfo);

  function heads() { return allHeads ? [...Array(H).keys()] : [state.hd]; }

  function showRow() {
    const tokens = tokensOf[state.s];
    if (state.row === null) { rowInfo.textContent = ""; return; }
    const T = tokens.length;
    const parts = heads().map((hd) => {
      const A = headWeights(headScores(scoresOf[state.s], H, T, state.l, hd), state.tau);
      return (allHeads ? text.headPrefix(hd) : "") + text.bits(fmt(entropyBits(A[state.row]), 2));
    });
    let weights = ""; // one head: the whole row as text, for readers who do not use a pointer
    if (!allHeads) {
      const A = headWeights(headScores(scoresOf[state.s], H, T, state.l, state.hd), state.tau);
      weights = text.rowWeights(tokens.map((t, j) => `${t} ${fmt(A[state.row][j])}`));
    }
    rowInfo.textContent = text.rowEntropy(tokens[state.row], state.row, fmt(state.tau, 2), parts, T,
                                          fmt(Math.log2(T), 2)) + weights;
  }

  function draw() {
    const tokens = tokensOf[state.s], T = tokens.length;
    const longest = Math.max(...tokens.map((t) => t.length));
    const cell = allHeads ? Math.max(6, Math.floor(150 / T)) : Math.max(14, Math.min(32, Math.floor(380 / T)));
    const margin = allHeads ? 4 : 12 + 6.5 * longest;
    figures.replaceChildren();
    for (const hd of heads()) {
      const A = headWeights(headScores(scoresOf[state.s], H, T, state.l, hd), state.tau);
      const canvas = h("canvas", { width: String(margin + T * cell + 2), height: String(margin + T * cell + 2),
        role: "img", "aria-label": text.mapLabel(state.l, hd, fmt(state.tau, 2)) });
      drawHeatmap(canvas, A, allHeads ? [] : tokens, cell, margin, state.row);
      canvas.addEventListener("mousemove", (e) => {
        const at = cellAt(e, canvas, T, cell, margin);
        if (at) hover.textContent = text.cell(state.l, hd, tokens[at[0]], tokens[at[1]], fmt(A[at[0]][at[1]]), fmt(state.tau, 2));
      });
      canvas.addEventListener("click", (e) => {
        const at = cellAt(e, canvas, T, cell, margin);
        if (at) { state.row = at[0]; rowBox.value = String(at[0]); draw(); }
      });
      figures.append(allHeads ? h("figure", { style: "margin:0;text-align:center;font-size:80%" },
        [canvas, h("figcaption", {}, [text.caption(hd, labels.length ? labels[state.s][state.l][hd] : "")])]) : canvas);
    }
    showRow();
  }

  function resetRows() {
    const tokens = tokensOf[state.s];
    rowBox.replaceChildren(h("option", { value: "" }, [text.noRow]),
      ...tokens.map((t, i) => h("option", { value: String(i) }, [`${i}: ${t}`])));
    state.row = null;
  }

  sentenceBox.addEventListener("change", () => {
    state.s = Number(sentenceBox.value); commit(model, { sentence: state.s }); resetRows(); draw();
  });
  layerBox.addEventListener("change", () => { state.l = Number(layerBox.value); commit(model, { layer: state.l }); draw(); });
  headBox.addEventListener("change", () => { state.hd = Number(headBox.value); commit(model, { head: state.hd }); draw(); });
  tauBox.addEventListener("input", () => {
    state.tau = Number(tauBox.value); tauText.textContent = fmt(state.tau, 2); commit(model, { temperature: state.tau }); draw();
  });
  rowBox.addEventListener("change", () => { state.row = rowBox.value === "" ? null : Number(rowBox.value); draw(); });
  let shownSentence = state.s;
  follow(model, { sentence: "s", layer: "l", head: "hd", temperature: "tau" }, state, () => { // set in Python
    sentenceBox.value = String(state.s); layerBox.value = String(state.l); headBox.value = String(state.hd);
    tauBox.value = String(state.tau); tauText.textContent = fmt(state.tau, 2);
    if (state.s !== shownSentence) { shownSentence = state.s; resetRows(); }
    draw();
  });
  sentenceBox.addEventListener("change", () => { shownSentence = state.s; });
  resetRows();
  draw();
  hideFallback(model);
}

export default { render };
