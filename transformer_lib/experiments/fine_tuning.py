"""Chapter 12's runs: four ways to teach MiniLM a task, and the record of all the chapter's runs.

Used in chapter 12.

**The task** (``task``): ``task_data.play_line_task`` with its defaults (which of four plays a line comes from; 300
train and 100 held-out lines per play). A ``SentenceClassifier`` puts a linear head on MiniLM's mean-pooled,
normalised sentence embedding. ``train_method`` trains one of ``METHODS``:

* ``"probe"``: the encoder frozen, only the head trains (on embeddings computed once);
* ``"full"``: the top ``top_layers`` encoder layers and the head train (full fine-tuning of the top of the model);
* ``"lora"``: rank-``r`` adapters (``lora.apply_lora``) on every linear of every layer, and the head;
* ``"qlora"``: the same adapters on a base whose linears are stored in NF4 with double quantization
  (``qlora.apply_qlora``), and the head.

Each run: AdamW, ``steps`` steps of ``batch_size`` lines cut to ``MAX_TOKENS`` word pieces, constant learning rate
after a short warm-up, seeded (the seed draws the head's and adapters' initialisation and the batches; the split is
the same for every seed). ``forgetting`` is chapter 08's agreement: the mean cosine similarity between a model's
sentence embeddings and the original MiniLM's, on lines of other plays than the task's.

``scripts/train_fine_tuning.py`` runs ``train_runs`` (several seeds) into ``checkpoints/fine_tuning.*``: the record of
every run, the two language models (``experiments.pretraining``), and seed 0's heads, LoRA and QLoRA adapters and
top-layer change (``kept_tensors``: int8 with a scale per row, 3.6 MB instead of 14.2 MB in float32). The page loads
them (``load_runs``) and measures again.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

from ..data.checkpoint_io import load_weights, provenance, save_tensors_and_record, tied_names
from ..data.corpus import shakespeare_works
from ..training.lora import LoRAConfig, apply_lora
from ..utils.params import count_parameters
from ..utils.modes import eval_mode
from ..models.pretrained import load_minilm, mean_pool
from ..training.qlora import apply_qlora
from ..quant.grids import QuantizedTensor, quantize
from ..data.task_data import DEFAULT_PLAYS, TextClassificationData, play_line_task
from .pretraining import OBJECTIVES, ObjectiveConfig, make_lm, train_objective
from .threads import torch_threads
from ..checkpoints import CHECKPOINT_DIR
from ..utils.checks import check_choice, check_empty, check_equal

CHECKPOINT = CHECKPOINT_DIR / "fine_tuning"
METHODS = ("probe", "full", "lora", "qlora")
MAX_TOKENS = 32  # word pieces per line, [CLS] and [SEP] included (chapter 08's cut)
TARGETS = ("qkv", "out", "up", "down")  # every linear of every encoder layer


# ----------------------------------------------------------------------------- the task
@dataclass
class FineTuneConfig:
    """One run's settings (``train_method``)."""

    steps: int = 100
    batch_size: int = 16
    lr_head: float = 3e-3
    lr_full: float = 1e-4
    lr_lora: float = 2e-3
    warmup_steps: int = 10
    r: int = 8
    alpha: float = 16.0
    top_layers: int = 2
    probe_steps: int = 300  # full-batch steps on the frozen embeddings


def task() -> TextClassificationData:
    """The chapter's classification task: ``play_line_task()`` with its defaults."""
    return play_line_task()


class SentenceClassifier(nn.Module):
    """``encoder`` (a ``BertEncoder``, possibly with adapters), mean pooling, L2 normalisation, times
    ``sqrt(d_model)`` (so each feature is of order one), then ``head: Linear(d_model, n_classes)``.
    ``forward(enc)`` takes the tokenizer's dict and returns logits ``(B, n_classes)``."""

    def __init__(self, encoder: nn.Module, n_classes: int, generator: torch.Generator | None = None):
        super().__init__()
        self.encoder = encoder
        d = encoder.cfg.d_model
        self.head = nn.Linear(d, n_classes)
        with torch.no_grad():
            bound = 1 / math.sqrt(d)  # nn.Linear's default initialisation, drawn from the run's generator
            self.head.weight.uniform_(-bound, bound, generator=generator)
            self.head.bias.uniform_(-bound, bound, generator=generator)

    def features(self, enc: dict) -> torch.Tensor:
        hidden = self.encoder(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state
        e = F.normalize(mean_pool(hidden, enc["attention_mask"]).float(), dim=-1)  # (B, d) unit rows
        return e * math.sqrt(e.shape[-1])

    def forward(self, enc: dict) -> torch.Tensor:
        return self.head(self.features(enc))  # (B, n_classes)


def build_model(
    method: str,
    seed: int = 0,
    cfg: FineTuneConfig = FineTuneConfig(),
    r: int | None = None,
    n_classes: int = len(DEFAULT_PLAYS),
) -> SentenceClassifier:
    """A fresh copy of MiniLM with the method's trainable parts (``requires_grad``) and a fresh head, from
    ``seed``."""
    check_choice("method", method, METHODS)
    encoder = copy.deepcopy(load_minilm(device="cpu")[0])
    encoder.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    lcfg = LoRAConfig(
        r=cfg.r if r is None else r, alpha=cfg.alpha * (cfg.r if r is None else r) / cfg.r, target_modules=TARGETS
    )
    if method == "full":
        for layer in encoder.layers[-cfg.top_layers :]:
            layer.requires_grad_(True)
    elif method == "lora":
        apply_lora(encoder, lcfg, generator=gen)
    elif method == "qlora":
        apply_qlora(encoder, lcfg, generator=gen)
    return SentenceClassifier(encoder, n_classes, generator=gen)


def encode(texts: list[str]) -> dict:
    return load_minilm(device="cpu")[1].encode(list(texts), max_length=MAX_TOKENS)


def optimizer_for(model: SentenceClassifier, method: str, cfg: FineTuneConfig = FineTuneConfig()):
    """AdamW (no weight decay) over the trainable parameters: the head at ``lr_head``, the rest at the method's
    rate."""
    body = [p for p in model.encoder.parameters() if p.requires_grad]
    lr = cfg.lr_full if method == "full" else cfg.lr_lora
    groups = [{"params": list(model.head.parameters()), "lr": cfg.lr_head}]
    if body:
        groups.append({"params": body, "lr": lr})
    return torch.optim.AdamW(groups, weight_decay=0.0)


def training_step(model: SentenceClassifier, optimizer, enc: dict, labels: torch.Tensor) -> float:
    """One optimizer step on one batch; returns the loss."""
    model.train()
    loss = F.cross_entropy(model(enc), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def frozen_features(texts: list[str], batch_size: int = 64) -> torch.Tensor:
    """The original MiniLM's features (``SentenceClassifier.features``) of ``texts``: ``(N, 384)``."""
    clf = SentenceClassifier(load_minilm(device="cpu")[0], 2)
    return torch.cat([clf.features(encode(texts[i : i + batch_size])) for i in range(0, len(texts), batch_size)])


def train_method(
    method: str,
    seed: int = 0,
    cfg: FineTuneConfig = FineTuneConfig(),
    data=None,
    r: int | None = None,
    steps: int | None = None,
    progress: bool = True,
    train_features=None,
):
    """Train one method; returns ``(model, losses, seconds)``. ``"probe"`` trains the head on ``train_features``
    (``frozen_features`` of the training lines, computed when not given), full batch."""
    data = task() if data is None else data
    model = build_model(method, seed, cfg, r=r)
    opt = optimizer_for(model, method, cfg)
    losses, start = [], time.perf_counter()
    from tqdm.auto import tqdm

    if method == "probe":
        feats = frozen_features(data.train_texts) if train_features is None else train_features
        for step in tqdm(
            range(cfg.probe_steps if steps is None else steps),
            disable=not progress,
            leave=False,
            desc=f"probe seed {seed}",
        ):
            loss = F.cross_entropy(model.head(feats), data.train_labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    else:
        gen = torch.Generator().manual_seed(1000 + seed)
        n = len(data.train_texts)
        for step in tqdm(
            range(cfg.steps if steps is None else steps),
            disable=not progress,
            leave=False,
            desc=f"{method} seed {seed}",
        ):
            idx = torch.randint(n, (cfg.batch_size,), generator=gen).tolist()
            for g in opt.param_groups:  # linear warm-up, then constant
                g["lr"] = g.setdefault("peak_lr", g["lr"]) * min(1.0, (step + 1) / max(1, cfg.warmup_steps))
            losses.append(training_step(model, opt, encode([data.train_texts[i] for i in idx]), data.train_labels[idx]))
    model.eval()
    return model, losses, time.perf_counter() - start


@torch.no_grad()
def predict(model: SentenceClassifier, texts: list[str], batch_size: int = 100) -> torch.Tensor:
    """Predicted labels ``(N,)``."""
    with eval_mode(model):
        return torch.cat(
            [model(encode(texts[i : i + batch_size])).argmax(-1) for i in range(0, len(texts), batch_size)]
        )


def accuracy(model: SentenceClassifier, data: TextClassificationData) -> float:
    """Held-out accuracy."""
    return (predict(model, data.test_texts) == data.test_labels).float().mean().item()


def forgetting_lines(n: int = 96, seed: int = 5) -> list[str]:
    """``n`` lines (6+ words) of plays the task does not use, for chapter 08's agreement."""
    from .minilm_pruning import corpus_lines

    task_plays = {" ".join(t.split()) for p in DEFAULT_PLAYS for t in shakespeare_works()[p].splitlines()}
    lines = [s for s in corpus_lines() if " ".join(s.split()) not in task_plays]
    pick = torch.randperm(len(lines), generator=torch.Generator().manual_seed(seed))[:n].tolist()
    return [lines[i] for i in pick]


@torch.no_grad()
def embeddings(encoder: nn.Module, texts: list[str]) -> torch.Tensor:
    """Sentence embeddings (mean pooling, L2 normalisation) of ``texts`` through ``encoder``: ``(N, 384)``."""
    enc = encode(texts)
    with eval_mode(encoder):
        hidden = encoder(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state
    return F.normalize(mean_pool(hidden, enc["attention_mask"]).float(), dim=-1)


def forgetting(encoder: nn.Module, lines: list[str], original: torch.Tensor | None = None) -> float:
    """Chapter 08's agreement: mean cosine similarity of ``encoder``'s embeddings of ``lines`` with the original
    MiniLM's (1.0: nothing forgotten)."""
    original = embeddings(load_minilm(device="cpu")[0], lines) if original is None else original
    return (embeddings(encoder, lines) * original).sum(-1).mean().item()


# ----------------------------------------------------------------------------- what the checkpoint keeps
def kept_tensors(model: SentenceClassifier, method: str) -> dict[str, torch.Tensor]:
    """What the checkpoint keeps of a trained model: the head, and the adapters (``"lora"``, ``"qlora"``) or, for
    ``"full"``, the change to each trained tensor (trained minus MiniLM's) as int8 codes ``<name>.q`` with one float32
    scale per row ``<name>.scale`` (chapter 09's absmax, ``quant.quantize``): a quarter of the float32 bytes."""
    kept = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k or k.startswith("head.")}
    if method == "full":
        original = load_minilm(device="cpu")[0].state_dict()
        for name, p in model.encoder.named_parameters():
            if p.requires_grad:  # the top layers
                qt = quantize(p.detach().cpu() - original[name], bits=8, granularity="channel")
                kept[f"encoder.{name}.q"], kept[f"encoder.{name}.scale"] = qt.q, qt.scale
    return kept


@torch.no_grad()
def add_weight_delta(model: SentenceClassifier, delta: dict[str, torch.Tensor]) -> None:
    """The inverse of ``kept_tensors`` for ``"full"``: each ``encoder.<name>`` in ``delta`` becomes MiniLM's tensor
    plus the stored change (codes times scales); ``delta`` empty: nothing changes."""
    original = load_minilm(device="cpu")[0].state_dict()
    params = dict(model.encoder.named_parameters())
    keys = [k for k in delta if k.endswith(".q")]  # encoder.<name>.q: the codes of <name>'s change
    unknown = [key for key in keys if key[len("encoder.") : -len(".q")] not in params]
    check_empty("the checkpoint's weight changes that name no tensor of the encoder", unknown)
    for key in keys:
        name = key[len("encoder.") : -len(".q")]
        change = QuantizedTensor(delta[key], delta[key[:-2] + ".scale"], None, 8, "channel", None).dequantize()
        params[name].copy_(original[name] + change)


# ----------------------------------------------------------------------------- all runs
@dataclass
class RunsConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    fine_tune: FineTuneConfig = field(default_factory=FineTuneConfig)


def run_one(
    method: str, seed: int, cfg: FineTuneConfig, data, lines, original, r=None, progress=True, train_features=None
) -> tuple[dict, SentenceClassifier]:
    """Train one method and measure it: ``({"accuracy", "agreement", "trainable", "final_loss", "seconds"},
    model)``."""
    with torch_threads(1):
        model, losses, seconds = train_method(
            method, seed, cfg, data, r=r, progress=progress, train_features=train_features
        )
        acc = accuracy(model, data)
        agree = forgetting(model.encoder, lines, original)
    trainable, total = count_parameters(model, trainable=True), count_parameters(model)
    return {
        "accuracy": acc,
        "agreement": agree,
        "trainable": trainable,
        "total": total,
        "final_loss": sum(losses[-10:]) / len(losses[-10:]),
        "seconds": round(seconds, 1),
    }, model


def train_runs(cfg: RunsConfig = RunsConfig(), progress: bool = True, device=None) -> dict:
    """Both language models and every method for every seed. CPU only."""
    check_equal("device", "cpu" if device is None else device, "cpu", note="the committed runs are trained on the CPU")
    start = time.perf_counter()
    lms, lm_hist = {}, {}
    for objective in OBJECTIVES:
        lms[objective], lm_hist[objective] = train_objective(objective, cfg.objective, progress=progress)
    data = task()
    lines = forgetting_lines()
    original = embeddings(load_minilm(device="cpu")[0], lines)
    with torch_threads(1):
        feats = frozen_features(data.train_texts)
    results, kept = {m: {} for m in METHODS}, {}
    for method in METHODS:
        for seed in cfg.seeds:
            results[method][str(seed)], model = run_one(
                method, seed, cfg.fine_tune, data, lines, original, progress=progress, train_features=feats
            )
            if seed == cfg.seeds[0]:
                kept[method] = kept_tensors(model, method)
    return {
        "lms": lms,
        "lm_histories": lm_hist,
        "results": results,
        "kept": kept,
        "cfg": cfg,
        "seconds": time.perf_counter() - start,
    }


def save_runs(runs: dict, stem: Path = CHECKPOINT) -> None:
    """``<stem>.safetensors``: both language models (``lm.<objective>.``) and seed 0's trained heads and adapters
    (``<method>.``); ``<stem>.json``: every run's measurements and the settings."""
    tensors = {}
    for objective, model in runs["lms"].items():
        tied = tied_names(model)
        tensors.update(
            {
                f"lm.{objective}.{k}": v.detach().contiguous().cpu()
                for k, v in model.state_dict().items()
                if k not in tied
            }
        )
    for method, state in runs["kept"].items():
        tensors.update({f"{method}.{k}": v.contiguous() for k, v in state.items()})
    cfg = runs["cfg"]
    record = {
        "objective": asdict(cfg.objective),
        "fine_tune": asdict(cfg.fine_tune),
        "seeds": list(cfg.seeds),
        "train_seconds": round(runs["seconds"], 1),
        "lm_histories": {k: h.to_dict() for k, h in runs["lm_histories"].items()},
        "results": runs["results"],
        **provenance(threads=1),
    }
    save_tensors_and_record(stem, tensors, record)


def load_runs(stem: Path = CHECKPOINT) -> dict:
    """The committed runs: ``{"lms": {objective: GPT}, "models": {method: SentenceClassifier}, "record": dict}``
    (CPU, eval mode; ``"models"`` holds seed 0's model of every method)."""
    record = json.loads(stem.with_suffix(".json").read_text())
    tensors = load_file(str(stem.with_suffix(".safetensors")), device="cpu")
    ocfg, fcfg = ObjectiveConfig(**record["objective"]), FineTuneConfig(**record["fine_tune"])
    lms = {}
    for objective in OBJECTIVES:
        prefix = f"lm.{objective}."
        model = make_lm(objective, ocfg)
        load_weights(model, {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}, "cpu")
        lms[objective] = model.eval()
    models = {}
    for method in METHODS:
        prefix = f"{method}."
        model = build_model(method, record["seeds"][0], fcfg)
        state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        delta = {k: v for k, v in state.items() if k.endswith((".q", ".scale"))}
        state = {k: v for k, v in state.items() if k not in delta}
        missing = [k for k in state if k not in model.state_dict()]
        check_empty(f"the checkpoint's {method} tensors that do not fit the model", missing)
        model.load_state_dict(state, strict=False)
        add_weight_delta(model, delta)
        models[method] = model.eval()
    return {"lms": lms, "models": models, "record": record, "objective_cfg": ocfg, "fine_tune_cfg": fcfg}
