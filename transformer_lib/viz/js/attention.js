// Chapter 02/03: a trained encoder's attention, recomputed in the browser at any temperature tau.
// The page carries each head's scaled scores S = Q K^T / sqrt(d_head) (T x T per head); the weights
// are A = softmax(S / tau) row by row (chapter 02's equation), so a temperature costs no download.

import { commit, decodeFloat32, entropyBits, figureRoot, fmt, follow, h, hideFallback, labelled, readout, select,
         slider, softmax, viridis } from "./common.js";

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

function colourBar() {
  const stops = Array.from({ length: 11 }, (_, k) => `${viridis(k / 10)} ${k * 10}%`).join(", ");
  return h("div", { style: "font-size:80%;display:flex;align-items:center;gap:4px;margin:4px 0" }, [
    "weight 0", h("span", { style: `display:inline-block;width:140px;height:10px;background:linear-gradient(to right, ${stops})` }), "1",
  ]);
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "attention");
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
  const hover = readout("Point at a cell to read its weight; click a row (or pick a query) for its entropy.");
  const rowInfo = readout("");
  const controls = h("div", { style: "margin-bottom:6px" }, [
    ...(tokensOf.length > 1 ? [labelled("sentence", sentenceBox)] : []), labelled("layer", layerBox),
    ...(allHeads ? [] : [labelled("head", headBox)]),
    labelled("temperature τ", tauBox), tauText, " ", labelled("query row", rowBox),
  ]);
  const figures = h("div", { style: "display:flex;flex-wrap:wrap;gap:8px" });
  el.append(controls, figures, colourBar(), hover, rowInfo);

  function heads() { return allHeads ? [...Array(H).keys()] : [state.hd]; }

  function showRow() {
    const tokens = tokensOf[state.s];
    if (state.row === null) { rowInfo.textContent = ""; return; }
    const T = tokens.length;
    const parts = heads().map((hd) => {
      const A = headWeights(headScores(scoresOf[state.s], H, T, state.l, hd), state.tau);
      return `${allHeads ? `head ${hd}: ` : ""}${fmt(entropyBits(A[state.row]), 2)} bits`;
    });
    let weights = ""; // one head: the whole row as text, for readers who do not use a pointer
    if (!allHeads) {
      const A = headWeights(headScores(scoresOf[state.s], H, T, state.l, state.hd), state.tau);
      weights = "; weights: " + tokens.map((t, j) => `${t} ${fmt(A[state.row][j])}`).join(", ");
    }
    rowInfo.textContent = `query "${tokens[state.row]}" (row ${state.row}), τ = ${fmt(state.tau, 2)}: entropy ` +
      `${parts.join(", ")} (0 = all weight on one key; uniform over ${T} keys = ${fmt(Math.log2(T), 2)} bits)` + weights;
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
        role: "img", "aria-label": `attention weights of layer ${state.l}, head ${hd} at temperature ${fmt(state.tau, 2)}` });
      drawHeatmap(canvas, A, allHeads ? [] : tokens, cell, margin, state.row);
      canvas.addEventListener("mousemove", (e) => {
        const at = cellAt(e, canvas, T, cell, margin);
        if (at) hover.textContent = `layer ${state.l}, head ${hd}: query "${tokens[at[0]]}" → key "${tokens[at[1]]}": ` +
          `weight ${fmt(A[at[0]][at[1]])} at τ = ${fmt(state.tau, 2)}`;
      });
      canvas.addEventListener("click", (e) => {
        const at = cellAt(e, canvas, T, cell, margin);
        if (at) { state.row = at[0]; rowBox.value = String(at[0]); draw(); }
      });
      figures.append(allHeads ? h("figure", { style: "margin:0;text-align:center;font-size:80%" },
        [canvas, h("figcaption", {}, [`head ${hd}` + (labels.length ? `: ${labels[state.s][state.l][hd]}` : "")])]) : canvas);
    }
    showRow();
  }

  function resetRows() {
    const tokens = tokensOf[state.s];
    rowBox.replaceChildren(h("option", { value: "" }, ["(none)"]),
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
