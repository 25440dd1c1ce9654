// Chapter 10: the online softmax of one block of queries, tile by tile, computed in the browser.
// For each tile of keys j0..j1 and each query row i (Milakov & Gimelshein 2018; FlashAttention-2's loop):
//   s_ij = q_i . k_j / sqrt(d)                       the tile's scores
//   m'_i = max(m_i, max_j s_ij)                       the running maximum
//   l_i  = exp(m_i - m'_i) l_i + sum_j exp(s_ij - m'_i)        the running sum
//   o_i  = exp(m_i - m'_i) o_i + sum_j exp(s_ij - m'_i) v_j    the running (unnormalised) output
// and after the last tile the output is o_i / l_i = softmax(s_i) V (flash.trace_one_query_block is the Python twin).

import { commit, decodeFloat32, figureRoot, fmt, follow, h, hideFallback, labelled, readout, select, slider,
         strings, viridis } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    keys: (b) => `${b} keys`,
    query: (i) => `query ${i}`,
    mapLabel: "score matrix of one query block, tiles folded in so far",
    tileSize: "tile size",
    showRow: "show numbers of",
    tilesDone: "tiles folded in",
    stepOf: (step, n) => ` ${step} of ${n}`,
    legend: (last, j0, j1) => `keys 0..${last}: coloured = folded in, red box = the tile of this step (keys ${j0}..${j1})`,
    state: (step, r, m, l, out) => `after ${step} tile(s), query ${r}: running max m = ${m}, running sum l = ${l}, ` +
      `output o / l = [${out}]`,
    done: " = softmax(s) V (every key seen)",
  },
  zh: {
    keys: (b) => `${b} 个键`,
    query: (i) => `查询 ${i}`,
    mapLabel: "一个查询块的分数矩阵，已计入的分块着色",
    tileSize: "分块大小",
    showRow: "显示数值",
    tilesDone: "已计入的分块",
    stepOf: (step, n) => ` ${step} / ${n}`,
    legend: (last, j0, j1) => `键 0..${last}：着色 = 已计入，红框 = 本步的分块（键 ${j0}..${j1}）`,
    state: (step, r, m, l, out) => `计入 ${step} 个分块后，查询 ${r}：运行最大值 m = ${m}，运行和 l = ${l}，` +
      `输出 o / l = [${out}]`,
    done: " = softmax(s) V（所有键都已计入）",
  },
};

export function tileScores(q, k, bq, d, j0, j1) {
  const s = [];
  for (let i = 0; i < bq; i++) {
    const row = [];
    for (let j = j0; j < j1; j++) {
      let acc = 0;
      for (let c = 0; c < d; c++) acc += q[i * d + c] * k[j * d + c];
      row.push(acc / Math.sqrt(d));
    }
    s.push(row);
  }
  return s;
}

// Every step of the sweep: [{j0, j1, scores, m, l, out}], out = o / l after that tile.
export function onlineSoftmaxSteps(q, k, v, bq, tk, d, dv, blockK) {
  const m = new Array(bq).fill(-Infinity), l = new Array(bq).fill(0);
  const o = Array.from({ length: bq }, () => new Array(dv).fill(0));
  const steps = [];
  for (let j0 = 0; j0 < tk; j0 += blockK) {
    const j1 = Math.min(j0 + blockK, tk);
    const s = tileScores(q, k, bq, d, j0, j1);
    for (let i = 0; i < bq; i++) {
      const mNew = Math.max(m[i], ...s[i]);
      const alpha = Math.exp(m[i] - mNew); // rescales what came before to the new maximum
      const p = s[i].map((x) => Math.exp(x - mNew));
      l[i] = alpha * l[i] + p.reduce((a, b) => a + b, 0);
      for (let c = 0; c < dv; c++) {
        let acc = 0;
        for (let j = j0; j < j1; j++) acc += p[j - j0] * v[j * dv + c];
        o[i][c] = alpha * o[i][c] + acc;
      }
      m[i] = mNew;
    }
    steps.push({ j0, j1, scores: s, m: [...m], l: [...l], out: o.map((row, i) => row.map((x) => x / l[i])) });
  }
  return steps;
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "flash");
  const text = strings(TEXT);
  const bq = model.get("bq"), tk = model.get("t_k"), d = model.get("d"), dv = model.get("d_v");
  const q = decodeFloat32(model.get("q")), k = decodeFloat32(model.get("k")), v = decodeFloat32(model.get("v"));
  const blocks = model.get("block_options");
  const s = { block: Math.max(0, blocks.indexOf(model.get("block_k"))), step: 1, row: 0 };
  const blockBox = select(blocks.map(text.keys), s.block);
  const rowBox = select(Array.from({ length: bq }, (_, i) => text.query(i)), 0);
  const stepBox = slider(1, 1, 1, 1), stepText = h("output");
  const canvas = h("canvas", { width: "560", height: String(40 + 26 * bq), role: "img",
    "aria-label": text.mapLabel });
  const info = readout();
  el.append(h("div", {}, [labelled(text.tileSize, blockBox), labelled(text.showRow, rowBox),
                          labelled(text.tilesDone, stepBox, stepText)]), canvas, info);
  let steps = [];
  const all = tileScores(q, k, bq, d, 0, tk).flat(), lo = Math.min(...all), hi = Math.max(...all);

  function recompute() {
    steps = onlineSoftmaxSteps(q, k, v, bq, tk, d, dv, blocks[s.block]);
    stepBox.max = String(steps.length);
    s.step = Math.min(Math.max(1, s.step), steps.length);
  }
  function draw() {
    stepBox.value = String(s.step);
    stepText.textContent = text.stepOf(s.step, steps.length);
    const ctx = canvas.getContext("2d"), W = canvas.width, x0 = 60, cw = (W - x0 - 10) / tk, ch = 26;
    ctx.clearRect(0, 0, W, canvas.height);
    const cur = steps[s.step - 1];
    for (let i = 0; i < bq; i++) {
      for (let j = 0; j < tk; j++) {
        const seen = j < cur.j1;
        ctx.fillStyle = seen ? viridis((all[i * tk + j] - lo) / (hi - lo || 1)) : "#e5e5e5";
        ctx.fillRect(x0 + j * cw, 20 + i * ch, Math.max(1, cw - 1), ch - 2);
      }
      ctx.fillStyle = "#000"; ctx.font = "11px sans-serif";
      ctx.fillText(`q ${i}`, 4, 20 + i * ch + 16);
    }
    ctx.strokeStyle = "#d62728"; ctx.lineWidth = 2;
    ctx.strokeRect(x0 + cur.j0 * cw, 18, (cur.j1 - cur.j0) * cw, bq * ch + 2);
    ctx.fillStyle = "#000";
    ctx.fillText(text.legend(tk - 1, cur.j0, cur.j1 - 1), x0, 12);
    const r = s.row;
    const out = cur.out[r].slice(0, 4).map((x) => fmt(x)).join(", ") + (dv > 4 ? ", ..." : "");
    info.textContent = text.state(s.step, r, fmt(cur.m[r]), fmt(cur.l[r]), out) + (s.step === steps.length ? text.done : "");
  }
  blockBox.addEventListener("change", () => {
    s.block = Number(blockBox.value); s.blockK = blocks[s.block]; commit(model, { block_k: s.blockK }); recompute(); draw();
  });
  rowBox.addEventListener("change", () => { s.row = Number(rowBox.value); draw(); });
  stepBox.addEventListener("input", () => { s.step = Number(stepBox.value); draw(); });
  s.blockK = blocks[s.block];
  follow(model, { block_k: "blockK" }, s, () => {
    s.block = Math.max(0, blocks.indexOf(s.blockK)); blockBox.value = String(s.block); recompute(); draw();
  });
  recompute();
  draw();
  hideFallback(model);
}

export default { render };
