"""Small, seeded experiments behind chapters 05 (encoder and decoder) and 06 (masking).

Chapter 05
  * ``set_norm_placement`` / ``norm_placement_experiment``: the same tiny GPT trained with no LayerNorm,
    post-norm (the 2017 paper) and pre-norm (GPT-2); ``gradient_norms_by_layer`` at initialisation.
  * ``cross_attention_maps``: what the trained translator's decoder reads in the source, character by character.

Chapter 06
  * ``set_causal`` / ``future_sensitivity``: the leak test (change the future, watch the past).
  * ``mask_fill_table``: ``-1e9`` vs ``-inf`` vs ``finfo.min`` in fp32 / fp16 / bf16.
  * ``masked_weight``: how much weight a key gets when its score is *replaced* by a fixed value such as
    GPT-2's former ``-1e4`` (karpathy/minGPT#75, huggingface/transformers#17121).
  * ``padded_rows_experiment``: padded positions as queries (harvardnlp/annotated-transformer#137).
  * ``train_char_gpt``: a tiny character GPT trained with or without its causal mask.

The library itself never fills masks with ``-1e9`` or ``-1e4`` (see ``masking.py``); those constants appear
here only as the pitfalls being measured.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import attention_weights, scaled_dot_product_attention
from .data import get_batch, shakespeare_corpus
from .device import default_device
from .models import GPT, GPTConfig, Transformer
from .variants import PLACEMENTS, is_causal, set_causal, set_norm_placement  # noqa: F401 (chapters call them as ex.*)

NAIVE_FILL = -1e9  # a common tutorial fill value: the pitfall measured in chapter 06
GPT2_OLD_FILL = -1e4  # the value GPT-2 implementations replaced masked scores with (huggingface/transformers#17121)


# ============================================================================= chapter 05: norm placement
@dataclass
class NormConfig:
    """A deep, thin character GPT at a high learning rate with no warm-up: where placement matters."""
    n_layers: int = 8
    d_model: int = 32
    n_heads: int = 4
    block_size: int = 16
    batch_size: int = 32
    steps: int = 120
    lr: float = 3e-3
    warmup_steps: int = 0
    seeds: tuple[int, ...] = (0, 1, 2)
    eval_batches: int = 4
    final_window: int = 20  # "final training loss" = mean of the last this-many steps


@dataclass
class NormRun:
    placement: str
    seed: int
    losses: list[float]  # training loss of every step (stops early if it became NaN/inf)
    val_loss: float  # on fixed held-out batches after training (nan if diverged)
    diverged: bool

    def final_loss(self, window: int) -> float:
        return float("nan") if self.diverged else sum(self.losses[-window:]) / len(self.losses[-window:])


def make_norm_model(placement: str, cfg: NormConfig, seed: int, device=None) -> GPT:
    """The experiment's GPT: same initial weights for a given seed, whatever the placement."""
    corpus = shakespeare_corpus()
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=corpus.tokenizer.vocab_size, block_size=cfg.block_size,
                          n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_model=cfg.d_model))
    return set_norm_placement(model, placement).to(device or default_device())


def _val_batches(cfg: NormConfig, device) -> list:
    gen = torch.Generator().manual_seed(1234)
    val = shakespeare_corpus().val
    return [get_batch(val, cfg.block_size, 32, gen, device) for _ in range(cfg.eval_batches)]


def run_norm_placement(placement: str, seed: int, cfg: NormConfig, progress: bool = True, device=None) -> NormRun:
    """Train one model with AdamW (no weight decay, no clipping, linear warm-up over ``cfg.warmup_steps``).
    A loss that turns NaN/inf ends the run and marks it diverged; nothing is raised."""
    from tqdm.auto import tqdm

    model = make_norm_model(placement, cfg, seed, device)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    gen, data = torch.Generator().manual_seed(seed), shakespeare_corpus().train
    losses, diverged = [], False
    for step in tqdm(range(cfg.steps), desc=f"{placement}-norm, seed {seed}", disable=not progress, leave=False):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
        x, y = get_batch(data, cfg.block_size, cfg.batch_size, gen, device)
        loss = model(x, y)[1]
        if not torch.isfinite(loss):
            diverged = True
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    val = float("nan")
    if not diverged:
        model.eval()
        with torch.no_grad():
            val = sum(model(x, y)[1].item() for x, y in _val_batches(cfg, device)) / cfg.eval_batches
        diverged = not math.isfinite(val)
    return NormRun(placement, seed, losses, val, diverged)


def norm_placement_experiment(cfg: NormConfig = NormConfig(), placements=PLACEMENTS, progress: bool = True,
                              device=None) -> dict[str, list[NormRun]]:
    """Every placement, every seed in ``cfg.seeds``: ``{placement: [NormRun per seed]}``."""
    return {p: [run_norm_placement(p, s, cfg, progress, device) for s in cfg.seeds] for p in placements}


def unigram_entropy(ids: torch.Tensor, vocab_size: int) -> float:
    """Entropy (nats) of the character frequencies of ``ids: (N,)``: the loss of a model that predicts every
    character with its overall frequency, ignoring the context (the first plateau of a character model)."""
    p = torch.bincount(ids, minlength=vocab_size).double() / ids.numel()
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def moving_average(values, window: int = 10) -> torch.Tensor:
    """Mean of each run of ``window`` consecutive values: ``(len(values) - window + 1,)``."""
    t = torch.tensor(values, dtype=torch.float64)
    return t.unfold(0, window, 1).mean(-1) if len(t) >= window else t


def steps_below(losses, level: float, window: int = 10) -> int | None:
    """First step at which the ``window``-step mean of ``losses`` is below ``level`` (the window's last step),
    or None if it never is."""
    below = (moving_average(losses, window) < level).nonzero()
    return None if len(below) == 0 else int(below[0]) + window - 1


def largest_rise(losses, window: int = 10) -> float:
    """The largest amount by which the ``window``-step mean loss rose above its best value so far (0 for a loss
    that never goes back up): a measure of spikes."""
    m = moving_average(losses, window)
    return float((m - torch.cummin(m, 0).values).max()) if len(m) else 0.0


def summarize_runs(runs: list[NormRun], window: int = 20, level: float | None = None) -> dict:
    """Over the seeds: ``(mean, sample std)`` of the final training loss, the validation loss and the largest
    rise (``largest_rise``) of the runs that did not diverge; how many diverged; and, if ``level`` is given,
    the steps each run took to get below it (``steps_below``; ``None`` for a run that never did)."""
    ok = [r for r in runs if not r.diverged]

    def mean_std(values):
        t = torch.tensor(values, dtype=torch.float64)
        if len(values) == 0:
            return float("nan"), float("nan")
        return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0
    out = {"final_loss": mean_std([r.final_loss(window) for r in ok]), "val_loss": mean_std([r.val_loss for r in ok]),
           "largest_rise": mean_std([largest_rise(r.losses) for r in ok]), "diverged": len(runs) - len(ok),
           "runs": len(runs)}
    if level is not None:
        out["steps_below"] = [None if r.diverged else steps_below(r.losses, level) for r in runs]
    return out


def gradient_norms_by_layer(model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(n_layers,)``: the L2 norm of the loss gradient over each block's parameters, for one batch.

    Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture") study these gradients at
    initialisation to explain why post-norm needs a learning-rate warm-up and pre-norm does not.
    """
    model.zero_grad(set_to_none=True)
    model(x, y)[1].backward()
    norms = [torch.sqrt(sum((p.grad.float() ** 2).sum() for p in b.parameters() if p.grad is not None))
             for b in model.blocks]
    model.zero_grad(set_to_none=True)
    return torch.stack(norms).cpu()


# ============================================================================= chapter 05: cross-attention
@torch.no_grad()
def cross_attention_maps(model: Transformer, src_tok, tgt_tok, text: str, max_len: int = 16):
    """Translate ``text`` greedily, then rerun the decoder on its own output to read the cross-attention.

    Returns ``(source_chars, output_chars, weights)``: ``weights: (n_layers, n_heads, T_out, S)``, where row
    ``i`` is the decoder position that *produced* ``output_chars[i]`` (the last one is ``"<eos>"``).
    """
    from .train import greedy_decode

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    src = torch.tensor([src_tok.encode(text)], device=device)  # (1, S)
    out = greedy_decode(model, src, tgt_tok.bos_id, tgt_tok.eos_id, max_len)[0].tolist()
    out = out[: out.index(tgt_tok.eos_id) + 1] if tgt_tok.eos_id in out else out
    tgt_in = torch.tensor([[tgt_tok.bos_id] + out[:-1]], device=device)  # (1, T): BOS + all but the last
    src_mask = src != model.cfg.pad_id
    model.decode(tgt_in, model.encode(src, src_mask), src_mask, need_weights=True)
    weights = torch.stack([layer.cross_weights[0] for layer in model.decoder]).float().cpu()  # (L, H, T, S)
    model.train(was_training)
    labels = [tgt_tok.itos[i] for i in out]
    return list(text), labels, weights


@torch.no_grad()
def sequence_log_prob(model: Transformer, src_tok, tgt_tok, text: str, output: str) -> float:
    """``log p(output + <eos> | text)`` under ``model`` (teacher forcing): the score beam search maximises."""
    device = next(model.parameters()).device
    src = torch.tensor([src_tok.encode(text)], device=device)
    target = tgt_tok.encode(output, eos=True)
    tgt_in = torch.tensor([[tgt_tok.bos_id] + target[:-1]], device=device)
    was_training = model.training
    model.eval()
    logits = model(src, tgt_in)[0].float()  # (T, V)
    logits[:, [model.cfg.pad_id, tgt_tok.bos_id]] = float("-inf")  # never outputs, as in greedy_decode/beam_search
    logp = F.log_softmax(logits, dim=-1)
    model.train(was_training)
    return float(logp[torch.arange(len(target)), torch.tensor(target, device=device)].sum())


# ============================================================================= chapter 06: the causal mask
@torch.no_grad()
def future_sensitivity(model: GPT, idx: torch.Tensor, position: int, seed: int = 0) -> torch.Tensor:
    """The leak test. Replace every token *after* ``position`` by random ones and return, for each position
    ``t``, the largest absolute change of the logits there: ``(T,)``.

    With a working causal mask the entries ``t <= position`` are exactly 0: the past cannot see the future.
    """
    if idx.dim() != 2 or not 0 <= position < idx.shape[1] - 1:
        raise ValueError(f"need idx (B, T) and 0 <= position < T - 1, got idx {tuple(idx.shape)}, position={position}")
    gen = torch.Generator().manual_seed(seed)
    changed = idx.clone()
    future = torch.randint(0, model.cfg.vocab_size, changed[:, position + 1:].shape, generator=gen)
    changed[:, position + 1:] = future.to(idx.device)
    a, b = model(idx)[0].float(), model(changed)[0].float()  # (B, T, V)
    return (a - b).abs().amax(dim=(0, 2)).cpu()  # (T,)


@dataclass
class CausalConfig:
    """A tiny character GPT for the with/without-mask comparison. Rotary positions (chapter 04) make "read the
    next position" easy to learn, so the unmasked model finds the copying shortcut within the budget."""
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    block_size: int = 32
    batch_size: int = 32
    steps: int = 300
    lr: float = 5e-3
    warmup_steps: int = 30
    eval_batches: int = 4
    seed: int = 0
    positional: str = "rope"


def causal_val_batches(cfg: CausalConfig) -> list:
    gen = torch.Generator().manual_seed(1234)
    return [get_batch(shakespeare_corpus().val, cfg.block_size, 32, gen) for _ in range(cfg.eval_batches)]


def train_char_gpt(causal: bool, cfg: CausalConfig = CausalConfig(), progress: bool = True, device=None):
    """Train a tiny GPT on Shakespeare with (``causal=True``) or without its causal mask.

    Returns ``(model, history)``; ``history.val_loss`` is measured the way the model was trained (so an
    unmasked model is evaluated unmasked too, as a careless training script would).
    """
    from .train import TrainConfig, evaluate_loss, train

    corpus = shakespeare_corpus()
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(vocab_size=corpus.tokenizer.vocab_size, block_size=cfg.block_size,
                          n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_model=cfg.d_model, positional=cfg.positional))
    set_causal(model, causal)
    gen = torch.Generator().manual_seed(cfg.seed)
    val = causal_val_batches(cfg)
    tcfg = TrainConfig(steps=cfg.steps, lr=cfg.lr, warmup_steps=cfg.warmup_steps, weight_decay=0.0,
                       eval_every=max(1, cfg.steps // 6), seed=cfg.seed, progress=progress)
    hist = train(model, lambda step: get_batch(corpus.train, cfg.block_size, cfg.batch_size, gen), tcfg,
                 eval_fn=lambda m: evaluate_loss(m, val), device=device)
    return model, hist


@torch.no_grad()
def last_position_loss(model: GPT, batches) -> float:
    """Cross-entropy at the *last* position of each window only: there the next character is not in the input,
    so no mask or lack of one can help. ``batches``: ``(x, y)`` pairs of ``(B, T)``."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    losses = [F.cross_entropy(model(x.to(device))[0][:, -1].float(), y[:, -1].to(device)).item() for x, y in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


# ============================================================================= chapter 06: fill values
FILLS = ("-1e9", "-inf", "finfo.min")


def fill_value(fill: str, dtype: torch.dtype) -> float:
    """The Python number a mask uses for a blocked score."""
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    return {"-1e9": NAIVE_FILL, "-inf": float("-inf"), "finfo.min": torch.finfo(dtype).min}[fill]


def apply_fill(scores: torch.Tensor, keep: torch.Tensor, fill: str, how: str) -> torch.Tensor:
    """Block the scores where ``keep`` is False, in ``scores``' dtype.

    ``how="replace"``: ``scores.masked_fill(~keep, value)``; ``how="add"``: ``scores + additive`` with an
    additive mask (0 / value) built in ``scores``' dtype, as many codebases do. May raise (fp16 cannot hold -1e9).
    """
    value = fill_value(fill, scores.dtype)
    if how == "replace":
        return scores.masked_fill(~keep, value)
    if how == "add":
        additive = torch.zeros((), dtype=torch.float64).new_tensor(value).to(scores.dtype)  # the cast is the pitfall
        return scores + torch.where(keep, torch.zeros((), dtype=scores.dtype), additive)
    raise ValueError(f"how must be 'replace' or 'add', got {how!r}")


TABLE_SCORES = torch.tensor([[1.5, -0.5, -30.0, 2.0], [1.5, -0.5, -30.0, 2.0]])  # (2, 4) one row, twice
TABLE_KEEP = torch.tensor([[True, True, False, False], [False, False, False, False]])  # partly / fully masked


def _describe_row(w: torch.Tensor) -> str:
    if torch.isnan(w).any():
        return "NaN"
    n = w.numel()
    if torch.allclose(w.double(), torch.full_like(w.double(), 1.0 / n), atol=1e-3):
        return f"uniform (1/{n} each)"
    return "[" + ", ".join(f"{v:.3g}" for v in w.tolist()) + "]"


def mask_fill_outcome(dtype: torch.dtype, fill: str, how: str, scores: torch.Tensor = TABLE_SCORES,
                      keep: torch.Tensor = TABLE_KEEP) -> dict:
    """One row of ``mask_fill_table``: what the blocked scores became, the weight left on the blocked keys of
    the partly masked row 0, and the softmax of the fully masked row 1 (softmax in the scores' dtype)."""
    row = {"dtype": str(dtype).replace("torch.", ""), "fill": fill, "how": how}
    try:
        filled = apply_fill(scores.to(dtype), keep, fill, how)
    except RuntimeError as err:
        return {**row, "blocked score": f"error: {str(err).splitlines()[0][:60]}", "weight on blocked keys": "-",
                "fully masked row": "-"}
    w = torch.softmax(filled, dim=-1).float()
    blocked = sorted({f"{v:.4g}" for v in filled[~keep].float().tolist()})
    return {**row, "blocked score": ", ".join(blocked), "weight on blocked keys": f"{w[0][~keep[0]].sum().item():.3g}",
            "fully masked row": _describe_row(w[1])}


def mask_fill_table(dtypes=(torch.float32, torch.float16, torch.bfloat16), fills=FILLS,
                    hows=("replace", "add")) -> list[dict]:
    """Every (dtype, fill, how) combination on the same scores (``TABLE_SCORES``, ``TABLE_KEEP``)."""
    return [mask_fill_outcome(d, f, h) for d in dtypes for h in hows for f in fills]


def library_softmax(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The library's masked softmax (``attention_weights``) applied to given scores ``(R, T)`` and a boolean
    ``keep: (R, T)``. The scores are passed as ``q k / sqrt(1)`` with ``q = 1`` and ``k = scores``."""
    q = torch.ones(*scores.shape[:-1], 1, 1, dtype=scores.dtype, device=scores.device)  # (R, 1, 1)
    return attention_weights(q, scores[..., :, None], keep[..., None, :])[..., 0, :]  # (R, T)


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A list of dicts as a Markdown table (for ``IPython.display.Markdown``)."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def masked_weight(allowed_scores: torch.Tensor, n_masked: int, fill: float | None,
                  dtype: torch.dtype = torch.float32) -> float:
    """Total weight that ``n_masked`` blocked keys receive when their scores are **replaced** by ``fill`` (as
    GPT-2 code did with ``-1e4``), next to real keys with ``allowed_scores: (n,)``; softmax in ``dtype``.

    Closed form: ``n_masked e^fill / (n_masked e^fill + sum_j e^{s_j})``. ``fill=None`` uses the library's
    boolean mask instead (``attention_weights``), for which the answer is exactly 0.
    """
    n = allowed_scores.numel()
    if fill is None:
        scores = torch.cat([allowed_scores.double(), torch.zeros(n_masked, dtype=torch.float64)]).to(dtype)
        keep = torch.arange(n + n_masked) < n
        return library_softmax(scores[None], keep[None])[0, n:].double().sum().item()
    scores = torch.cat([allowed_scores.double(), torch.full((n_masked,), float(fill), dtype=torch.float64)])
    return torch.softmax(scores.to(dtype), dim=-1)[n:].double().sum().item()


# ============================================================================= chapter 06: padded query rows
@dataclass
class PaddedRowsResult:
    variant: str
    nan_rows_layer1: int  # padded query rows that became NaN after the first layer
    nan_real_outputs: bool  # did NaN reach a real (non-padded) position after the last layer?
    loss: float  # cross-entropy over real positions only (ignore_index on the padding)
    nan_grad: bool
    real_diff: float  # max |output - output of the same sequence run alone, unpadded| over real positions


def _naive_attention(q, k, v, keep, fill):
    """Teaching-only attention with a fill value (the pitfall): ``q, k, v: (B, T, d)``, ``keep: (B, T, T)``."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, T, T)
    return torch.softmax(apply_fill(scores, keep, fill, "replace"), dim=-1) @ v


def padded_rows_experiment(lengths=(6, 4), d: int = 16, vocab: int = 11, n_layers: int = 2,
                           seed: int = 0) -> list[PaddedRowsResult]:
    """A padded batch through ``n_layers`` of residual self-attention ``h = h + attn(h)`` and a linear read-out.

    Variants: the padding mask on keys only (the Annotated Transformer's ``src_mask``; library path); keys and
    queries both masked (the change proposed in harvardnlp/annotated-transformer#137) with ``-inf``, with
    ``finfo.min``, and through the library (boolean mask, fully masked rows give 0).
    """
    gen = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    lengths_t = torch.tensor(lengths)
    real = torch.arange(T)[None, :] < lengths_t[:, None]  # (B, T) True on real tokens
    x0 = torch.randn(B, T, d, generator=gen)
    w_qkv = torch.randn(3, d, d, generator=gen) / math.sqrt(d)
    w_out = torch.randn(d, vocab, generator=gen) / math.sqrt(d)
    targets = torch.randint(0, vocab, (B, T), generator=gen).masked_fill(~real, -100)
    keys_only = real[:, None, :].expand(B, T, T)  # (B, Tq, Tk): every query sees the real keys
    both = keys_only & real[:, :, None]  # padded queries see nothing

    def forward(x, keep, fill, w):
        h, first = x, None
        for _ in range(n_layers):
            q, k, v = (h @ w[i] for i in range(3))
            a = scaled_dot_product_attention(q, k, v, keep) if fill is None else _naive_attention(q, k, v, keep, fill)
            h = h + a
            first = h if first is None else first
        return h, first

    variants = [("keys only (library)", keys_only, None), ("keys + queries, -inf", both, "-inf"),
                ("keys + queries, finfo.min", both, "finfo.min"), ("keys + queries (library)", both, None)]
    results = []
    for name, keep, fill in variants:
        w = w_qkv.clone().requires_grad_(True)
        h, first = forward(x0, keep, fill, w)
        loss = F.cross_entropy((h @ w_out).flatten(0, 1), targets.flatten(), ignore_index=-100)
        loss.backward()
        with torch.no_grad():  # each sequence alone, without padding
            diffs = []
            for b, n in enumerate(lengths):
                alone, _ = forward(x0[b:b + 1, :n], torch.ones(1, n, n, dtype=torch.bool), fill, w)
                diffs.append((alone[0] - h[b, :n]).abs().max())
            diff = torch.stack(diffs).max().item()
        results.append(PaddedRowsResult(name, int(torch.isnan(first).any(-1)[~real].sum()),
                                        bool(torch.isnan(h[real]).any()), loss.item(), bool(torch.isnan(w.grad).any()),
                                        diff))
    return results
