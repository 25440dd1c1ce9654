// Chapter 12: what LoRA's rank r costs in trained numbers, computed in the browser, beside the runs the chapter
// measured (its committed record). A rank-r adapter on a linear W of shape (out, in) trains A (r, in) and
// B (out, r): r * (in + out) numbers (Hu et al. 2021), against out * in in W itself (lora.lora_parameter_count
// sums it over the adapted linears). Adam keeps two float32 moments per trained number and one float32 step per
// trained tensor (lora.adam_state_bytes). Accuracy is drawn only where a run was measured: nothing is guessed.

import { commit, figureRoot, follow, h, hideFallback, labelled, readout, select, slider } from "./common.js";

// `linears`: rows [name, out, in, count] (count: how many layers have that linear); `chosen`: the names adapted.
function chosenRows(linears, chosen) {
  return linears.filter(([name]) => chosen.includes(name));
}

// sum over the adapted linears of r * (in + out)
export function adapterParams(rank, linears, chosen) {
  return chosenRows(linears, chosen).reduce((s, [, out, inn, count]) => s + count * rank * (inn + out), 0);
}

// the adapters and the head (`head`: the sizes of the head's tensors, weight and bias)
export function trainableParams(rank, linears, chosen, head) {
  return adapterParams(rank, linears, chosen) + head.reduce((a, b) => a + b, 0);
}

// Adam's state: 2 moments x 4 bytes per trained number, 4 bytes of `step` per trained tensor (A and B of each
// adapted linear, and the head's tensors)
export function adamBytes(rank, linears, chosen, head) {
  const tensors = 2 * chosenRows(linears, chosen).reduce((s, row) => s + row[3], 0) + head.length;
  return 8 * trainableParams(rank, linears, chosen, head) + 4 * tensors;
}

// the smallest rank at which an adapter holds at least as many numbers as its matrix: r (in + out) >= out * in
export function breakEvenRank(out, inn) {
  return Math.ceil((out * inn) / (out + inn));
}

// the smallest rank whose LoRA trains at least `params` numbers (Infinity if no rank does)
export function rankMatching(params, linears, chosen, head) {
  const perRank = adapterParams(1, linears, chosen), rest = params - trainableParams(0, linears, chosen, head);
  return perRank > 0 ? Math.max(1, Math.ceil(rest / perRank)) : Infinity;
}

export function mean(xs) {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

const count = (n) => Math.round(n).toLocaleString("en-US"); // 296,452, as Python's f"{n:,}"
const pct = (x) => (100 * x).toFixed(1);

// log10 axis ticks 10^a .. 10^b
function logTicks(ctx, a, b, place) {
  for (let e = a; e <= b; e++) place(e, `1e${e}`);
}

function drawCounts(cv, s, data) {
  const { linears, head, base, runs, maxRank } = data, chosen = data.targetSets[s.targets][1];
  const ctx = cv.getContext("2d"), W = cv.width, Hh = cv.height, left = 44, top = 18, bottom = 26;
  const lo = 3, hi = 8, X = (r) => left + ((r - 1) / (maxRank - 1)) * (W - left - 10);
  const Y = (n) => top + (1 - (Math.log10(Math.max(n, 10 ** lo)) - lo) / (hi - lo)) * (Hh - top - bottom);
  ctx.clearRect(0, 0, W, Hh);
  ctx.font = "11px sans-serif"; ctx.fillStyle = "#000"; ctx.strokeStyle = "#ccc";
  ctx.strokeRect(left, top, W - left - 10, Hh - top - bottom);
  logTicks(ctx, lo, hi, (e, text) => ctx.fillText(text, 4, Y(10 ** e) + 4));
  ctx.fillText("trained numbers (log scale) against LoRA's rank r", left, 11);
  ctx.fillText(`rank r → (1 to ${maxRank})`, W - 120, Hh - 6);
  const level = (n, colour, text) => {
    ctx.strokeStyle = colour; ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(left, Y(n)); ctx.lineTo(W - 10, Y(n)); ctx.stroke(); ctx.setLineDash([]);
    ctx.fillStyle = colour; ctx.fillText(text, left + 4, Y(n) - 3);
  };
  level(base, "#000", `all of ${data.baseName}: ${count(base)}`);
  runs.filter((run) => run[2] === 0).forEach((run) => level(run[1], "#d55e00", `${run[0]}: ${count(run[1])}`));
  ctx.strokeStyle = "#0072b2"; ctx.lineWidth = 2; ctx.beginPath();
  for (let r = 1; r <= maxRank; r++) {
    const y = Y(trainableParams(r, linears, chosen, head));
    if (r === 1) ctx.moveTo(X(r), y); else ctx.lineTo(X(r), y);
  }
  ctx.stroke(); ctx.lineWidth = 1;
  ctx.fillStyle = "#0072b2";
  ctx.beginPath(); ctx.arc(X(s.rank), Y(trainableParams(s.rank, linears, chosen, head)), 5, 0, 2 * Math.PI); ctx.fill();
  ctx.fillText(`LoRA, rank ${s.rank}`, Math.min(X(s.rank) + 8, W - 90), Y(trainableParams(s.rank, linears, chosen, head)) + 14);
}

function drawAccuracy(cv, s, data) {
  const { linears, head, runs } = data, chosen = data.targetSets[s.targets][1];
  const ctx = cv.getContext("2d"), W = cv.width, Hh = cv.height, left = 44, top = 18, bottom = 26;
  const accs = runs.flatMap((run) => run[4]), chance = data.chance;
  const yLo = Math.floor(100 * Math.min(chance, ...accs)) - 2, yHi = Math.ceil(100 * Math.max(...accs)) + 3;
  const lo = 3, hi = 8, X = (n) => left + ((Math.log10(n) - lo) / (hi - lo)) * (W - left - 10);
  const Y = (a) => top + (1 - (100 * a - yLo) / (yHi - yLo)) * (Hh - top - bottom);
  ctx.clearRect(0, 0, W, Hh);
  ctx.font = "11px sans-serif"; ctx.fillStyle = "#000"; ctx.strokeStyle = "#ccc";
  ctx.strokeRect(left, top, W - left - 10, Hh - top - bottom);
  ctx.fillText("held-out accuracy (%) of the measured runs, one dot per seed, against trained numbers", left, 11);
  for (let a = Math.ceil(yLo / 5) * 5; a <= yHi; a += 5) ctx.fillText(`${a}%`, 6, Y(a / 100) + 4);
  logTicks(ctx, lo, hi, (e, text) => ctx.fillText(text, X(10 ** e) - 10, Hh - 8));
  ctx.strokeStyle = "#999"; ctx.setLineDash([2, 3]);
  ctx.beginPath(); ctx.moveTo(left, Y(chance)); ctx.lineTo(W - 10, Y(chance)); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = "#999"; ctx.fillText("chance", W - 56, Y(chance) - 3);
  const n = trainableParams(s.rank, linears, chosen, head); // where the reader's rank falls
  ctx.strokeStyle = "#0072b2"; ctx.beginPath(); ctx.moveTo(X(n), top); ctx.lineTo(X(n), Hh - bottom); ctx.stroke();
  runs.forEach(([name, trained, , , values], i) => {
    ctx.fillStyle = i % 2 ? "#009e73" : "#cc79a7";
    values.forEach((a) => { ctx.beginPath(); ctx.arc(X(trained), Y(a), 3.5, 0, 2 * Math.PI); ctx.fill(); });
    ctx.fillRect(X(trained) - 9, Y(mean(values)) - 1, 18, 2);
    ctx.fillText(name, X(trained) + 6, Y(mean(values)) + (i % 2 ? 14 : -6));
  });
}

function describe(s, data) {
  const { linears, head, base, runs, maxRank, targetSets } = data, [label, chosen] = targetSets[s.targets];
  const adapters = adapterParams(s.rank, linears, chosen), trained = trainableParams(s.rank, linears, chosen, head);
  const lines = [`Rank ${s.rank} on ${label}: ${count(adapters)} adapter numbers + ${count(trained - adapters)} in the ` +
                 `head = ${count(trained)} trainable, ${pct(trained / base)}% of ${data.baseName}'s ${count(base)}; ` +
                 `Adam keeps ${count(adamBytes(s.rank, linears, chosen, head))} bytes for them.`];
  for (const [name, params] of runs.filter((run) => run[2] === 0 && run[1] > trained - adapters)) {
    const r = rankMatching(params, linears, chosen, head);
    lines.push(r <= maxRank ? `LoRA on these linears trains as many numbers as ${name} (${count(params)}) from rank ${r}.`
                            : `Up to rank ${maxRank}, LoRA on these linears trains fewer numbers than ${name}.`);
  }
  const [name, out, inn] = chosenRows(linears, chosen).reduce((a, b) => (breakEvenRank(b[1], b[2]) < breakEvenRank(a[1], a[2]) ? b : a));
  lines.push(`From rank ${breakEvenRank(out, inn)} an adapter on ${name} (${out} × ${inn}) holds as many numbers as the matrix itself.`);
  const here = runs.filter((run) => run[2] === s.rank && run[3] === s.targets);
  lines.push(here.length ? "Measured at this rank: " + here.map(([n, , , , v]) => `${n} ${v.map(pct).join(", ")}% ` +
                                                                  `(mean ${pct(mean(v))}%)`).join("; ") + "."
    : `No run was measured at rank ${s.rank} on these linears, so no accuracy is shown for it (the measured LoRA runs: ` +
      runs.filter((run) => run[2] > 0).map((run) => `${run[0]} at rank ${run[2]} on ${targetSets[run[3]][0]}`).join(", ") + ").");
  return lines;
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "lora");
  const data = { linears: model.get("linears"), targetSets: model.get("target_sets"), head: model.get("head"),
                 base: model.get("base_params"), runs: model.get("runs"), maxRank: model.get("max_rank"),
                 chance: model.get("chance"), baseName: model.get("base_name") };
  const s = { rank: model.get("rank"), targets: model.get("target_set") };
  const rankBox = slider(1, data.maxRank, 1, s.rank), rankText = h("output");
  const targetBox = select(data.targetSets.map(([label]) => label), s.targets);
  const counts = h("canvas", { width: "560", height: "190", role: "img", "aria-label": "trained numbers against rank" });
  const accuracy = h("canvas", { width: "560", height: "190", role: "img",
                                 "aria-label": "measured accuracy against trained numbers" });
  const info = readout();
  el.append(h("div", {}, [labelled("rank r", rankBox), rankText, labelled("adapted linears", targetBox)]),
            counts, accuracy, info);

  function draw() {
    rankBox.value = String(s.rank); targetBox.value = String(s.targets); rankText.textContent = String(s.rank);
    drawCounts(counts, s, data);
    drawAccuracy(accuracy, s, data);
    info.replaceChildren(...describe(s, data).map((line) => h("div", {}, [line])));
  }
  rankBox.addEventListener("input", () => { s.rank = Number(rankBox.value); commit(model, { rank: s.rank }); draw(); });
  targetBox.addEventListener("change", () => {
    s.targets = Number(targetBox.value); commit(model, { target_set: s.targets }); draw();
  });
  follow(model, { rank: "rank", target_set: "targets" }, s, draw);
  draw();
  hideFallback(model);
}

export default { render };
