"""Chapter 07's generation figures: a GPT writing token by token with its KV cache, and the next-token distribution
under a temperature, top-k and top-p.

Used in chapter 07.

``trace_generation`` runs the model one step at a time through the teaching path (``model(..., cache=...,
need_weights=True)``) and records, at each step, which positions the cache holds and how the newest token's query
attends over them. ``generation_slider`` turns the steps into precomputed frames (works in the static book);
``sampling_slider`` does the same for a list of sampling settings.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..serving.generation import filter_logits, sample_next
from ..analysis.head_stats import entropy_bits
from ..serving.kv_cache import DynamicCache, kv_cache_bytes
from ..utils.checks import check_int
from .widgets import frame_slider

SHOW = {"\n": "⏎", " ": "␣", "\t": "⇥"}  # visible forms of whitespace characters


def show_token(token: str) -> str:
    """A token as it is drawn on an axis (newlines, spaces and tabs in it made visible)."""
    return "".join(SHOW.get(c, c) for c in token)


@dataclass
class GenerationStep:
    """What one forward pass of a cached generation saw and produced."""

    tokens: list[str]  # every token fed so far, prompt first
    n_prompt: int  # how many of them are the prompt
    fed: int  # how many positions this step fed (the whole prompt at step 0, then 1)
    attention: torch.Tensor  # (n_layers, n_heads, len(tokens)): the newest query's weights over the cache
    top: list[tuple[str, float]]  # the 3 most likely next tokens and their probabilities
    next_token: str  # the token chosen


@torch.no_grad()
def trace_generation(
    model, tokenizer, prompt: str, n_new: int, temperature: float = 0.0, seed: int | None = None
) -> list[GenerationStep]:
    """Generate ``n_new`` tokens after ``prompt`` with a ``DynamicCache``; one ``GenerationStep`` per forward pass.

    Step 0 is the prefill (the whole prompt in one pass); step ``s`` feeds the token chosen at step ``s - 1``.
    """
    device = model.tok_emb.weight.device
    ids = torch.tensor([tokenizer.encode(prompt)], device=device)  # (1, T)
    room = model.cfg.block_size - ids.shape[1]  # positions left after the prompt
    check_int("n_new", n_new, min=0, max=room, note=f"after {ids.shape[1]} prompt tokens, within block_size")
    gen = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    cache, fed, steps, tokens = DynamicCache(), ids, [], [tokenizer.decode([i]) for i in ids[0].tolist()]
    for _ in range(n_new):
        logits, _ = model(fed, cache=cache, need_weights=True)
        weights = torch.stack([b.self_weights[0, :, -1] for b in model.blocks])  # (L, H, Tk)
        nxt = sample_next(logits[:, -1], temperature, generator=gen)  # (1,)
        top = logits[0, -1].float().softmax(-1).topk(3)
        top = [(tokenizer.decode([i]), p) for i, p in zip(top.indices.tolist(), top.values.tolist())]
        steps.append(
            GenerationStep(
                list(tokens), ids.shape[1], fed.shape[1], weights.float().cpu(), top, tokenizer.decode(nxt.tolist())
            )
        )
        tokens.append(steps[-1].next_token)
        fed = nxt[:, None]
    return steps


def _text_html(step: GenerationStep) -> str:
    prompt = html.escape("".join(step.tokens[: step.n_prompt]))
    made = html.escape("".join(step.tokens[step.n_prompt :]))
    nxt = html.escape(step.next_token)
    return (
        f"<pre style='white-space:pre-wrap;margin:2px 0;font-size:95%'>{prompt}<b>{made}</b>"
        f"<span style='background:#ffd54f'>{nxt if nxt.strip() else repr(step.next_token)[1:-1]}</span></pre>"
    )


def generation_frame(step: GenerationStep, index: int, total: int, max_len: int, bytes_per_position: int):
    """Two aligned panels over positions 0 .. max_len-1: the cache (per layer) and the newest query's attention.

    Returns ``(figure, caption_html)``; ``bytes_per_position``: K and V of one position in all layers.
    """
    L, _, t = step.attention.shape
    state = np.full((L, max_len), np.nan)
    state[:, : t - step.fed] = 0  # cached by earlier steps
    state[:, t - step.fed : t] = 1  # written by this step
    att = np.full((L, max_len), np.nan)
    att[:, :t] = step.attention.mean(1).numpy()  # (L, t): mean over heads
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8.2, 3.6), sharex=True, height_ratios=[1, 1.25])
    ax1.imshow(
        state,
        cmap=plt.matplotlib.colors.ListedColormap(["#90caf9", "#ff9800"]),
        vmin=0,
        vmax=1,
        aspect="auto",
        interpolation="nearest",
    )
    ax1.set_facecolor("#f2f2f2")
    ax1.set_yticks(range(L), [f"layer {i}" for i in range(L)], fontsize=8)
    what = "the prompt (prefill)" if index == 0 else f"1 position ({show_token(step.tokens[-1])!s})"
    ax1.set_title(
        f"Step {index} of {total - 1}: the KV cache holds {t} positions (blue: from earlier steps, "
        f"orange: {what} written now)",
        fontsize=8.5,
    )
    im = ax2.imshow(
        att, cmap="viridis", vmin=0, vmax=max(0.05, float(np.nanmax(att))), aspect="auto", interpolation="nearest"
    )
    ax2.set_facecolor("#f2f2f2")
    ax2.set_yticks(range(L), [f"layer {i}" for i in range(L)], fontsize=8)
    ax2.set_xticks(range(t), [show_token(c) for c in step.tokens], fontsize=8, rotation=90)
    ax2.set_xlim(-0.5, max_len - 0.5)
    ax2.set_xlabel("position in the sequence (the token stored there)")
    ax2.set_title(
        f"Attention of the newest token ({show_token(step.tokens[-1])}) over the cached positions, mean of the heads",
        fontsize=8.5,
    )
    fig.colorbar(im, cax=ax2.inset_axes([1.01, 0.0, 0.015, 1.0]), label="weight")  # keeps the columns aligned
    tops = ", ".join(f"{html.escape(repr(tok))} {p:.2f}" for tok, p in step.top)
    caption = (
        f"<div style='max-width:640px;font-size:90%'>{_text_html(step)}"
        f"Next token: <b>{html.escape(repr(step.next_token))}</b> (most likely: {tops}). "
        f"Cache: {t} positions &times; {bytes_per_position:,} bytes = <b>{t * bytes_per_position / 1024:.1f} "
        f"KiB</b>; this step computed keys and values for {step.fed} position{'s' if step.fed > 1 else ''} "
        "only.</div>"
    )
    return fig, caption


def generation_slider(model, steps: Sequence[GenerationStep]):
    """A playable ``frame_slider`` over the steps of ``trace_generation(model, ...)`` (see ``generation_frame``)."""
    attn = model.blocks[0].self_attn
    per_position = kv_cache_bytes(
        len(model.blocks), attn.n_kv_heads, attn.d_head, 1, bytes_per_element=model.tok_emb.weight.element_size()
    )
    max_len = len(steps[-1].tokens)
    return frame_slider(
        lambda i: generation_frame(steps[i], i, len(steps), max_len, per_position),
        range(len(steps)),
        description="step",
        play=True,
    )


# ----------------------------------------------------------------------------- sampling settings
@dataclass(frozen=True)
class Sampling:
    """One decoding setting: ``temperature`` 0 is greedy; ``top_k``/``top_p`` None means no filter."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __str__(self) -> str:
        if self.temperature == 0:
            return "greedy (T = 0)"
        parts = [f"T = {self.temperature:g}"]
        parts += [f"top-k {self.top_k}"] if self.top_k else []
        parts += [f"top-p {self.top_p:g}"] if self.top_p else []
        return ", ".join(parts)


def sampling_distribution(logits: torch.Tensor, setting: Sampling) -> torch.Tensor:
    """The distribution ``sample_next`` draws from: ``logits: (V,)`` -> probabilities ``(V,)`` (greedy: one-hot)."""
    if setting.temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.shape[-1]).float()
    return filter_logits(logits.float()[None] / setting.temperature, setting.top_k, setting.top_p)[0].softmax(-1)


def sampling_frame(
    logits: torch.Tensor, vocab: Sequence[str], setting: Sampling, sample: str, context: str, n_show: int = 20
):
    """Bars: the top ``n_show`` tokens of ``softmax(logits)``, as reshaped by ``setting``; caption: a sample.

    ``logits: (V,)`` after ``context``; ``sample``: a continuation generated with the same setting.
    """
    logits = logits.detach().float().cpu()
    base = logits.softmax(-1)
    p = sampling_distribution(logits, setting)
    order = base.argsort(descending=True)[:n_show]
    fig, ax = plt.subplots(figsize=(7.2, 2.9))
    x = np.arange(len(order))
    ax.bar(x, p[order].numpy(), color="#1976d2", label=f"{setting}")
    ax.plot(x, base[order].numpy(), "k_", markersize=14, mew=2, label="T = 1, no filter (the model)")
    ax.set_xticks(x, [show_token(vocab[i]) for i in order.tolist()], fontsize=9, rotation=60)
    ax.set_ylim(0, 1)
    ax.set_xlabel(f"the {n_show} most likely next tokens (by the model's own probabilities)")
    ax.set_ylabel("probability")
    ax.set_title(
        f"Next-token distribution after \u201c{context[-30:]!s}\u201d: {setting}".replace("\n", "⏎"), fontsize=9
    )
    ax.legend(fontsize=8, loc="upper right")
    kept = int((p > 0).sum())
    caption = (
        f"<div style='max-width:620px;font-size:90%'><b>{html.escape(str(setting))}</b>: {kept} of "
        f"{len(vocab)} tokens can be drawn; entropy {float(entropy_bits(p)):.2f} bits (the model's own: "
        f"{float(entropy_bits(base)):.2f}). A sample with this setting (seed 0):"
        f"<pre style='white-space:pre-wrap;margin:2px 0'>{html.escape(context)}<b>{html.escape(sample)}</b>"
        "</pre></div>"
    )
    return fig, caption


def sampling_slider(
    logits: torch.Tensor,
    vocab: Sequence[str],
    settings: Sequence[Sampling],
    samples: Sequence[str],
    context: str,
    initial: Sampling | None = None,
):
    """A ``frame_slider`` over ``settings`` (each with its precomputed ``sample``)."""
    frames = dict(zip(settings, samples))
    return frame_slider(
        lambda s: sampling_frame(logits, vocab, s, frames[s], context),
        list(settings),
        description="setting",
        initial=initial,
    )
