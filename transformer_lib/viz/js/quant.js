// Chapter 09: absmax quantization of one weight row, computed in the browser.
// Each group of `groupSize` weights shares one scale s = max|w| / qmax with qmax = 2^(bits-1) - 1;
// a weight is stored as the code q = clamp(round(w / s), -qmax, qmax) and read back as q * s.
// Math.fround keeps each step in float32, as torch computes it (quant.quantize).

import { commit, decodeFloat32, figureRoot, fmt, follow, h, hideFallback, labelled, readout, roundHalfEven, select,
         slider, strings } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    groups: (g) => `groups of ${g}`,
    perRow: "one scale per row",
    histLabel: "histogram of the row and its grid",
    errorsLabel: "rounding error of every weight",
    hint: "Point at the error plot to read one weight.",
    bits: "bits",
    scale: "scale",
    outlier: "outlier: largest weight ×",
    histTitle: "the row's weights; grid of the outlier's group (orange), of a typical group (blue)",
    errorsTitle: (at) => `error w - q·s per weight (blue), bound ±s/2 (orange); outlier: weight ${at}`,
    weightAxis: "weight index →",
    error: (bits, scales, relative) => `int${bits}, ${scales}: RMS error / RMS weight = ${relative}%; `,
    groupSteps: (outlierStep, typicalStep) => `step of the outlier's group ${outlierStep}, of a typical group ${typicalStep}.`,
    rowStep: (step) => `one step for the whole row, ${step}.`,
    weight: (i, w, code, back, error) => `weight ${i}: w = ${w}, code ${code}, read back ${back}, error ${error}`,
  },
  zh: {
    groups: (g) => `${g} 个一组`,
    perRow: "每行一个缩放因子",
    histLabel: "这一行的直方图及其网格",
    errorsLabel: "每个权重的舍入误差",
    hint: "指向误差图可读出一个权重。",
    bits: "位数",
    scale: "缩放因子",
    outlier: "离群值：最大权重 ×",
    histTitle: "这一行的权重；离群值所在组的网格（橙色），典型组的网格（蓝色）",
    errorsTitle: (at) => `每个权重的误差 w - q·s（蓝色），上界 ±s/2（橙色）；离群值：权重 ${at}`,
    weightAxis: "权重序号 →",
    error: (bits, scales, relative) => `int${bits}，${scales}：RMS 误差 / RMS 权重 = ${relative}%；`,
    groupSteps: (outlierStep, typicalStep) => `离群值所在组的步长为 ${outlierStep}，典型组的步长为 ${typicalStep}。`,
    rowStep: (step) => `整行一个步长：${step}。`,
    weight: (i, w, code, back, error) => `权重 ${i}：w = ${w}，编码 ${code}，还原为 ${back}，误差 ${error}`,
  },
};

export function quantizeGroups(w, bits, groupSize) {
  const qmax = 2 ** (bits - 1) - 1, n = w.length, g = groupSize || n;
  const codes = new Array(n), deq = new Array(n), scales = [];
  for (let start = 0; start < n; start += g) {
    let amax = 0;
    for (let i = start; i < start + g; i++) amax = Math.max(amax, Math.abs(w[i]));
    const s = amax > 0 ? Math.fround(amax / qmax) : 1; // a group of zeros gets scale 1
    scales.push(s);
    for (let i = start; i < start + g; i++) {
      codes[i] = Math.min(qmax, Math.max(-qmax, roundHalfEven(Math.fround(w[i] / s))));
      deq[i] = Math.fround(codes[i] * s);
    }
  }
  return { codes, deq, scales };
}

// The row with its largest |w| multiplied by `factor` (an outlier of adjustable size).
export function withOutlier(w, factor) {
  let at = 0;
  w.forEach((x, i) => { if (Math.abs(x) > Math.abs(w[at])) at = i; });
  const out = Array.from(w);
  out[at] = Math.fround(out[at] * factor);
  return { w: out, at };
}

function rms(xs) {
  return Math.sqrt(xs.reduce((a, x) => a + x * x, 0) / xs.length);
}

function drawHistogram(cv, w, grids, lim, title) {
  const ctx = cv.getContext("2d"), W = cv.width, Hh = cv.height, bins = 80, pad = 30;
  const counts = new Array(bins).fill(0);
  for (const x of w) counts[Math.min(bins - 1, Math.max(0, Math.floor(((x + lim) / (2 * lim)) * bins)))]++;
  const top = Math.max(...counts), X = (v) => pad + ((v + lim) / (2 * lim)) * (W - pad - 8);
  ctx.clearRect(0, 0, W, Hh);
  ctx.fillStyle = "#999";
  counts.forEach((c, b) => ctx.fillRect(X(-lim + (2 * lim * b) / bins), Hh - 20 - (c / top) * (Hh - 60),
                                        (W - pad - 8) / bins - 1, (c / top) * (Hh - 60)));
  grids.forEach(({ s, qmax, colour, y }) => { // one tick per representable value q * s
    ctx.strokeStyle = colour;
    for (let q = -qmax; q <= qmax; q++) {
      ctx.beginPath(); ctx.moveTo(X(q * s), y); ctx.lineTo(X(q * s), y + 10); ctx.stroke();
    }
  });
  ctx.fillStyle = "#000"; ctx.font = "11px sans-serif";
  ctx.fillText(title, pad, 11);
  ctx.fillText(fmt(-lim, 2), pad - 4, Hh - 6); ctx.fillText(fmt(lim, 2), W - 40, Hh - 6);
}

function drawErrors(cv, err, bound, outlierAt, text) {
  const ctx = cv.getContext("2d"), W = cv.width, Hh = cv.height, pad = 30, n = err.length;
  const lim = Math.max(...bound) * 1.1, X = (i) => pad + (i / n) * (W - pad - 8);
  const Y = (v) => 18 + (1 - (v + lim) / (2 * lim)) * (Hh - 36);
  ctx.clearRect(0, 0, W, Hh);
  ctx.strokeStyle = "#ccc"; ctx.strokeRect(pad, 18, W - pad - 8, Hh - 36);
  ctx.strokeStyle = "#d55e00"; // the bound +-s/2 of each weight's group
  for (const sign of [1, -1]) {
    ctx.beginPath();
    bound.forEach((b, i) => (i ? ctx.lineTo(X(i), Y(sign * b)) : ctx.moveTo(X(i), Y(sign * b))));
    ctx.stroke();
  }
  ctx.fillStyle = "#0072b2";
  err.forEach((e, i) => ctx.fillRect(X(i) - 1, Y(e) - 1, 2, 2));
  ctx.fillStyle = "#000"; ctx.font = "11px sans-serif";
  ctx.fillText(text.errorsTitle(outlierAt), pad, 11);
  ctx.fillText(`±${lim.toExponential(1)}`, 0, 28); ctx.fillText(text.weightAxis, W - 100, Hh - 4);
  return X;
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "quant");
  const text = strings(TEXT);
  const row = Array.from(decodeFloat32(model.get("row")));
  const bitsOptions = model.get("bits_options"), groupOptions = model.get("group_options"); // 0 = whole row
  const state = { bits: model.get("bits"), group: model.get("group_size"), factor: model.get("outlier") };
  const bitsBox = select(bitsOptions.map((b) => `int${b}`), bitsOptions.indexOf(state.bits));
  const groupBox = select(groupOptions.map((g) => (g ? text.groups(g) : text.perRow)),
                          groupOptions.indexOf(state.group));
  const outBox = slider(1, model.get("max_outlier"), 0.1, state.factor), outText = h("output");
  const hist = h("canvas", { width: "520", height: "170", role: "img", "aria-label": text.histLabel });
  const errs = h("canvas", { width: "520", height: "170", role: "img", "aria-label": text.errorsLabel });
  const info = readout(), hover = readout(text.hint);
  el.append(h("div", {}, [labelled(text.bits, bitsBox), labelled(text.scale, groupBox),
                           labelled(text.outlier, outBox, outText)]), hist, errs, hover, info);
  let X = null, last = null;

  function draw() {
    outText.textContent = fmt(state.factor, 1);
    const { w, at } = withOutlier(row, state.factor);
    const g = state.group || w.length, qmax = 2 ** (state.bits - 1) - 1;
    const { codes, deq, scales } = quantizeGroups(w, state.bits, state.group);
    const err = w.map((x, i) => x - deq[i]), bound = w.map((_, i) => scales[Math.floor(i / g)] / 2);
    const sorted = [...scales].sort((a, b) => a - b), typical = sorted[Math.floor(sorted.length / 2)];
    const lim = Math.max(...w.map(Math.abs)) * 1.05;
    drawHistogram(hist, w, [{ s: scales[Math.floor(at / g)], qmax, colour: "#e69f00", y: 22 },
                            { s: typical, qmax, colour: "#0072b2", y: 34 }], lim, text.histTitle);
    X = drawErrors(errs, err, bound, at, text);
    last = { w, codes, deq, err };
    info.textContent = text.error(state.bits, state.group ? text.groups(state.group) : text.perRow,
                                  fmt(100 * rms(err) / rms(w), 2)) +
      (state.group ? text.groupSteps(scales[Math.floor(at / g)].toExponential(2), typical.toExponential(2))
                   : text.rowStep(scales[0].toExponential(2)));
  }
  errs.addEventListener("mousemove", (e) => {
    const box = errs.getBoundingClientRect(), x = (e.clientX - box.left) * (errs.width / box.width);
    const i = Math.round(((x - 30) / (errs.width - 38)) * last.w.length);
    if (i >= 0 && i < last.w.length) {
      hover.textContent = text.weight(i, last.w[i].toExponential(3), last.codes[i], last.deq[i].toExponential(3),
                                      last.err[i].toExponential(2));
    }
  });
  bitsBox.addEventListener("change", () => {
    state.bits = bitsOptions[Number(bitsBox.value)]; commit(model, { bits: state.bits }); draw();
  });
  groupBox.addEventListener("change", () => {
    state.group = groupOptions[Number(groupBox.value)]; commit(model, { group_size: state.group }); draw();
  });
  outBox.addEventListener("input", () => { state.factor = Number(outBox.value); commit(model, { outlier: state.factor }); draw(); });
  follow(model, { bits: "bits", group_size: "group", outlier: "factor" }, state, () => {
    bitsBox.value = String(bitsOptions.indexOf(state.bits)); groupBox.value = String(groupOptions.indexOf(state.group));
    outBox.value = String(state.factor); draw();
  });
  draw();
  hideFallback(model);
}

export default { render };
