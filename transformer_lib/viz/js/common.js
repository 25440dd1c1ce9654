// Shared helpers of the book's live figures: an ES module that each figure imports what it uses from
// (`import { softmax, h } from "./common.js";`). anywidget gets one module text per figure, linked by
// transformer_lib/viz/live.py (`bundle`); a browser can also load these files as they are.
// Each maths function mirrors a Python function; tests/test_live_widgets.py compares them.

// Numbers arrive as base64 of little-endian float32 (live.py: encode_float32).
export function decodeFloat32(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new Float32Array(bytes.buffer);
}

// softmax(row / tau): exp(s_j / tau) / sum_k exp(s_k / tau), with the row's maximum subtracted first
// (the same value, and no overflow). Mirrors torch.softmax(row / tau, -1).
export function softmax(row, tau = 1) {
  let max = -Infinity;
  for (const s of row) max = Math.max(max, s / tau);
  const e = Array.from(row, (s) => Math.exp(s / tau - max));
  const total = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / total);
}

// a . b = sum_i a_i b_i
export function dot(a, b) {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

// Shannon entropy in bits, H(p) = -sum_j p_j log2 p_j with 0 log 0 = 0 (head_stats.row_entropy).
export function entropyBits(p) {
  let h = 0;
  for (const x of p) if (x > 0) h -= x * Math.log2(x);
  return h;
}

// Round half to even, as torch.round does (Math.round rounds halves up).
export function roundHalfEven(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

// Viridis, the colour-blind-safe map of matplotlib, as a degree-6 polynomial fit of its table
// (t in [0, 1]; within about 0.01 of matplotlib's values). Returns "rgb(r, g, b)".
const VIRIDIS = [
  [0.2777273272234177, 0.005407344544966578, 0.3340998053353061],
  [0.1050930431085774, 1.404613529898575, 1.384590162594685],
  [-0.3308618287255563, 0.214847559468213, 0.09509516302823659],
  [-4.634230498983486, -5.799100973351585, -19.33244095627987],
  [6.228269936347081, 14.17993336680509, 56.69055260068105],
  [4.776384997670288, -13.74514537774601, -65.35303263337234],
  [-5.435455855934631, 4.645852612178535, 26.3124352495832],
];
export function viridisRGB(t) {
  t = Math.min(1, Math.max(0, t));
  return [0, 1, 2].map((c) => {
    let v = 0;
    for (let n = VIRIDIS.length - 1; n >= 0; n--) v = v * t + VIRIDIS[n][c]; // Horner's rule
    return Math.round(255 * Math.min(1, Math.max(0, v)));
  });
}
export function viridis(t) {
  return `rgb(${viridisRGB(t).join(", ")})`;
}

// ---- small DOM helpers (native controls: keyboard-operable, read by screen readers)

export function h(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, v);
  }
  for (const c of [].concat(children)) node.append(c);
  return node;
}

// A labelled control: <label>text <input|select> value</label>. The control's readout (``value``) sits inside its
// own label, before the gap to the next one, so "2" never reads as part of the next label ("2 kv heads").
export function labelled(text, control, value = null) {
  const children = value === null ? [text + " ", control] : [text + " ", control, " ", value];
  return h("label", { style: "margin-right:1.2em;white-space:nowrap" }, children);
}

export function slider(min, max, step, value) {
  return h("input", { type: "range", min, max, step, value: String(value), style: "vertical-align:middle" });
}

export function select(options, value = 0) {
  const node = h("select", {}, options.map((text, i) => h("option", { value: String(i) }, [String(text)])));
  node.value = String(value);
  return node;
}

// A line of text that screen readers announce when it changes.
export function readout(initial = "") {
  return h("div", { "aria-live": "polite", role: "status", style: "font-size:90%;min-height:1.4em" }, [initial]);
}

export function fmt(x, digits = 3) {
  return Number(x).toFixed(digits);
}

// The figure's own box inside the widget's element (tests and styles find live figures by its class).
export function figureRoot(el, name) {
  const root = h("div", { class: "tl-live", "data-figure": name });
  el.append(root);
  return root;
}

// ---- the reader's choices and the widget's synced traits (anywidget's pattern)

// Write the reader's choices back to the widget's traits: model.set, then model.save_changes sends them
// to the kernel, so that Python reads what the reader picked (`widget.layer`). The static book has no
// kernel: there the widget manager has no channel to send on and says so ("no comm channel defined");
// the choice then stays in the page, which is all a page without a kernel can do. Other errors propagate.
export function commit(model, changes) {
  for (const [name, value] of Object.entries(changes)) model.set(name, value);
  try {
    model.save_changes();
  } catch (error) {
    if (!String(error).includes("no comm channel")) throw error;
  }
}

// Follow changes made in Python (`widget.layer = 2` in a cell): for each trait name in `keys` (trait name ->
// key of `state`), copy the new value into `state` and call `redraw()`, unless `state` already holds it
// (as after this figure's own `commit`).
export function follow(model, keys, state, redraw) {
  for (const [name, key] of Object.entries(keys)) {
    model.on(`change:${name}`, () => {
      const value = model.get(name);
      if (JSON.stringify(state[key]) === JSON.stringify(value)) return;
      state[key] = value;
      redraw();
    });
  }
}

// Once the live figure has drawn, hide the static picture of its default state that Python wrote into
// the page before it (live.py: static_html; found by the id in the trait `fallback_id`), so that the
// reader sees one figure, not two. Without JavaScript the picture stays.
export function hideFallback(model) {
  const id = model.get("fallback_id");
  const node = id ? document.getElementById(id) : null;
  if (node) node.hidden = true;
  return node !== null;
}

// ---- the page's language: each figure writes its labels in English or in Chinese

// "zh" on a page whose <html lang> starts with "zh" (the Chinese edition's pages say lang="zh-CN"), else "en".
export function pageLanguage() {
  return (document.documentElement.lang || "").toLowerCase().startsWith("zh") ? "zh" : "en";
}

// A figure's strings in the page's language: `table` is { en: {...}, zh: {...} }; a string the language
// lacks (or a language the table lacks) falls back to the English one.
export function strings(table) {
  return { ...table.en, ...(table[pageLanguage()] || {}) };
}
