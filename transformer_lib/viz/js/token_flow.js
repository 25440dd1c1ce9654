// Chapter 00: follow one token through a GPT. Python (viz/token_flow.py) sends the numbers of one real
// forward pass; this module picks out the chosen position, layer, head and stage and computes what it shows.
// Layers and heads are numbered from 0, as in every chapter's code and figures.

import { commit, decodeFloat32, figureRoot, fmt, follow, h, hideFallback, labelled, readout, select,
         strings } from "./common.js";

export const STAGES = ["ids", "embedding", "attention", "feed-forward", "probabilities"]; // the trait `stage`

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    stages: STAGES, // what the stage menu shows, one name per entry of STAGES
    layerOption: (i) => `layer ${i}`,
    headOption: (i) => `head ${i}`,
    canvasLabel: "the selected stage",
    token: "token",
    stage: "stage",
    layer: "layer",
    head: "head",
    flow: (token, id, x, l, hd, seen, w, f, next, p) =>
      `${token} → id ${id} → |x| = ${x} → layer ${l} head ${hd} looks most at ${seen} (${w}) → ` +
      `FFN adds |f| = ${f} → next: ${next} (${p})`,
    idsTitle: "token ids of the prompt",
    ids: (t, token, id) => `Position ${t} holds token ${token}, id ${id}: the row of the embedding table to read.`,
    embeddingTitle: (nd, D) => `first ${nd} of ${D} entries`,
    embedding: (token, D, norm) => `Embedding of ${token}: a vector of ${D} numbers with norm ${norm}.`,
    attentionTitle: (t, l, hd) => `attention weights of position ${t}, layer ${l}, head ${hd}`,
    attention: (t, token, w, norm) => `Position ${t} can see positions 0..${t}; the weights sum to 1. Largest: ` +
      `${token} (${w}). Attention adds a vector of norm ${norm} to the token's vector.`,
    attentionBar: (l) => `attn ${l}`,
    ffnBar: (l) => `FFN ${l}`,
    ffnTitle: (t) => `norm of what each sub-layer adds at position ${t}`,
    ffn: (l, norm, t) => `Layer ${l}'s feed-forward adds a vector of norm ${norm} at position ${t}.`,
    probabilitiesTitle: (token) => `next-token probabilities after ${token}`,
    probabilities: (token, id, p, k, total) =>
      `Most likely next token: ${token} (id ${id}) with probability ${p}; the top ${k} together hold ${total}.`,
  },
  zh: {
    stages: ["词元 id", "嵌入", "注意力", "前馈", "概率"],
    layerOption: (i) => `第 ${i} 层`,
    headOption: (i) => `头 ${i}`,
    canvasLabel: "所选的阶段",
    token: "词元",
    stage: "阶段",
    layer: "层",
    head: "头",
    flow: (token, id, x, l, hd, seen, w, f, next, p) =>
      `${token} → id ${id} → |x| = ${x} → 第 ${l} 层的头 ${hd} 最关注 ${seen}（${w}）→ ` +
      `FFN 加上 |f| = ${f} → 下一个：${next}（${p}）`,
    idsTitle: "提示中各词元的 id",
    ids: (t, token, id) => `位置 ${t} 上是词元 ${token}，id 为 ${id}：要读取的是嵌入表的这一行。`,
    embeddingTitle: (nd, D) => `${D} 个分量中的前 ${nd} 个`,
    embedding: (token, D, norm) => `${token} 的嵌入：一个由 ${D} 个数组成的向量，范数为 ${norm}。`,
    attentionTitle: (t, l, hd) => `位置 ${t} 在第 ${l} 层、头 ${hd} 的注意力权重`,
    attention: (t, token, w, norm) => `位置 ${t} 能看到位置 0..${t}；权重之和为 1。最大的是 ` +
      `${token}（${w}）。注意力给这个词元的向量加上一个范数为 ${norm} 的向量。`,
    attentionBar: (l) => `注意力 ${l}`,
    ffnBar: (l) => `FFN ${l}`,
    ffnTitle: (t) => `位置 ${t} 上每个子层所加向量的范数`,
    ffn: (l, norm, t) => `第 ${l} 层的前馈在位置 ${t} 加上一个范数为 ${norm} 的向量。`,
    probabilitiesTitle: (token) => `${token} 之后下一个词元的概率`,
    probabilities: (token, id, p, k, total) =>
      `最可能的下一个词元：${token}（id ${id}），概率为 ${p}；前 ${k} 个合计 ${total}。`,
  },
};

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
    const text = strings(TEXT);
    const pos = select(tokens.map((t, i) => `${i}: ${show(t)}`), get("position"));
    const layer = select(Array.from({ length: L }, (_, i) => text.layerOption(i)), get("layer"));
    const head = select(Array.from({ length: H }, (_, i) => text.headOption(i)), get("head"));
    const stage = select(text.stages, STAGES.indexOf(get("stage")));
    const flow = h("div", { class: "tl-flow", style: "font-family:monospace;font-size:90%;margin:0.4em 0" });
    const cv = h("canvas", { width: "460", height: "120", role: "img", "aria-label": text.canvasLabel });
    const out = readout();
    root.append(h("div", {}, [labelled(text.token, pos), labelled(text.stage, stage), labelled(text.layer, layer),
                              labelled(text.head, head)]), flow, cv, out);

    function draw() {
      const t = Number(pos.value), l = Number(layer.value), hd = Number(head.value), s = STAGES[stage.selectedIndex];
      const row = attentionRow(att, H, T, l, hd, t), j = argmax(row);
      const p = nextTokenProbs(topLogits.subarray(t * k, (t + 1) * k), lse[t]);
      const an = aNorm[l * T + t], fn = fNorm[l * T + t];
      flow.textContent = text.flow(show(tokens[t]), ids[t], fmt(embNorm[t], 2), l, hd, show(tokens[j]),
                                   fmt(row[j], 2), fmt(fn, 2), show(topTokens[t][0]), fmt(p[0], 3));
      let said; // the readout: what this stage shows, in a sentence
      if (s === "ids") {
        bars(cv, tokens.map(show), ids, Math.max(...ids), text.idsTitle);
        said = text.ids(t, show(tokens[t]), ids[t]);
      } else if (s === "embedding") {
        const v = Array.from(embDims.subarray(t * nd, (t + 1) * nd));
        bars(cv, v.map((_, i) => `x[${i}]`), v, Math.max(...v.map(Math.abs)), text.embeddingTitle(nd, D));
        said = text.embedding(show(tokens[t]), D, fmt(embNorm[t], 3));
      } else if (s === "attention") {
        bars(cv, tokens.map(show), row, 1, text.attentionTitle(t, l, hd));
        said = text.attention(t, show(tokens[j]), fmt(row[j], 3), fmt(an, 3));
      } else if (s === "feed-forward") {
        const norms = [], labels = [];
        for (let m = 0; m < L; m++) {
          norms.push(aNorm[m * T + t], fNorm[m * T + t]);
          labels.push(text.attentionBar(m), text.ffnBar(m));
        }
        bars(cv, labels, norms, Math.max(...norms), text.ffnTitle(t));
        said = text.ffn(l, fmt(fn, 3), t);
      } else {
        bars(cv, topTokens[t].map(show), p, 1, text.probabilitiesTitle(show(tokens[t])));
        said = text.probabilities(show(topTokens[t][0]), topIds[t][0], fmt(p[0], 3), k,
                                  fmt(p.reduce((a, b) => a + b, 0), 3));
      }
      out.textContent = said;
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
