// Chapter 07: the memory a KV cache needs, computed in the browser as you change the model.
// Every layer keeps one key and one value vector per kv head, per position and per sequence:
//   bytes = 2 (K and V) x n_layers x batch x n_kv_heads x d_head x T x bytes per number
// (kv_cache.kv_cache_bytes).

import { commit, figureRoot, h, hideFallback, labelled, readout, select, slider, strings } from "./common.js";

// Every word the figure writes, in English and in Chinese (common.js: strings picks the page's language).
export const TEXT = {
  en: {
    model: "model",
    numbers: "numbers",
    layers: "layers",
    heads: "kv heads",
    dHead: "head size d_head",
    T: "length T",
    B: "batch",
    plotLabel: "cache size against length",
    plotTitle: (full, maxLen) => `cache size grows linearly with the length T: ${full} at T = ${maxLen}`,
    total: (layers, B, heads, dHead, T, bytes, total, exact, perToken) =>
      `KV cache = 2 × ${layers} layers × ${B} sequences × ${heads} kv heads × ${dHead} × ${T} positions × ` +
      `${bytes} bytes = ${total} (${exact} bytes); ${perToken} per token.`,
  },
  zh: {
    model: "模型",
    numbers: "数据类型",
    layers: "层数",
    heads: "KV 头数",
    dHead: "头维度 d_head",
    T: "长度 T",
    B: "批大小",
    plotLabel: "缓存大小随长度的变化",
    plotTitle: (full, maxLen) => `缓存大小随长度 T 线性增长：T = ${maxLen} 时为 ${full}`,
    total: (layers, B, heads, dHead, T, bytes, total, exact, perToken) =>
      `KV 缓存 = 2 × ${layers} 层 × ${B} 条序列 × ${heads} 个 KV 头 × ${dHead} × ${T} 个位置 × ` +
      `${bytes} 字节 = ${total}（${exact} 字节）；每个词元 ${perToken}。`,
  },
};

export function kvCacheBytes(nLayers, nKvHeads, dHead, seqLen, batch, bytesPerElement) {
  return 2 * nLayers * batch * nKvHeads * dHead * seqLen * bytesPerElement;
}

// 1536 -> "1.5 KiB" (binary units, as the chapter's table prints them).
export function human(n) {
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (n < 1024 || unit === "GiB") return `${n.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })} ${unit}`;
    n /= 1024;
  }
}

const DTYPES = [["float32", 4], ["float16 / bfloat16", 2], ["int8 / fp8", 1]];

function render({ model, el: widget }) {
  const el = figureRoot(widget, "kvcache");
  const text = strings(TEXT);
  const presets = model.get("models"); // [name, layers, kv heads, d_head, context, bytes per number]
  const maxLen = model.get("max_length");
  const s = { layers: presets[0][1], heads: presets[0][2], dHead: presets[0][3], T: presets[0][4], B: 1, bytes: presets[0][5] };
  const presetBox = select(presets.map((p) => p[0]), 0);
  // The reader's numbers, as the trait `selection` (keyword arguments of kv_cache.kv_cache_bytes).
  const selection = () => ({ n_layers: s.layers, n_kv_heads: s.heads, d_head: s.dHead, seq_len: s.T, batch_size: s.B,
                             bytes_per_element: s.bytes });
  const fromSelection = (x) => Object.assign(s, { layers: x.n_layers, heads: x.n_kv_heads, dHead: x.d_head, T: x.seq_len,
                                                  B: x.batch_size, bytes: x.bytes_per_element });
  const given = model.get("selection");
  if (given && Object.keys(given).length) fromSelection(given);
  presetBox.value = String(model.get("preset"));
  const boxes = {
    layers: slider(1, 128, 1, s.layers), heads: slider(1, 128, 1, s.heads), dHead: slider(8, 256, 8, s.dHead),
    T: slider(1, maxLen, 1, s.T), B: slider(1, 64, 1, s.B),
  };
  const dtypeBox = select(DTYPES.map((d) => d[0]), DTYPES.findIndex((d) => d[1] === s.bytes));
  const texts = Object.fromEntries(Object.keys(boxes).map((k) => [k, h("output")]));
  const bar = h("canvas", { width: "520", height: "120", role: "img", "aria-label": text.plotLabel });
  const info = readout();
  // each slider's label is the entry of TEXT named as the slider (text.layers, text.heads, ...)
  el.append(h("div", {}, [labelled(text.model, presetBox), labelled(text.numbers, dtypeBox)]),
            h("div", {}, Object.keys(boxes).map((k) => labelled(text[k], boxes[k], texts[k]))),
            bar, info);

  function draw() {
    for (const k of Object.keys(boxes)) { boxes[k].value = String(s[k]); texts[k].textContent = String(s[k]); }
    const total = kvCacheBytes(s.layers, s.heads, s.dHead, s.T, s.B, s.bytes);
    const perToken = kvCacheBytes(s.layers, s.heads, s.dHead, 1, 1, s.bytes);
    const ctx = bar.getContext("2d"), W = bar.width, Hh = bar.height, full = kvCacheBytes(s.layers, s.heads, s.dHead, maxLen, s.B, s.bytes);
    ctx.clearRect(0, 0, W, Hh);
    ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(30, Hh - 20); ctx.lineTo(W - 10, 20); ctx.stroke(); // linear in T
    const x = 30 + ((s.T - 1) / Math.max(1, maxLen - 1)) * (W - 40), y = Hh - 20 - (total / full) * (Hh - 40);
    ctx.fillStyle = "#0072b2"; ctx.fillRect(x - 4, y - 4, 8, 8);
    ctx.fillStyle = "#000"; ctx.font = "11px sans-serif";
    ctx.fillText(text.plotTitle(human(full), maxLen), 30, 12);
    ctx.fillText("T →", W - 30, Hh - 6);
    info.textContent = text.total(s.layers, s.B, s.heads, s.dHead, s.T, s.bytes, human(total),
                                  total.toLocaleString("en-US"), human(perToken));
  }
  function usePreset(i) {
    const p = presets[i];
    Object.assign(s, { layers: p[1], heads: p[2], dHead: p[3], T: Math.min(p[4], maxLen), bytes: p[5] });
  }
  const save = () => commit(model, { preset: Number(presetBox.value), selection: selection() });
  const show = () => { dtypeBox.value = String(DTYPES.findIndex((d) => d[1] === s.bytes)); draw(); };
  presetBox.addEventListener("change", () => { usePreset(Number(presetBox.value)); save(); show(); });
  for (const [k, box] of Object.entries(boxes)) box.addEventListener("input", () => { s[k] = Number(box.value); save(); draw(); });
  dtypeBox.addEventListener("change", () => { s.bytes = DTYPES[Number(dtypeBox.value)][1]; save(); draw(); });
  model.on("change:preset", () => { // set in Python: take that model's numbers
    if (Number(presetBox.value) === model.get("preset")) return;
    presetBox.value = String(model.get("preset")); usePreset(model.get("preset")); show();
  });
  model.on("change:selection", () => {
    if (JSON.stringify(model.get("selection")) === JSON.stringify(selection())) return;
    fromSelection(model.get("selection")); show();
  });
  show();
  hideFallback(model);
}

export default { render };
