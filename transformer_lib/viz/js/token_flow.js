// Chapter 00: follow one token through a GPT. Python (viz/token_flow.py) sends the numbers of one real
// forward pass; this module picks out the chosen position, layer, head and stage and computes what it shows.

import { commit, decodeFloat32, figureRoot, fmt, follow, h, hideFallback, labelled, readout, select } from "./common.js";

export const STAGES = ["ids", "embedding", "attention", "feed-forward", "probabilities"];

// p_j = exp(z_j - logsumexp(z)): the softmax of the whole row of logits, for the top-k entries we were sent.
// Mirrors torch.softmax(logits, -1)[top_ids].
export function nextTokenProbs(topLogits, lse) {
  return Array.from(topLogits, (z) => Math.exp(z - lse));
}

// Row `t` of the attention weights of layer l, head h, from the flat (L, H, T, T) array.
export function attentionRow(flat, H, T, l, h, t) {
  const start = ((l * H + h) * T + t) * T;
  return Array.from(flat.subarray(start, start + T));
}

// Index of the largest entry (the first one on ties).
export function argmax(xs) {
  let best = 0;
  for (let i = 1; i < xs.length; i++) if (xs[i] > xs[best]) best = i;
  return best;
}

const show = (tok) => JSON.stringify(tok); // quotes make spaces and newlines visible

// Horizontal bars, one per label, values in [0, vMax].
function bars(cv, labels, values, vMax, title) {
  const ctx = cv.getContext("2d"), W = cv.width, rowH = 18, left = 110;
  cv.height = 24 + rowH * labels.length;
  ctx.clearRect(0, 0, W, cv.height);
  ctx.font = "12px sans-serif";
  ctx.fillStyle = "#000";
  ctx.fillText(title, 4, 14);
  labels.forEach((lab, i) => {
    const y = 22 + i * rowH, v = values[i], w = Math.max(0, (W - left - 60) * Math.abs(v) / (vMax || 1));
    ctx.fillStyle = "#000";
    ctx.fillText(lab.length > 14 ? lab.slice(0, 13) + "…" : lab, 4, y + 12);
    ctx.fillStyle = v < 0 ? "#d62728" : "#1f77b4";
    ctx.fillRect(left, y + 2, w, rowH - 5);
    ctx.fillStyle = "#000";
    ctx.fillText(fmt(v, 3), left + w + 4, y + 12);
  });
}

export default {
  render({ model, el }) {
    const get = (k) => model.get(k);
    const tokens = get("tokens"), ids = get("ids"), T = tokens.length;
    const L = get("n_layers"), H = get("n_heads"), D = get("d_model"), nd = get("n_dims"), k = get("top_k");
    const embNorm = decodeFloat32(get("emb_norm")), embDims = decodeFloat32(get("emb_dims"));
    const att = decodeFloat32(get("attention")), aNorm = decodeFloat32(get("attn_norm"));
    const fNorm = decodeFloat32(get("ffn_norm")), topLogits = decodeFloat32(get("top_logits"));
    const lse = decodeFloat32(get("logsumexp")), topTokens = get("top_tokens"), topIds = get("top_ids");

    const root = figureRoot(el, "token-flow");
    const pos = select(tokens.map((t, i) => `${i}: ${show(t)}`), get("position"));
    const layer = select(Array.from({ length: L }, (_, i) => `layer ${i + 1}`), get("layer"));
    const head = select(Array.from({ length: H }, (_, i) => `head ${i + 1}`), get("head"));
    const stage = select(STAGES, STAGES.indexOf(get("stage")));
    const flow = h("div", { class: "tl-flow", style: "font-family:monospace;font-size:90%;margin:0.4em 0" });
    const cv = h("canvas", { width: "460", height: "120", role: "img", "aria-label": "the selected stage" });
    const out = readout();
    root.append(h("div", {}, [labelled("token", pos), labelled("stage", stage), labelled("layer", layer),
                              labelled("head", head)]), flow, cv, out);

    function draw() {
      const t = Number(pos.value), l = Number(layer.value), hd = Number(head.value), s = STAGES[stage.selectedIndex];
      const row = attentionRow(att, H, T, l, hd, t), j = argmax(row);
      const p = nextTokenProbs(topLogits.subarray(t * k, (t + 1) * k), lse[t]);
      const an = aNorm[l * T + t], fn = fNorm[l * T + t];
      flow.textContent = `${show(tokens[t])} → id ${ids[t]} → |x| = ${fmt(embNorm[t], 2)} → ` +
        `layer ${l + 1} head ${hd + 1} looks most at ${show(tokens[j])} (${fmt(row[j], 2)}) → ` +
        `FFN adds |f| = ${fmt(fn, 2)} → next: ${show(topTokens[t][0])} (${fmt(p[0], 3)})`;
      let text;
      if (s === "ids") {
        bars(cv, tokens.map(show), ids, Math.max(...ids), "token ids of the prompt");
        text = `Position ${t} holds token ${show(tokens[t])}, id ${ids[t]}: the row of the embedding table to read.`;
      } else if (s === "embedding") {
        const v = Array.from(embDims.subarray(t * nd, (t + 1) * nd));
        bars(cv, v.map((_, i) => `x[${i}]`), v, Math.max(...v.map(Math.abs)), `first ${nd} of ${D} entries`);
        text = `Embedding of ${show(tokens[t])}: a vector of ${D} numbers with norm ${fmt(embNorm[t], 3)}.`;
      } else if (s === "attention") {
        bars(cv, tokens.map(show), row, 1, `attention weights of position ${t}, layer ${l + 1}, head ${hd + 1}`);
        text = `Position ${t} can see positions 0..${t}; the weights sum to 1. Largest: ${show(tokens[j])} ` +
          `(${fmt(row[j], 3)}). Attention adds a vector of norm ${fmt(an, 3)} to the token's vector.`;
      } else if (s === "feed-forward") {
        const norms = [], labels = [];
        for (let m = 0; m < L; m++) {
          norms.push(aNorm[m * T + t], fNorm[m * T + t]);
          labels.push(`attn ${m + 1}`, `FFN ${m + 1}`);
        }
        bars(cv, labels, norms, Math.max(...norms), `norm of what each sub-layer adds at position ${t}`);
        text = `Layer ${l + 1}'s feed-forward adds a vector of norm ${fmt(fn, 3)} at position ${t}.`;
      } else {
        bars(cv, topTokens[t].map(show), p, 1, `next-token probabilities after ${show(tokens[t])}`);
        text = `Most likely next token: ${show(topTokens[t][0])} (id ${topIds[t][0]}) with probability ` +
          `${fmt(p[0], 3)}; the top ${k} together hold ${fmt(p.reduce((a, b) => a + b, 0), 3)}.`;
      }
      out.textContent = text;
    }
    // What the controls show, written back to the traits on every change (commit); a change made in
    // Python moves the control and redraws (follow).
    const state = {};
    const fromControls = () => Object.assign(state, { position: Number(pos.value), layer: Number(layer.value),
                                                      head: Number(head.value), stage: STAGES[stage.selectedIndex] });
    fromControls();
    for (const c of [pos, layer, head, stage]) {
      c.addEventListener("change", () => { fromControls(); commit(model, { ...state }); draw(); });
    }
    follow(model, { position: "position", layer: "layer", head: "head", stage: "stage" }, state, () => {
      pos.value = String(state.position); layer.value = String(state.layer); head.value = String(state.head);
      stage.selectedIndex = STAGES.indexOf(state.stage);
      draw();
    });
    draw();
    hideFallback(model);
  },
};
