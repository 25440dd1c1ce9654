// Chapter 04: the sinusoidal table of "Attention Is All You Need" (section 3.5), computed in the browser
// for any d_model and position, the dot product of two positions' vectors, and a RoPE rotation.

import { commit, decodeFloat32, dot, figureRoot, fmt, follow, h, hideFallback, labelled, readout, slider, strings,
         viridis } from "./common.js";

// Every word the two figures write, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    tableLabel: "the sinusoidal table: positions down, dimensions across",
    clocksLabel: "each pair of the chosen position's vector as a clock hand",
    curveLabel: "dot product of the chosen position with every position",
    tableHint: "Point at the table to read PE[pos, i].",
    position: "position",
    other: "second position",
    tableTitle: (last, lastDim, p, p2) =>
      `PE[pos, i] for pos 0..${last} (rows) and i 0..${lastDim} (columns); red: position ${p}, white: ${p2}`,
    clocksTitle: (pos) => `PE[${pos}]: pair k = (dim 2k, dim 2k+1) as a hand at angle ${pos} · ω_k`,
    pair: (k) => `pair ${k}`,
    curveTitle: (p, half) => `PE[${p}] · PE[pos] against pos (maximum d_model / 2 = ${half} at pos = ${p})`,
    dots: (d, p, p2, between, self) =>
      `d_model = ${d}: PE[${p}] · PE[${p2}] = ${between} (= sum over pairs of cos((${p} - ${p2}) ω_k), so it ` +
      `depends only on the offset ${p - p2}); PE[${p}] · PE[${p}] = ${self}.`,
    ropeLabel: "each pair of q and k as a rotated arrow",
    m: "query position m",
    n: "key position n",
    score: (m, n, score) => `RoPE(q, ${m}) · RoPE(k, ${n}) = ${score}; offset m - n = ${m - n}. ` +
      "Moving both positions by the same amount leaves the score unchanged (blue: q, orange: k).",
  },
  zh: {
    tableLabel: "正弦位置编码表：位置向下，维度向右",
    clocksLabel: "所选位置的向量中的每一对，画成一根钟表指针",
    curveLabel: "所选位置与每个位置的点积",
    tableHint: "指向表格可读出 PE[pos, i]。",
    position: "位置",
    other: "第二个位置",
    tableTitle: (last, lastDim, p, p2) =>
      `PE[pos, i]，pos 0..${last}（行），i 0..${lastDim}（列）；红色：位置 ${p}，白色：位置 ${p2}`,
    clocksTitle: (pos) => `PE[${pos}]：第 k 对 = (维度 2k, 维度 2k+1)，画成角度为 ${pos} · ω_k 的指针`,
    pair: (k) => `第 ${k} 对`,
    curveTitle: (p, half) => `PE[${p}] · PE[pos] 随 pos 的变化（在 pos = ${p} 处取最大值 d_model / 2 = ${half}）`,
    dots: (d, p, p2, between, self) =>
      `d_model = ${d}：PE[${p}] · PE[${p2}] = ${between}（= 对每一对求 cos((${p} - ${p2}) ω_k) 之和，所以它只取决于` +
      `偏移 ${p - p2}）；PE[${p}] · PE[${p}] = ${self}。`,
    ropeLabel: "q 和 k 的每一对，画成一根旋转后的箭头",
    m: "查询位置 m",
    n: "键位置 n",
    score: (m, n, score) => `RoPE(q, ${m}) · RoPE(k, ${n}) = ${score}；偏移 m - n = ${m - n}。` +
      "把两个位置移动相同的量，分数不变（蓝色：q，橙色：k）。",
  },
};

// PE[pos, i]: pair k = floor(i / 2) turns at omega_k = base^(-2k / d);
// even i holds sin(pos * omega_k), odd i holds cos(pos * omega_k)  (positional.sinusoidal_table).
export function sinusoid(pos, i, d, base = 10000) {
  const omega = Math.pow(base, -(2 * Math.floor(i / 2)) / d);
  return i % 2 === 0 ? Math.sin(pos * omega) : Math.cos(pos * omega);
}

// One row PE[pos] of the (max_len, d) table.
export function sinusoidalRow(pos, d, base = 10000) {
  return Array.from({ length: d }, (_, i) => sinusoid(pos, i, d, base));
}

// RoPE: rotate each pair (x[2k], x[2k+1]) by the angle pos * theta_k, theta_k = base^(-2k / d)
// (positional.RotaryEmbedding): (x1 cos - x2 sin, x1 sin + x2 cos).
export function ropeRotate(x, pos, base = 10000) {
  const d = x.length, out = new Array(d);
  for (let k = 0; k < d / 2; k++) {
    const a = pos * Math.pow(base, -(2 * k) / d);
    const [x1, x2] = [x[2 * k], x[2 * k + 1]];
    out[2 * k] = x1 * Math.cos(a) - x2 * Math.sin(a);
    out[2 * k + 1] = x1 * Math.sin(a) + x2 * Math.cos(a);
  }
  return out;
}

function canvas(w, hgt, label) {
  return h("canvas", { width: String(w), height: String(hgt), role: "img", "aria-label": label });
}

// Axes helper: plot y(x) values as a line in a box, with a zero line and a title.
function linePlot(cv, ys, title, yMin, yMax, mark = null) {
  const ctx = cv.getContext("2d"), W = cv.width, Hh = cv.height, pad = 28;
  ctx.clearRect(0, 0, W, Hh);
  ctx.font = "11px sans-serif";
  ctx.fillStyle = "#000";
  ctx.fillText(title, pad, 12);
  const X = (i) => pad + (i / Math.max(1, ys.length - 1)) * (W - pad - 6);
  const Y = (v) => 18 + (1 - (v - yMin) / (yMax - yMin)) * (Hh - 36);
  ctx.strokeStyle = "#999";
  ctx.strokeRect(pad, 18, W - pad - 6, Hh - 36);
  ctx.beginPath(); ctx.moveTo(pad, Y(0)); ctx.lineTo(W - 6, Y(0)); ctx.stroke();
  ctx.fillText(String(Math.round(yMax)), 2, 24);
  ctx.fillText(String(Math.round(yMin)), 2, Hh - 18);
  ctx.strokeStyle = "#1f77b4"; ctx.lineWidth = 1.5;
  ctx.beginPath();
  ys.forEach((v, i) => (i ? ctx.lineTo(X(i), Y(v)) : ctx.moveTo(X(i), Y(v))));
  ctx.stroke();
  if (mark !== null) { ctx.fillStyle = "#d62728"; ctx.fillRect(X(mark) - 2, Y(ys[mark]) - 2, 5, 5); }
  return { X, Y };
}

// Pair k of PE[pos] as a clock hand at angle pos * omega_k: its (x, y) is (cos, sin) = (PE[2k+1], PE[2k]).
// At most 16 clocks; for wider models, 16 pairs spread evenly from the fastest to the slowest.
function drawClocks(cv, row, pos, text) {
  const ctx = cv.getContext("2d"), pairs = row.length / 2, n = Math.min(16, pairs);
  ctx.clearRect(0, 0, cv.width, cv.height);
  ctx.font = "10px sans-serif";
  ctx.fillStyle = "#000";
  ctx.fillText(text.clocksTitle(pos), 2, 11);
  for (let c = 0; c < n; c++) {
    const k = n === 1 ? 0 : Math.round((c * (pairs - 1)) / (n - 1));
    const cx = 30 + 62 * (c % 8), cy = 44 + 64 * Math.floor(c / 8), R = 22;
    ctx.strokeStyle = "#bbb"; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.arc(cx, cy, R, 0, 2 * Math.PI); ctx.stroke();
    ctx.strokeStyle = "#d62728"; ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(cx, cy); ctx.lineTo(cx + R * row[2 * k + 1], cy - R * row[2 * k]); ctx.stroke();
    ctx.fillText(text.pair(k), cx - 16, cy + R + 11);
  }
}

function renderTable(model, el, text) {
  const maxD = model.get("max_d_model"), n = model.get("n_positions");
  const state = { d: model.get("d_model"), p: model.get("position"), p2: model.get("other") };
  const dBox = slider(2, maxD, 2, state.d), pBox = slider(0, n - 1, 1, state.p), p2Box = slider(0, n - 1, 1, state.p2);
  const dText = h("output", {}, [String(state.d)]), pText = h("output"), p2Text = h("output");
  const table = canvas(520, 260, text.tableLabel);
  const clocks = canvas(520, 156, text.clocksLabel);
  const curve = canvas(520, 150, text.curveLabel);
  const info = readout(), hover = readout(text.tableHint);
  el.append(h("div", {}, [labelled("d_model", dBox, dText), labelled(text.position, pBox, pText),
                           labelled(text.other, p2Box, p2Text)]), table, hover, clocks, curve, info);

  function draw() {
    const { d, p, p2 } = state;
    pText.textContent = String(p); p2Text.textContent = String(p2); dText.textContent = String(d);
    const ctx = table.getContext("2d"), cw = table.width / d, ch = (table.height - 20) / n;
    ctx.clearRect(0, 0, table.width, table.height);
    for (let pos = 0; pos < n; pos++) {
      for (let i = 0; i < d; i++) {
        ctx.fillStyle = viridis((sinusoid(pos, i, d) + 1) / 2); // -1 dark, +1 yellow
        ctx.fillRect(i * cw, 20 + pos * ch, Math.ceil(cw), Math.ceil(ch));
      }
    }
    ctx.strokeStyle = "#d62728"; ctx.lineWidth = 2;
    ctx.strokeRect(0, 20 + p * ch, table.width, Math.max(2, ch));
    ctx.strokeStyle = "#fff";
    ctx.strokeRect(0, 20 + p2 * ch, table.width, Math.max(2, ch));
    ctx.fillStyle = "#000"; ctx.font = "11px sans-serif";
    ctx.fillText(text.tableTitle(n - 1, d - 1, p, p2), 2, 12);
    const row = sinusoidalRow(p, d);
    drawClocks(clocks, row, p, text);
    const sims = Array.from({ length: n }, (_, q) => dot(row, sinusoidalRow(q, d)));
    linePlot(curve, sims, text.curveTitle(p, d / 2), -d / 2, d / 2, p);
    info.textContent = text.dots(d, p, p2, fmt(dot(row, sinusoidalRow(p2, d))), fmt(dot(row, row)));
  }
  table.addEventListener("mousemove", (e) => {
    const box = table.getBoundingClientRect();
    const i = Math.floor(((e.clientX - box.left) / box.width) * state.d);
    const pos = Math.floor((((e.clientY - box.top) / box.height) * table.height - 20) / ((table.height - 20) / n));
    if (pos >= 0 && pos < n && i >= 0 && i < state.d) {
      hover.textContent = `PE[${pos}, ${i}] = ${i % 2 ? "cos" : "sin"}(${pos} · ω_${Math.floor(i / 2)}) = ${fmt(sinusoid(pos, i, state.d))}`;
    }
  });
  dBox.addEventListener("input", () => { state.d = Number(dBox.value); commit(model, { d_model: state.d }); draw(); });
  pBox.addEventListener("input", () => { state.p = Number(pBox.value); commit(model, { position: state.p }); draw(); });
  p2Box.addEventListener("input", () => { state.p2 = Number(p2Box.value); commit(model, { other: state.p2 }); draw(); });
  follow(model, { d_model: "d", position: "p", other: "p2" }, state, () => {
    dBox.value = String(state.d); pBox.value = String(state.p); p2Box.value = String(state.p2); draw();
  });
  draw();
}

function renderRope(model, el, text) {
  const q = Array.from(decodeFloat32(model.get("q"))), k = Array.from(decodeFloat32(model.get("k")));
  const base = model.get("base"), maxPos = model.get("max_position"), d = q.length;
  const state = { m: model.get("m"), n: model.get("n") };
  const mBox = slider(0, maxPos, 1, state.m), nBox = slider(0, maxPos, 1, state.n);
  const mText = h("output"), nText = h("output");
  const clocks = canvas(Math.min(8, d / 2) * 64 + 8, Math.ceil(d / 16) * 76 + 8, text.ropeLabel);
  const info = readout();
  el.append(h("div", {}, [labelled(text.m, mBox, mText), labelled(text.n, nBox, nText)]),
            clocks, info);

  function draw() {
    const { m, n } = state;
    mText.textContent = String(m); nText.textContent = String(n);
    const qm = ropeRotate(q, m, base), kn = ropeRotate(k, n, base);
    const ctx = clocks.getContext("2d");
    ctx.clearRect(0, 0, clocks.width, clocks.height);
    ctx.font = "10px sans-serif";
    const r = Math.max(...q.map(Math.abs), ...k.map(Math.abs)) * Math.SQRT2;
    for (let p = 0; p < d / 2; p++) {
      const cx = 36 + 64 * (p % 8), cy = 34 + 76 * Math.floor(p / 8), R = 26;
      ctx.strokeStyle = "#bbb"; ctx.lineWidth = 1;
      ctx.beginPath(); ctx.arc(cx, cy, R, 0, 2 * Math.PI); ctx.stroke();
      for (const [v, colour] of [[qm, "#0072b2"], [kn, "#e69f00"]]) { // blue q, orange k (colour-blind safe)
        ctx.strokeStyle = colour; ctx.lineWidth = 2;
        ctx.beginPath(); ctx.moveTo(cx, cy);
        ctx.lineTo(cx + (R * v[2 * p]) / r, cy - (R * v[2 * p + 1]) / r); ctx.stroke();
      }
      ctx.fillStyle = "#000"; ctx.fillText(text.pair(p), cx - 16, cy + R + 12);
    }
    const score = dot(qm, kn);
    info.textContent = text.score(m, n, fmt(score));
  }
  mBox.addEventListener("input", () => { state.m = Number(mBox.value); commit(model, { m: state.m }); draw(); });
  nBox.addEventListener("input", () => { state.n = Number(nBox.value); commit(model, { n: state.n }); draw(); });
  follow(model, { m: "m", n: "n" }, state, () => { mBox.value = String(state.m); nBox.value = String(state.n); draw(); });
  draw();
}

function render({ model, el }) {
  const root = figureRoot(el, model.get("figure"));
  if (model.get("figure") === "rope") renderRope(model, root, strings(TEXT));
  else renderTable(model, root, strings(TEXT));
  hideFallback(model);
}

export default { render };
