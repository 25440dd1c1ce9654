// Chapter 12: what LoRA's rank r costs in trained numbers, computed in the browser, beside the runs the chapter
// measured (its committed record). A rank-r adapter on a linear W of shape (out, in) trains A (r, in) and
// B (out, r): r * (in + out) numbers (Hu et al. 2021), against out * in in W itself (lora.lora_parameter_count
// sums it over the adapted linears). Adam keeps two float32 moments per trained number and one float32 step per
// trained tensor (lora.adam_state_bytes). Accuracy is drawn only where a run was measured: nothing is guessed.

import { commit, figureRoot, follow, h, hideFallback, labelled, readout, select, slider, strings } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    rank: "rank r",
    targets: "adapted linears",
    countsLabel: "trained numbers against rank",
    accuracyLabel: "measured accuracy against trained numbers",
    countsTitle: "trained numbers (log scale) against LoRA's rank r",
    rankAxis: (maxRank) => `rank r → (1 to ${maxRank})`,
    whole: (name, n) => `all of ${name}: ${n}`,
    point: (rank) => `LoRA, rank ${rank}`,
    accuracyTitle: "held-out accuracy (%) of the measured runs, one dot per seed, against trained numbers",
    chance: "chance",
    summary: (rank, label, adapters, inHead, trained, share, baseName, base, adam) =>
      `Rank ${rank} on ${label}: ${adapters} adapter numbers + ${inHead} in the head = ${trained} trainable, ` +
      `${share}% of ${baseName}'s ${base}; Adam keeps ${adam} bytes for them.`,
    matches: (name, params, r) => `LoRA on these linears trains as many numbers as ${name} (${params}) from rank ${r}.`,
    neverMatches: (maxRank, name) => `Up to rank ${maxRank}, LoRA on these linears trains fewer numbers than ${name}.`,
    breakEven: (r, name, out, inn) =>
      `From rank ${r} an adapter on ${name} (${out} × ${inn}) holds as many numbers as the matrix itself.`,
    measured: (runs) => `Measured at this rank: ${runs.join("; ")}.`,
    measuredRun: (name, values, mean) => `${name} ${values}% (mean ${mean}%)`,
    notMeasured: (rank, runs) =>
      `No run was measured at rank ${rank} on these linears, so no accuracy is shown for it (the measured LoRA runs: ` +
      `${runs.join(", ")}).`,
    runAt: (name, rank, label) => `${name} at rank ${rank} on ${label}`,
  },
  zh: {
    rank: "秩 r",
    targets: "适配的线性层",
    countsLabel: "训练的数量随秩的变化",
    accuracyLabel: "测得的准确率随训练的数量的变化",
    countsTitle: "训练的数量（对数刻度）随 LoRA 的秩 r 的变化",
    rankAxis: (maxRank) => `秩 r →（1 到 ${maxRank}）`,
    whole: (name, n) => `整个 ${name}：${n}`,
    point: (rank) => `LoRA，秩 ${rank}`,
    accuracyTitle: "已测量运行的留出准确率（%）随训练的数量的变化，每个种子一个点",
    chance: "随机猜测",
    summary: (rank, label, adapters, inHead, trained, share, baseName, base, adam) =>
      `秩 ${rank}，适配 ${label}：适配器的 ${adapters} 个数 + 头中的 ${inHead} 个 = ${trained} 个可训练的数，` +
      `占 ${baseName} 全部 ${base} 个的 ${share}%；Adam 为它们保存 ${adam} 字节。`,
    matches: (name, params, r) => `从秩 ${r} 起，这些线性层上的 LoRA 训练的数和 ${name} 一样多（${params}）。`,
    neverMatches: (maxRank, name) => `直到秩 ${maxRank}，这些线性层上的 LoRA 训练的数都比 ${name} 少。`,
    breakEven: (r, name, out, inn) => `从秩 ${r} 起，${name}（${out} × ${inn}）上的适配器所含的数就和矩阵本身一样多。`,
    measured: (runs) => `在这个秩上测得：${runs.join("；")}。`,
    measuredRun: (name, values, mean) => `${name} ${values}%（平均 ${mean}%）`,
    notMeasured: (rank, runs) =>
      `在这些线性层上没有以秩 ${rank} 测量过的运行，所以这里不显示准确率（已测量的 LoRA 运行：${runs.join("；")}）。`,
    runAt: (name, rank, label) => `${name}，秩 ${rank}，适配 ${label}`,
  },
};

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
  ctx.fillText(data.text.countsTitle, left, 11);
  ctx.fillText(data.text.rankAxis(maxRank), W - 120, Hh - 6);
  const level = (n, colour, text) => {
    ctx.strokeStyle = colour; ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(left, Y(n)); ctx.lineTo(W - 10, Y(n)); ctx.stroke(); ctx.setLineDash([]);
    ctx.fillStyle = colour; ctx.fillText(text, left + 4, Y(n) - 3);
  };
  level(base, "#000", data.text.whole(data.baseName, count(base)));
  runs.filter((run) => run[2] === 0).forEach((run) => level(run[1], "#d55e00", `${run[0]}: ${count(run[1])}`));
  ctx.strokeStyle = "#0072b2"; ctx.lineWidth = 2; ctx.beginPath();
  for (let r = 1; r <= maxRank; r++) {
    const y = Y(trainableParams(r, linears, chosen, head));
    if (r === 1) ctx.moveTo(X(r), y); else ctx.lineTo(X(r), y);
  }
  ctx.stroke(); ctx.lineWidth = 1;
  ctx.fillStyle = "#0072b2";
  ctx.beginPath(); ctx.arc(X(s.rank), Y(trainableParams(s.rank, linears, chosen, head)), 5, 0, 2 * Math.PI); ctx.fill();
  ctx.fillText(data.text.point(s.rank), Math.min(X(s.rank) + 8, W - 90), Y(trainableParams(s.rank, linears, chosen, head)) + 14);
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
  ctx.fillText(data.text.accuracyTitle, left, 11);
  for (let a = Math.ceil(yLo / 5) * 5; a <= yHi; a += 5) ctx.fillText(`${a}%`, 6, Y(a / 100) + 4);
  logTicks(ctx, lo, hi, (e, text) => ctx.fillText(text, X(10 ** e) - 10, Hh - 8));
  ctx.strokeStyle = "#999"; ctx.setLineDash([2, 3]);
  ctx.beginPath(); ctx.moveTo(left, Y(chance)); ctx.lineTo(W - 10, Y(chance)); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = "#999"; ctx.fillText(data.text.chance, W - 56, Y(chance) - 3);
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
  const { linears, head, base, runs, maxRank, targetSets, text } = data, [label, chosen] = targetSets[s.targets];
  const adapters = adapterParams(s.rank, linears, chosen), trained = trainableParams(s.rank, linears, chosen, head);
  const lines = [text.summary(s.rank, label, count(adapters), count(trained - adapters), count(trained),
                              pct(trained / base), data.baseName, count(base),
                              count(adamBytes(s.rank, linears, chosen, head)))];
  for (const [name, params] of runs.filter((run) => run[2] === 0 && run[1] > trained - adapters)) {
    const r = rankMatching(params, linears, chosen, head);
    lines.push(r <= maxRank ? text.matches(name, count(params), r) : text.neverMatches(maxRank, name));
  }
  const [name, out, inn] = chosenRows(linears, chosen).reduce((a, b) => (breakEvenRank(b[1], b[2]) < breakEvenRank(a[1], a[2]) ? b : a));
  lines.push(text.breakEven(breakEvenRank(out, inn), name, out, inn));
  const here = runs.filter((run) => run[2] === s.rank && run[3] === s.targets);
  lines.push(here.length ? text.measured(here.map(([n, , , , v]) => text.measuredRun(n, v.map(pct).join(", "), pct(mean(v)))))
    : text.notMeasured(s.rank, runs.filter((run) => run[2] > 0).map((run) => text.runAt(run[0], run[2], targetSets[run[3]][0]))));
  return lines;
}

function render({ model, el: widget }) {
  const el = figureRoot(widget, "lora");
  const data = { linears: model.get("linears"), targetSets: model.get("target_sets"), head: model.get("head"),
                 base: model.get("base_params"), runs: model.get("runs"), maxRank: model.get("max_rank"),
                 chance: model.get("chance"), baseName: model.get("base_name"), text: strings(TEXT) };
  const s = { rank: model.get("rank"), targets: model.get("target_set") };
  const rankBox = slider(1, data.maxRank, 1, s.rank), rankText = h("output");
  const targetBox = select(data.targetSets.map(([label]) => label), s.targets);
  const counts = h("canvas", { width: "560", height: "190", role: "img", "aria-label": data.text.countsLabel });
  const accuracy = h("canvas", { width: "560", height: "190", role: "img", "aria-label": data.text.accuracyLabel });
  const info = readout();
  el.append(h("div", {}, [labelled(data.text.rank, rankBox, rankText), labelled(data.text.targets, targetBox)]),
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
