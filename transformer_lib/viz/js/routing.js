// Chapter 11: which experts a mixture-of-experts router picks for each token, layer by layer, computed in
// the browser from the router's scores (logits) x W_r of the trained mixture.
//   p = softmax(x W_r)                 (one row per token, one column per expert)
//   keep the top k of p, renormalized:  g_e = p_e / sum_{j in top k} p_j   (Mixtral; moe.top_k_gating)
// The share of an expert = how many of the T * k assignments of the sentence it received.

import { commit, decodeFloat32, figureRoot, follow, h, hideFallback, labelled, readout, select, slider, softmax,
         strings, viridis } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    layerOption: (i) => `layer ${i}`,
    mapLabel: "gate weight of each expert for each token",
    layer: "layer",
    k: "experts per token k",
    expert: (e) => `expert ${e}`,
    title: (layer, k) => `gate weight g (0 = not chosen; brighter = larger), layer ${layer}, top-${k}`,
    shares: (layer, k, n, shares) =>
      `Layer ${layer}, k = ${k}: share of the ${n} assignments per expert: ${shares.join(", ")}.`,
    share: (e, percent) => `expert ${e} ${percent}%`,
  },
  zh: {
    layerOption: (i) => `第 ${i} 层`,
    mapLabel: "每个词元给每个专家的门控权重",
    layer: "层",
    k: "每个词元的专家数 k",
    expert: (e) => `专家 ${e}`,
    title: (layer, k) => `门控权重 g（0 = 未被选中；越亮 = 越大），第 ${layer} 层，top-${k}`,
    shares: (layer, k, n, shares) => `第 ${layer} 层，k = ${k}：${n} 次分配中每个专家所占的份额：${shares.join("，")}。`,
    share: (e, percent) => `专家 ${e} ${percent}%`,
  },
};

// gates of one token: an array of E weights, zero outside its top k (moe.top_k_gating scattered into E slots).
export function topKGates(logits, k) {
  const p = softmax(logits);
  const order = p.map((v, e) => [v, e]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, k);
  const total = order.reduce((s, [v]) => s + v, 0);
  const gates = new Array(p.length).fill(0);
  for (const [v, e] of order) gates[e] = v / total;
  return gates;
}

// share of the T * k assignments each expert receives (moe.expert_shares).
export function expertShares(gatesRows) {
  const E = gatesRows[0].length, counts = new Array(E).fill(0);
  let n = 0;
  for (const g of gatesRows) for (let e = 0; e < E; e++) if (g[e] > 0) { counts[e] += 1; n += 1; }
  return counts.map((c) => c / n);
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "routing");
  const text = strings(TEXT);
  const tokens = model.get("tokens"), L = model.get("n_layers"), E = model.get("n_experts");
  const T = tokens.length, logits = decodeFloat32(model.get("logits")); // (L, T, E), row by row
  const s = { layer: model.get("layer"), k: model.get("top_k") };
  const layerBox = select(Array.from({ length: L }, (_, i) => text.layerOption(i)), s.layer);
  const kBox = slider(1, E, 1, s.k), kText = h("output");
  const cell = 30, left = 80, top = 18;
  const canvas = h("canvas", { width: String(left + T * cell + 10), height: String(top + E * 22 + 30), role: "img",
                               "aria-label": text.mapLabel });
  const info = readout();
  el.append(h("div", {}, [labelled(text.layer, layerBox), labelled(text.k, kBox, kText)]), canvas, info);

  function rowOf(layer, t) {
    const start = (layer * T + t) * E;
    return Array.from(logits.subarray(start, start + E));
  }

  function draw() {
    layerBox.value = String(s.layer); kBox.value = String(s.k); kText.textContent = String(s.k);
    const gates = tokens.map((_, t) => topKGates(rowOf(s.layer, t), s.k)); // (T, E)
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
    for (let e = 0; e < E; e++) {
      ctx.fillStyle = "#000"; ctx.textAlign = "right";
      ctx.fillText(text.expert(e), left - 6, top + e * 22 + 11);
      for (let t = 0; t < T; t++) {
        const g = gates[t][e];
        ctx.fillStyle = g > 0 ? viridis(g) : "#f2f2f2";
        ctx.fillRect(left + t * cell + 1, top + e * 22 + 1, cell - 2, 20);
      }
    }
    ctx.textAlign = "center"; ctx.fillStyle = "#000";
    tokens.forEach((tok, t) => ctx.fillText(tok === " " ? "␣" : tok === "\n" ? "⏎" : tok, left + t * cell + cell / 2,
                                            top + E * 22 + 12));
    ctx.textAlign = "left";
    ctx.fillText(text.title(s.layer, s.k), left, 8);
    const shares = expertShares(gates).map((x, e) => text.share(e, (100 * x).toFixed(0)));
    info.textContent = text.shares(s.layer, s.k, T * s.k, shares);
  }
  layerBox.addEventListener("change", () => { s.layer = Number(layerBox.value); commit(model, { layer: s.layer }); draw(); });
  kBox.addEventListener("input", () => { s.k = Number(kBox.value); commit(model, { top_k: s.k }); draw(); });
  follow(model, { layer: "layer", top_k: "k" }, s, draw); // draw() moves the controls to s
  draw();
  hideFallback(model);
}

export default { render };
