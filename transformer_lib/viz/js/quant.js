// Chapter 09: absmax quantization of one weight row, computed in the browser.
// Each group of `groupSize` weights shares one scale s = max|w| / qmax with qmax = 2^(bits-1) - 1;
// a weight is stored as the code q = clamp(round(w / s), -qmax, qmax) and read back as q * s.
// Math.fround keeps each step in float32, as torch computes it (quant.quantize).

import { commit, decodeFloat32, figureRoot, fmt, follow, h, hideFallback, labelled, readout, roundHalfEven, select,
         slider } from "./common.js";

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

function drawHistogram(cv, w, grids, lim) {
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
  ctx.fillText("the row's weights; grid of the outlier's group (orange), of a typical group (blue)", pad, 11);
  ctx.fillText(fmt(-lim, 2), pad - 4, Hh - 6); ctx.fillText(fmt(lim, 2), W - 40, Hh - 6);
}

function drawErrors(cv, err, bound, outlierAt) {
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
  ctx.fillText(`error w - q·s per weight (blue), bound ±s/2 (orange); outlier: weight ${outlierAt}`, pad, 11);
  ctx.fillText(`±${lim.toExponential(1)}`, 0, 28); ctx.fillText("weight index →", W - 100, Hh - 4);
  return X;
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "quant");
  const row = Array.from(decodeFloat32(model.get("row")));
  const bitsOptions = model.get("bits_options"), groupOptions = model.get("group_options"); // 0 = whole row
  const state = { bits: model.get("bits"), group: model.get("group_size"), factor: model.get("outlier") };
  const bitsBox = select(bitsOptions.map((b) => `int${b}`), bitsOptions.indexOf(state.bits));
  const groupBox = select(groupOptions.map((g) => (g ? `groups of ${g}` : "one scale per row")),
                          groupOptions.indexOf(state.group));
  const outBox = slider(1, model.get("max_outlier"), 0.1, state.factor), outText = h("output");
  const hist = h("canvas", { width: "520", height: "170", role: "img", "aria-label": "histogram of the row and its grid" });
  const errs = h("canvas", { width: "520", height: "170", role: "img", "aria-label": "rounding error of every weight" });
  const info = readout(), hover = readout("Point at the error plot to read one weight.");
  el.append(h("div", {}, [labelled("bits", bitsBox), labelled("scale", groupBox),
                           labelled("outlier: largest weight ×", outBox), outText]), hist, errs, hover, info);
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
                            { s: typical, qmax, colour: "#0072b2", y: 34 }], lim);
    X = drawErrors(errs, err, bound, at);
    last = { w, codes, deq, err };
    info.textContent = `int${state.bits}, ${state.group ? `groups of ${state.group}` : "one scale per row"}: ` +
      `RMS error / RMS weight = ${fmt(100 * rms(err) / rms(w), 2)}%; ` +
      (state.group ? `step of the outlier's group ${scales[Math.floor(at / g)].toExponential(2)}, ` +
                     `of a typical group ${typical.toExponential(2)}.`
                   : `one step for the whole row, ${scales[0].toExponential(2)}.`);
  }
  errs.addEventListener("mousemove", (e) => {
    const box = errs.getBoundingClientRect(), x = (e.clientX - box.left) * (errs.width / box.width);
    const i = Math.round(((x - 30) / (errs.width - 38)) * last.w.length);
    if (i >= 0 && i < last.w.length) {
      hover.textContent = `weight ${i}: w = ${last.w[i].toExponential(3)}, code ${last.codes[i]}, ` +
        `read back ${last.deq[i].toExponential(3)}, error ${last.err[i].toExponential(2)}`;
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
