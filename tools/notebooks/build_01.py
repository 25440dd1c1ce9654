"""Write notebooks/01_rnn_limits.ipynb (outputs cleared) from the cells below.

The notebook is the source of truth: edit it directly, or edit here and rerun
``python tools/notebooks/build_01.py`` (this overwrites the notebook).
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from sync_setup_cells import setup_cell  # noqa: E402  the standard Colab set-up cell

MD, CODE = "md", "code"

CELLS = [
    (MD, r"""# Why attention: the limits of recurrent networks

By the end of this chapter you will be able to:

- write one step of a recurrent network (RNN) and of an LSTM, and check both against PyTorch's own;
- explain why an RNN runs $T$ steps one after another while attention runs one, and read measured times for both;
- measure how a gradient shrinks or grows on its way back through time, and predict the rate from one number,
  the spectral radius of the recurrent matrix;
- train an LSTM and a one-layer attention model on a recall task and see which one still remembers after a long gap."""),
    (MD, r"""Before 2017, most models of text, speech and other sequences were recurrent networks (RNNs) and their
variants, the LSTM and the GRU. Three weaknesses kept coming up:

1. **One step after another.** Each step needs the result of the step before, so the work cannot be spread over many
   processors.
2. **Vanishing and exploding gradients.** Training signals travel back through every step and shrink (or blow up)
   on the way.
3. **Long-range memory.** Information from early in a long sequence is hard to keep.

The Transformer (Vaswani et al. 2017, "Attention Is All You Need") replaced recurrence with attention. In this chapter
we do not take these weaknesses on trust: we measure each one."""),
    (CODE, r"""import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

import transformer_lib as tl
from transformer_lib.rnn import (LSTM, ElmanRNN, RecallLSTM, count_flops, count_op_calls, input_gradient_norms,
                                 lstm_step, recall_accuracy, recall_batch, recall_gpt, rnn_step, set_spectral_radius,
                                 state_jacobian, train_recall)
from transformer_lib.timing import interleaved_medians
from transformer_lib.viz import frame_slider, show_source

# Tiny tensors gain nothing from a second CPU thread, and one thread keeps the timings steady on a busy machine.
torch.set_num_threads(1)
torch.manual_seed(0)
device = tl.default_device()
print("running on", device)"""),
    (MD, r"""## A recurrent network in a few lines

An RNN reads a sequence $x_1, \dots, x_T$ one vector at a time. It keeps a **hidden state** $h_t$, a fixed-size
summary of everything read so far, and updates it with the same weights at every step (Elman 1990):

$$h_t = \tanh\left(W_{ih}\, x_t + b_{ih} + W_{hh}\, h_{t-1} + b_{hh}\right)$$

Here is the library's version of one step. The weights are stored the way PyTorch stores them, so we can copy
PyTorch's weights in and compare."""),
    (CODE, r"""show_source(rnn_step)"""),
    (MD, r"""A whole sequence is a loop over time. Look at the line `h = rnn_step(x[:, t], h, ...)`: step $t$ needs the
$h$ that step $t-1$ produced. That one dependency is the subject of the first half of this chapter."""),
    (CODE, r"""show_source(ElmanRNN.forward)"""),
    (MD, r"""The LSTM (Hochreiter & Schmidhuber 1997; forget gate from Gers et al. 2000) adds a second state, the cell
$c_t$, and three gates between 0 and 1: the forget gate $f$ decides how much of the old cell to keep, the input
gate $i$ how much new content $g$ to write, the output gate $o$ how much of the cell to show:

$$c_t = f \odot c_{t-1} + i \odot g, \qquad h_t = o \odot \tanh(c_t)$$"""),
    (CODE, r"""show_source(lstm_step)"""),
    (MD, r"""Both cells are written by hand, so we check them against PyTorch's `nn.RNN` and `nn.LSTM` with the same
weights copied in. The largest difference should be at the level of float32 rounding (about $10^{-7}$)."""),
    (CODE, r"""x = torch.randn(4, 20, 8, device=device)  # (B, T, D)
ref_rnn = nn.RNN(8, 16, batch_first=True).to(device)
ref_lstm = nn.LSTM(8, 16, batch_first=True).to(device)
our_rnn = ElmanRNN(8, 16).to(device).load_from_torch(ref_rnn)
our_lstm = LSTM(8, 16).to(device).load_from_torch(ref_lstm)
with torch.no_grad():
    print(f"ElmanRNN vs nn.RNN:  max |diff| = {(our_rnn(x)[0] - ref_rnn(x)[0]).abs().max():.1e}")
    print(f"LSTM     vs nn.LSTM: max |diff| = {(our_lstm(x)[0] - ref_lstm(x)[0]).abs().max():.1e}")"""),
    (MD, r"""## Limit 1: one step after another

In the loop above, step $t$ cannot start before step $t-1$ has finished. A sequence of length $T$ takes $T$
dependent steps, however many processors the machine has.

Attention works differently (chapter 02 builds it): every output is a weighted average of all the inputs, and
all the weights come from the same few matrix products $Q K^\top$ and then $\text{weights} \cdot V$. No output waits
for another, so the whole sequence is one step."""),
    (MD, r"""We can count this. `count_op_calls` counts the PyTorch operator calls a function makes (matrix products,
additions, `tanh`, ...), and `count_flops` counts the floating-point operations of its matrix products. We compare
our RNN and LSTM with a multi-head attention layer of the same width (64, with 4 heads) on one sequence of length $T$."""),
    (CODE, r"""WIDTH = 64
rnn = ElmanRNN(WIDTH, WIDTH).to(device)
lstm = LSTM(WIDTH, WIDTH).to(device)
attn = tl.MultiHeadAttention(WIDTH, n_heads=4).to(device)
attn_weights_path = lambda z: attn(z, need_weights=True)  # same matrix products, but visible to the flop counter

print(f"{'T':>5} | {'op calls: RNN':>13} {'LSTM':>6} {'attention':>9} | {'MFLOP: RNN':>10} {'attention':>9} | "
      f"dependent steps: RNN, attention")
for T in (8, 32, 128):
    x = torch.randn(1, T, WIDTH, device=device)  # (B=1, T, width)
    ops = [count_op_calls(m, x) for m in (rnn, lstm, attn)]
    flops = [count_flops(m, x) / 1e6 for m in (rnn, attn_weights_path)]
    print(f"{T:>5} | {ops[0]:>13} {ops[1]:>6} {ops[2]:>9} | {flops[0]:>10.2f} {flops[1]:>9.2f} | {T}, 1")"""),
    (MD, r"""Notice that the RNN and the LSTM make the same few operator calls again at every step, so their counts grow in
proportion to $T$; the attention layer makes one fixed set of calls at any length. Attention does *more* arithmetic
as $T$ grows (it compares every pair of positions, $T^2$ pairs), but in one step. PyTorch's own `nn.LSTM` is a
single operator call from Python, yet it runs the same $T$-step loop inside C++ (or cuDNN on a GPU)."""),
    (MD, r"""Now the clock. We time one forward pass for $T$ from 8 to 4096 (batch 1, width 64) for three models:
our Python-loop `ElmanRNN`, PyTorch's `nn.LSTM` (the same kind of loop, optimized in C++: the fair baseline) and the
attention layer (which calls PyTorch's fused `F.scaled_dot_product_attention`). `interleaved_medians` runs the three
in turn (so a burst of load from another program hits all of them alike) and keeps the median of 3 runs after a
warm-up. With a GPU present, it is timed there too."""),
    (CODE, r"""LENGTHS = [2 ** k for k in range(3, 13)]  # 8 ... 4096
devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
times = {}  # (model name, device type) -> list of seconds, one per length
for dev in devices:
    models = {"RNN (Python loop)": ElmanRNN(WIDTH, WIDTH).to(dev),
              "nn.LSTM (C++ loop)": nn.LSTM(WIDTH, WIDTH, batch_first=True).to(dev),
              "attention": tl.MultiHeadAttention(WIDTH, n_heads=4).to(dev)}
    for name in models:
        times[name, dev.type] = []
    for T in LENGTHS:
        x = torch.randn(1, T, WIDTH, device=dev)  # (B=1, T, width)
        with torch.no_grad():
            medians = interleaved_medians({name: (lambda m=m: m(x)) for name, m in models.items()},
                                          repeats=3, warmup=1, device=dev)
        for name, seconds in medians.items():
            times[name, dev.type].append(seconds)

print(f"{'T':>5}" + "".join(f"{name + ' ' + d:>26}" for name, d in times))
for i, T in enumerate(LENGTHS):
    print(f"{T:>5}" + "".join(f"{ts[i] * 1e3:>23.3f} ms" for ts in times.values()))"""),
    (MD, r"""To turn times into a rate of arithmetic we need each model's FLOPs at every length. The RNN and the LSTM do
the same work at every step (the table above is exactly proportional to $T$), so we count one step and multiply by
$T$. The attention layer's count we take at every length, on PyTorch's `meta` device, which tracks shapes without
computing anything."""),
    (CODE, r"""one_step = torch.randn(1, 1, WIDTH)
flops = {"RNN (Python loop)": [T * count_flops(ElmanRNN(WIDTH, WIDTH), one_step) for T in LENGTHS],
         "nn.LSTM (C++ loop)": [T * count_flops(LSTM(WIDTH, WIDTH), one_step) for T in LENGTHS]}  # same maths as nn.LSTM
attn_meta = tl.MultiHeadAttention(WIDTH, n_heads=4).to("meta")
flops["attention"] = [count_flops(lambda z: attn_meta(z, need_weights=True), torch.empty(1, T, WIDTH, device="meta"))
                      for T in LENGTHS]
print({name: f"{f[-1] / 1e9:.2f} GFLOP at T={LENGTHS[-1]}" for name, f in flops.items()})"""),
    (MD, r"""The figure shows the measured time against $T$ on log-log axes (left; a straight line of slope 1 means time
proportional to $T$, slope 2 means $T^2$) and the arithmetic rate each model reaches, in GFLOP/s (right)."""),
    (CODE, r"""STYLE = {"RNN (Python loop)": "tab:red", "nn.LSTM (C++ loop)": "tab:orange", "attention": "tab:blue"}
fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4))
for (name, dev), ts in times.items():
    ls = "-" if dev == "cpu" else "--"
    ax_t.loglog(LENGTHS, [t * 1e3 for t in ts], ls, marker="o", ms=3, color=STYLE[name], label=f"{name}, {dev}")
    ax_r.semilogx(LENGTHS, [f / t / 1e9 for f, t in zip(flops[name], ts)], ls, marker="o", ms=3, color=STYLE[name],
                  label=f"{name}, {dev}")
ax_t.set(xlabel="sequence length T", ylabel="forward time (ms)", title="Time of one forward pass")
ax_r.set(xlabel="sequence length T", ylabel="GFLOP/s reached", title="Arithmetic rate (FLOPs / time)")
ax_r.set_ylim(bottom=0)
for ax in (ax_t, ax_r):
    ax.set_xscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
ax_t.legend(fontsize=8)
plt.tight_layout()
plt.show()"""),
    (CODE, r"""def per_step_us(name, dev="cpu"):
    # slope of time against T between the two longest lengths: the cost of one more step
    ts = times[name, dev]
    return (ts[-1] - ts[-2]) / (LENGTHS[-1] - LENGTHS[-2]) * 1e6


def crossover(name, dev="cpu"):
    # the longest T at which attention is still faster than model `name`
    faster = [T for T, a, r in zip(LENGTHS, times["attention", dev], times[name, dev]) if a < r]
    return max(faster) if faster else None


for dev in (d.type for d in devices):
    print(f"--- {dev}")
    for name in ("RNN (Python loop)", "nn.LSTM (C++ loop)"):
        rate = max(f / t for f, t in zip(flops[name], times[name, dev])) / 1e9
        print(f"{name}: {per_step_us(name, dev):.1f} us per extra step, at most {rate:.2f} GFLOP/s; "
              f"attention is faster up to T = {crossover(name, dev)}")
    a = times["attention", dev]
    rate = max(f / t for f, t in zip(flops["attention"], a)) / 1e9
    print(f"attention: time x{a[-1] / a[-2]:.1f} from T={LENGTHS[-2]} to {LENGTHS[-1]} (T^2 would be x4), "
          f"at most {rate:.2f} GFLOP/s")
if len(devices) == 1:
    print("No GPU in this run: the curves are CPU only.")"""),
    (MD, r"""What to notice:

- For long sequences both recurrent lines rise with slope 1: every extra token adds a fixed time, the cost of one
  step that must wait for the previous one. PyTorch's C++ loop makes each step much cheaper than our Python loop,
  but it cannot skip or overlap any of them.
- The attention line is nearly flat for short sequences (one step, whatever $T$) and bends towards slope 2 for long
  ones, because it compares all $T^2$ pairs. A CPU thread has little parallel hardware to spread that work over, so
  for long sequences the attention layer here is slower than the C++ loop (the printout says where the lines cross).
  Attention is not free: its gain is that all the work is one step.
- The right panel shows what each model does with the hardware. A recurrent step is one small matrix product, so the
  loops' rate stays flat however long the sequence; attention's rate climbs with $T$, because larger matrix products
  keep more of the arithmetic units busy. A GPU has thousands of them: it runs the $T^2$ comparisons at once, while no
  hardware can start step $t$ of an RNN before step $t-1$. That, and training on every position of a sequence in one
  pass, is why Transformers train so much faster on GPUs."""),
    (MD, r"""### RNN and Transformer, side by side

Pick a sequence length $T$ with the slider. Left: the RNN's $T$ steps, each waiting for the one before. Middle:
attention, where every output looks at every input in a single step. Right: the times measured above for that $T$.
The drawing code is hidden in the book (click to show it)."""),
    (CODE, r"""def draw_rnn_vs_attention(T):
    fig, (ax_r, ax_a, ax_b) = plt.subplots(1, 3, figsize=(10, 2.7), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    shown = list(range(1, T + 1)) if T <= 5 else [1, 2, 3, None, T]  # None: the steps left out
    cmap = plt.get_cmap("viridis")
    for i, t in enumerate(shown):  # left: a chain of hidden states
        if t is None:
            ax_r.text(i, 1, "...", ha="center", va="center", fontsize=14)
            continue
        colour = cmap(0.15 + 0.7 * (t - 1) / max(T - 1, 1))
        ax_r.add_patch(FancyBboxPatch((i - 0.3, 0.8), 0.6, 0.4, boxstyle="round,pad=0.03", fc=colour, ec="k"))
        ax_r.text(i, 1, f"$h_{{{t}}}$", ha="center", va="center", color="w", fontsize=11)
        ax_r.text(i, 0.05, f"$x_{{{t}}}$", ha="center", va="center", fontsize=11)
        ax_r.text(i, 1.45, f"step {t}", ha="center", fontsize=8)
        ax_r.add_patch(FancyArrowPatch((i, 0.2), (i, 0.75), arrowstyle="-|>", mutation_scale=10))
        if i > 0:
            ax_r.add_patch(FancyArrowPatch((i - 0.65, 1), (i - 0.32, 1), arrowstyle="-|>", mutation_scale=10))
    ax_r.set(xlim=(-0.6, len(shown) - 0.4), ylim=(-0.2, 1.7), title=f"RNN: {T} steps, one after another")
    positions = list(range(len(shown)))  # middle: every input to every output
    for i in positions:
        for j in positions:
            if shown[i] is not None and shown[j] is not None:
                ax_a.plot([i, j], [0.2, 0.8], color="tab:blue", alpha=0.35, lw=1)
    for i, t in enumerate(shown):
        label = "..." if t is None else f"$x_{{{t}}}$"
        ax_a.text(i, 0.05, label, ha="center", va="center", fontsize=11)
        ax_a.text(i, 1.0, "..." if t is None else f"$y_{{{t}}}$", ha="center", va="center", fontsize=11)
    ax_a.text((len(shown) - 1) / 2, 1.45, "step 1 (all at once)", ha="center", fontsize=8)
    ax_a.set(xlim=(-0.6, len(shown) - 0.4), ylim=(-0.2, 1.7), title=f"Attention: all {T} positions in 1 step")
    for ax in (ax_r, ax_a):
        ax.axis("off")
    i = LENGTHS.index(T)  # right: the measured times
    names = [(name, dev) for name, dev in times]
    values = [times[key][i] * 1e3 for key in names]
    ax_b.barh(range(len(names)), values, color=[STYLE[name] for name, _ in names])
    ax_b.set_yticks(range(len(names)), [f"{name}, {dev}" for name, dev in names], fontsize=8)
    ax_b.set_xscale("log")
    ax_b.set_xlim(min(min(ts) for ts in times.values()) * 1e3 / 2, max(max(ts) for ts in times.values()) * 1e3 * 2)
    ax_b.invert_yaxis()
    ax_b.set(xlabel="measured forward time (ms, log scale)", title=f"Measured at T = {T}")
    plt.tight_layout()
    caption = (f"<b>T = {T}</b>: RNN loop {times['RNN (Python loop)', 'cpu'][i] * 1e3:.2f} ms for {T} dependent "
               f"steps; nn.LSTM {times['nn.LSTM (C++ loop)', 'cpu'][i] * 1e3:.2f} ms; attention "
               f"{times['attention', 'cpu'][i] * 1e3:.2f} ms in 1 step (CPU, one thread).")
    return fig, caption""", ("hide-input",)),
    (CODE, r"""frame_slider(draw_rnn_vs_attention, [8, 32, 128, 512, 2048, 4096], "sequence length T", initial=128)"""),
    (MD, r"""Notice that the chain on the left gets longer with $T$ while the attention picture stays one step; the bars
show what each picture costs on this machine, including the lengths where attention's $T^2$ work costs more
than a loop on a CPU."""),
    (MD, r"""## Limit 2: gradients that vanish or explode

To learn from an early input, the gradient of the loss has to travel back through every step in between
("backpropagation through time"). By the chain rule, each step multiplies it by that step's Jacobian:

$$\frac{\partial h_T}{\partial h_t} = \prod_{s=t+1}^{T} \operatorname{diag}\!\left(1 - h_s^2\right) W_{hh}$$

($1 - h_s^2$ is the slope of $\tanh$.) Without the $\tanh$ this is the matrix power $W_{hh}^{\,T-t}$, and a matrix
power grows or shrinks like $\rho^{\,T-t}$, where $\rho$, the **spectral radius**, is the largest $|\lambda|$ among
$W_{hh}$'s eigenvalues. So $\rho < 1$ makes gradients vanish and $\rho > 1$ makes them explode, exponentially in
the distance. The library computes the product directly:"""),
    (CODE, r"""show_source(state_jacobian)"""),
    (MD, r"""To measure it on a real network, `input_gradient_norms` picks a random direction $u$ for each sequence, asks
autograd for the gradient of $u \cdot y_T$ (the last output) with respect to every input $x_t$, and returns the size
of that gradient at each position."""),
    (CODE, r"""show_source(input_gradient_norms)"""),
    (MD, r"""To make the closed form exact, we give $W_{hh}$ a random rotation (an orthogonal matrix: every eigenvalue has
$|\lambda| = 1$) and scale it with `set_spectral_radius` to $\rho \in \{0.5, 0.9, 1.0, 1.1\}$. A rotation scaled by
$\rho$ stretches every vector by exactly $\rho$, so in a linear RNN (no $\tanh$) the gradient at distance $d$ from
the end should be $\rho^d$ times the gradient at the end. We build the same network with and without $\tanh$."""),
    (CODE, r"""RHOS = [0.5, 0.9, 1.0, 1.1]
T_GRAD = 50
x_grad = torch.randn(32, T_GRAD, WIDTH, generator=torch.Generator().manual_seed(0)).to(device)  # (B, T, width)


def rnn_with_radius(rho, nonlinearity):
    torch.manual_seed(0)  # the same weights for every rho and both nonlinearities
    model = ElmanRNN(WIDTH, WIDTH, nonlinearity=nonlinearity)
    with torch.no_grad():
        nn.init.orthogonal_(model.weight_hh)
        model.weight_hh.copy_(set_spectral_radius(model.weight_hh, rho))
    return model.to(device)


distance = torch.arange(T_GRAD - 1, -1, -1)  # position t is T-1-t steps from the end
relative = {}  # (nonlinearity, rho) -> gradient size at each distance, divided by the size at distance 0
for nonlinearity in ("linear", "tanh"):
    for rho in RHOS:
        g = input_gradient_norms(rnn_with_radius(rho, nonlinearity), x_grad).cpu()
        relative[nonlinearity, rho] = (g / g[-1]).flip(0)  # index = distance from the end"""),
    (MD, r"""The figure shows the gradient's size against the distance from the end, relative to its size at the last
position, on a log scale. Dashed lines are the closed form $\rho^d$."""),
    (CODE, r"""d = torch.arange(T_GRAD)
colours = dict(zip(RHOS, ["tab:blue", "tab:green", "tab:gray", "tab:red"]))
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, nonlinearity in zip(axes, ("linear", "tanh")):
    for rho in RHOS:
        ax.semilogy(d, relative[nonlinearity, rho], color=colours[rho], label=f"measured, rho = {rho}")
        ax.semilogy(d, rho ** d.double(), "--", color=colours[rho], lw=1)
    ax.set(xlabel="distance from the end d (steps)", title=f"{nonlinearity} RNN (dashed: rho^d)")
    ax.grid(True, which="major", alpha=0.3)
axes[0].set_ylabel("gradient size relative to d = 0")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()"""),
    (MD, r"""To put numbers on the figure, we estimate the factor each step applies, $(\text{relative size at } d = 49)^{1/49}$,
and compare it with $\rho$."""),
    (CODE, r"""print(f"{'rho':>4} | {'factor per step, linear':>24} | {'factor per step, tanh':>22} | relative size at d = {T_GRAD - 1}: linear, tanh")
for rho in RHOS:
    lin, th = relative["linear", rho][-1].item(), relative["tanh", rho][-1].item()
    print(f"{rho:>4} | {lin ** (1 / (T_GRAD - 1)):>24.3f} | {th ** (1 / (T_GRAD - 1)):>22.3f} | {lin:.1e}, {th:.1e}")"""),
    (MD, r"""What to notice: the linear RNN follows $\rho^d$: its measured factor per step is $\rho$. Below 1 the gradient
vanishes exponentially; above 1 it explodes; only $\rho = 1$ keeps it steady. With $\tanh$ every step also multiplies
by the slope $1 - h^2 \le 1$, so all four curves fall faster than $\rho^d$. Here even $\rho = 1.1$ vanishes: the
inputs push many units into the flat parts of $\tanh$. A tanh RNN that must carry a gradient far has to keep $\rho$
near 1 *and* its units away from saturation."""),
    (MD, r"""Now the three kinds of model as PyTorch initialises them, on the same inputs: a tanh RNN (`nn.RNN`), an LSTM
(`nn.LSTM`) and one attention layer, all of width 64. The figure shows the absolute size of the gradient of the last
output against the distance from the end."""),
    (CODE, r"""torch.manual_seed(0)
models = {"RNN (nn.RNN, tanh)": nn.RNN(WIDTH, WIDTH, batch_first=True),
          "LSTM (nn.LSTM)": nn.LSTM(WIDTH, WIDTH, batch_first=True),
          "attention (1 layer)": tl.MultiHeadAttention(WIDTH, n_heads=4)}
fig, ax = plt.subplots(figsize=(7, 4))
for (name, model), colour in zip(models.items(), ["tab:red", "tab:orange", "tab:blue"]):
    g = input_gradient_norms(model.to(device), x_grad).cpu().flip(0)  # index = distance from the end
    ax.semilogy(d, g, color=colour, label=name)
    print(f"{name:>20}: gradient size at d = 0: {g[0]:.1e}, at d = 10: {g[10]:.1e}, at d = {T_GRAD - 1}: {g[-1]:.1e}")
ax.set(xlabel="distance from the end d (steps)", ylabel="gradient size |d loss / d x_t|",
       title="How much the last output depends on each input")
ax.grid(True, which="major", alpha=0.3)
ax.legend()
plt.show()"""),
    (MD, r"""Notice that the RNN and the LSTM both fall off exponentially: as initialised, the LSTM's gates do not yet keep
the gradient alive (training can teach them to, which is the LSTM's whole point). The attention layer's line is
flat: every input is one step away from every output, so distance plays no role. (Its last position stands out
because that input also forms the query.)"""),
    (MD, r"""## Limit 3: remembering across a long gap

A small task makes long-range memory concrete. A sequence starts with a **key** token, continues with `gap` random
**distractor** tokens from the same alphabet, and ends with a **query** token `?`. The model must answer with the
key. With 8 symbols, guessing is right 1 time in 8."""),
    (CODE, r"""show_source(recall_batch)"""),
    (CODE, r"""N_SYMBOLS = 8
x_demo, y_demo = recall_batch(3, gap=6, n_symbols=N_SYMBOLS, generator=torch.Generator().manual_seed(0))
symbols = "ABCDEFGH?"
for seq, target in zip(x_demo, y_demo):
    print(" ".join(symbols[i] for i in seq), "  -> answer:", symbols[target])"""),
    (MD, r"""The two contestants are both tiny. The LSTM model embeds each token, runs PyTorch's `nn.LSTM` and reads its
answer from the last step. The attention model is the library's `GPT` (chapter 05) cut down to one layer with one
head and learned position vectors: the query position can look straight back at position 0."""),
    (CODE, r"""show_source(RecallLSTM)"""),
    (CODE, r"""show_source(recall_gpt)"""),
    (CODE, r"""GAPS = [4, 8, 16, 32, 64]
count = lambda m: sum(p.numel() for p in m.parameters())
print(f"parameters: LSTM model {count(RecallLSTM(N_SYMBOLS + 1)):,}; "
      f"attention model {count(recall_gpt(max(GAPS), N_SYMBOLS)):,} at gap {max(GAPS)}")"""),
    (MD, r"""Both get the same budget at every gap: 200 steps of Adam (learning rate 0.003) on fresh batches of 64
sequences, the same seed, and then the accuracy on 1000 sequences they have never seen."""),
    (CODE, r"""STEPS = 200
results = {"LSTM": {}, "attention": {}}
losses = {}
for gap in GAPS:
    for name, make in (("LSTM", lambda: RecallLSTM(N_SYMBOLS + 1)), ("attention", lambda: recall_gpt(gap, N_SYMBOLS))):
        tl.seed_everything(0)
        model = make().to(device)
        losses[name, gap] = train_recall(model, gap, steps=STEPS, lr=3e-3, n_symbols=N_SYMBOLS, seed=0,
                                         desc=f"{name}, gap {gap}")
        results[name][gap] = recall_accuracy(model, gap, n=1000, n_symbols=N_SYMBOLS)
attention_model = model  # the last one trained: attention at the longest gap

print(f"{'gap':>4} | {'LSTM accuracy':>13} | {'attention accuracy':>18}")
for gap in GAPS:
    print(f"{gap:>4} | {results['LSTM'][gap]:>13.3f} | {results['attention'][gap]:>18.3f}")"""),
    (MD, r"""The figure shows the accuracy against the gap (left; the dotted line is guessing) and the training loss at the
longest gap (right)."""),
    (CODE, r"""fig, (ax_a, ax_l) = plt.subplots(1, 2, figsize=(11, 4))
for name, colour in (("LSTM", "tab:orange"), ("attention", "tab:blue")):
    ax_a.plot(GAPS, [results[name][g] for g in GAPS], "o-", color=colour, label=name)
    ax_l.plot(losses[name, max(GAPS)], color=colour, label=name)
ax_a.axhline(1 / N_SYMBOLS, ls=":", color="k", label="guessing")
ax_a.set_xscale("log", base=2)
ax_a.set(xlabel="gap (distractor tokens between key and query)", ylabel="accuracy on unseen sequences",
         title=f"Recall after {STEPS} training steps", ylim=(0, 1.05))
ax_l.axhline(math.log(N_SYMBOLS), ls=":", color="k", label="guessing (ln 8)")
ax_l.set(xlabel="training step", ylabel="cross-entropy loss", title=f"Training at gap {max(GAPS)}")
for ax in (ax_a, ax_l):
    ax.grid(True, alpha=0.3)
    ax.legend()
plt.tight_layout()
plt.show()"""),
    (CODE, r"""solved = [g for g in GAPS if results["LSTM"][g] > 0.9]
failed = [g for g in GAPS if results["LSTM"][g] < 0.5]
print(f"LSTM above 90% at gaps {solved}; below 50% at gaps {failed}")
print(f"attention: lowest accuracy over all gaps {min(results['attention'].values()):.3f}")"""),
    (MD, r"""What to notice: with the same small budget, the LSTM recalls the key perfectly at short gaps and falls to
guessing once the gap is long; its loss at the longest gap stays near $\ln 8$, the loss of a guess. The attention
model's accuracy does not depend on the gap. To be fair to the LSTM: it *can* learn longer gaps with more steps and
tuning (Hochreiter & Schmidhuber's original experiments did), but its training signal has to cross every step of the
gap, while the attention model's query reaches the key in one step at any distance."""),
    (MD, r"""Where does the trained attention model look? We ask the model at the longest gap for its attention weights
and read the row of the query position."""),
    (CODE, r"""x_eval, _ = recall_batch(256, max(GAPS), N_SYMBOLS, torch.Generator().manual_seed(7), device)
attention_model.eval()
with torch.no_grad():
    attention_model(x_eval, need_weights=True)
weights = attention_model.blocks[0].self_weights[:, 0, -1].cpu()  # (B, T): the query position's row, head 0
print(f"attention on position 0 (the key): {weights[:, 0].mean():.3f} on average; "
      f"uniform over the {weights.shape[1]} positions would be {1 / weights.shape[1]:.3f}")"""),
    (MD, r"""Notice that the query puts most of its weight on the key's position: the model learned to look back exactly
where the answer is, across the whole gap, in a single step."""),
    (MD, r"""## Summary

- An RNN updates one hidden state per token with the same weights; step $t$ needs step $t-1$, so a sequence of
  length $T$ takes $T$ dependent steps. Attention computes all positions from a few matrix products: one step,
  $T^2$ work.
- Measured here: the recurrent loops pay a fixed cost for every token, one after another; attention is one large
  computation whose $T^2$ work parallel hardware can run at once (on one CPU thread it loses for long sequences).
- Gradients through an RNN are products of per-step Jacobians: they scale like $\rho^d$ with the spectral radius
  $\rho$ of $W_{hh}$ (exactly so for a linear RNN), and $\tanh$'s slope shrinks them further. An attention layer's
  gradient does not depend on distance.
- On a recall task with the same training budget, an LSTM solves short gaps and falls to guessing at long ones; a
  one-layer attention model solves every gap we tried by looking straight back at the key.

The next chapter builds that attention step from scratch: queries, keys and values."""),
    (MD, r"""## Exercises

Each exercise has a function for you to fill in and a check that compares it with the library on random inputs.
The solution is in the hidden cell below each exercise."""),
    (CODE, r"""from transformer_lib.exercises.ch01 import check_rnn_step, check_set_spectral_radius, check_state_jacobian"""),
    (MD, r"""**Exercise 1: one RNN step.** Given `x_t: (B, D)`, `h: (B, H)`, `w_ih: (H, D)`, `w_hh: (H, H)` and
biases `b_ih, b_hh: (H,)`, return the new state $\tanh(x_t W_{ih}^\top + b_{ih} + h W_{hh}^\top + b_{hh})$, shape `(B, H)`."""),
    (CODE, r"""def my_rnn_step(x_t, h, w_ih, w_hh, b_ih, b_hh):
    # x_t: (B, D), h: (B, H) -> (B, H)
    raise NotImplementedError  # your code here


check_rnn_step(my_rnn_step)"""),
    (CODE, r"""def my_rnn_step(x_t, h, w_ih, w_hh, b_ih, b_hh):
    return torch.tanh(x_t @ w_ih.T + b_ih + h @ w_hh.T + b_hh)  # (B, H)


check_rnn_step(my_rnn_step)""", ("hide-input",)),
    (MD, r"""**Exercise 2: set the spectral radius.** Return `w: (H, H)` rescaled so that its largest eigenvalue
magnitude is `rho`. (The eigenvalues of a random matrix are complex: `torch.linalg.eigvals` returns them.)"""),
    (CODE, r"""def my_set_spectral_radius(w, rho):
    # w: (H, H), rho: float -> (H, H) with max |eigenvalue| == rho
    raise NotImplementedError  # your code here


check_set_spectral_radius(my_set_spectral_radius)"""),
    (CODE, r"""def my_set_spectral_radius(w, rho):
    radius = torch.linalg.eigvals(w).abs().max()  # the largest |lambda|
    return w * (rho / radius)  # scaling a matrix scales every eigenvalue by the same factor


check_set_spectral_radius(my_set_spectral_radius)""", ("hide-input",)),
    (MD, r"""**Exercise 3: the Jacobian across $k$ steps.** A tanh RNN visited the states `hiddens = (h_1, ..., h_k)`,
shape `(k, H)`. Return $\partial h_k / \partial h_0 = \operatorname{diag}(1 - h_k^2) W_{hh} \cdots
\operatorname{diag}(1 - h_1^2) W_{hh}$, shape `(H, H)`. Then try it on a rotation scaled to $\rho = 0.9$ with all
states 0: its size should be $0.9^k$."""),
    (CODE, r"""def my_state_jacobian(w_hh, hiddens):
    # w_hh: (H, H), hiddens: (k, H), h_1 first -> (H, H)
    raise NotImplementedError  # your code here


check_state_jacobian(my_state_jacobian)"""),
    (CODE, r"""def my_state_jacobian(w_hh, hiddens):
    jac = torch.eye(w_hh.shape[0], dtype=w_hh.dtype)
    for h in hiddens:  # h_1 first: each new step multiplies on the left
        jac = torch.diag(1 - h ** 2) @ w_hh @ jac
    return jac


rotation = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))[0]
for k in (1, 5, 20):
    jac = my_state_jacobian(0.9 * rotation, torch.zeros(k, 16, dtype=torch.float64))
    print(f"k = {k:>2}: spectral norm {torch.linalg.matrix_norm(jac, 2):.4f}, 0.9^k = {0.9 ** k:.4f}")
check_state_jacobian(my_state_jacobian)""", ("hide-input",)),
]


def build(path: Path = ROOT / "notebooks" / "01_rnn_limits.ipynb") -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    for i, (kind, source, *tags) in enumerate(CELLS):
        cell = nbformat.v4.new_markdown_cell(source) if kind == MD else nbformat.v4.new_code_cell(source)
        cell.id = f"ch01-{i:02d}"
        if tags:
            cell.metadata["tags"] = list(tags[0])
        nb.cells.append(cell)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first_code, setup_cell(ROOT))
    nbformat.write(nb, path)
    print("wrote", path.relative_to(ROOT))


if __name__ == "__main__":
    build()
