"""Chapter 11: a dense LLaMA-style model and a mixture of experts with the same active parameters, trained side by
side on Shakespeare's characters (same data, same steps, same seed), with and without the balancing loss.

Used in chapter 11.

The mixture replaces each block's SwiGLU of hidden size ``d_ff`` by ``n_experts`` SwiGLU experts of ``d_ff / top_k``:
a token runs ``top_k`` of them, so it is multiplied by as many feed-forward weights as in the dense model (plus the
router's ``n_experts x d_model``), while the mixture holds ``n_experts / top_k`` times the feed-forward weights.
"""

from __future__ import annotations

import dataclasses

import torch

from ..data.checkpoint_io import provenance
from ..data.corpus import get_batch, shakespeare_corpus
from ..models.llama import Llama, LlamaConfig
from ..training.losses import gpt_loss
from ..training.loop import TrainConfig, evaluate_loss, train
from .threads import torch_threads
from ..checkpoints import CHECKPOINT_DIR
from ..utils.checks import check_choice, check_int, check_tensor

BLOCK, BATCH = 64, 16  # characters per window, windows per step
VAL_BATCHES, VAL_SEED = 8, 4321
RECIPE = TrainConfig(
    steps=300,
    lr=4e-3,
    warmup_steps=30,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    grad_clip=1.0,
    eval_every=10**9,
    progress=True,
)
BALANCE_COEF = 0.01  # Switch Transformer's alpha


def pair_configs(
    vocab_size: int,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    d_ff: int = 192,
    n_experts: int = 4,
    top_k: int = 2,
) -> dict[str, LlamaConfig]:
    """``{"dense", "moe", "moe, no balancing"}``: the same decoder with a SwiGLU of ``d_ff`` or ``n_experts`` experts
    of ``d_ff // top_k``; the first mixture adds Switch's balancing loss (alpha = 0.01), the second none."""
    check_int("top_k", top_k, min=1, note="experts each token picks")
    check_int("d_ff", d_ff, min=1, multiple_of=top_k, note="experts of d_ff / top_k")
    dense = LlamaConfig(
        vocab_size=vocab_size,
        block_size=BLOCK,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_model=d_model,
        d_ff=d_ff,
    )
    moe = dataclasses.replace(dense, d_ff=d_ff // top_k, n_experts=n_experts, top_k=top_k, aux_loss_coef=BALANCE_COEF)
    return {"dense": dense, "moe": moe, "moe, no balancing": dataclasses.replace(moe, aux_loss_coef=0.0)}


def val_batches(n: int = VAL_BATCHES) -> list:
    """Fixed windows of the held-out works (Hamlet, Twelfth Night)."""
    gen = torch.Generator().manual_seed(VAL_SEED)
    return [get_batch(shakespeare_corpus().val, BLOCK, 32, gen) for _ in range(n)]


def cross_entropy(model: Llama, batch) -> torch.Tensor:
    """Next-character cross-entropy alone (no balancing term), in nats."""
    x, y = batch
    logits = model(x)[0]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def train_one(cfg: LlamaConfig, seed: int = 0, steps: int | None = None, device=None, desc: str = "training"):
    """Train a fresh ``Llama(cfg)`` (weights seeded by ``seed``; the same batches for every config with that
    seed). Returns ``(model, history, held-out nats per character)``."""
    torch.manual_seed(seed)
    model = Llama(cfg)
    data = shakespeare_corpus().train
    gen = torch.Generator().manual_seed(seed)
    run = dataclasses.replace(RECIPE, seed=seed, steps=steps or RECIPE.steps)
    # one CPU thread, as the committed record was trained: as fast for a model this small, and on a busy machine
    # far faster (two spinning OpenMP threads cost the live dense run ten times its CPU under load)
    with torch_threads(1):
        hist = train(model, lambda step: get_batch(data, BLOCK, BATCH, gen), run, gpt_loss, device=device, desc=desc)
        return model, hist, evaluate_loss(model, val_batches(), cross_entropy)


@torch.no_grad()
def expert_load(model: Llama, batches) -> torch.Tensor:
    """``(n_layers, n_experts)``: share of the top-k assignments each expert received on ``batches``."""
    model.eval()
    E = model.cfg.n_experts
    counts = torch.zeros(model.cfg.n_layers, E)
    device = next(model.parameters()).device
    for x, _ in batches:
        model(x.to(device))
        for i, block in enumerate(model.blocks):
            counts[i] += torch.bincount(block.ffn.experts_chosen.reshape(-1).cpu(), minlength=E).float()
    return counts / counts.sum(dim=1, keepdim=True)


@torch.no_grad()
def router_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Every layer's router scores ``x W_r`` of a mixture ``llama.Llama`` on one sequence ``ids: (T,)``:
    ``(n_layers, T, n_experts)`` float32 on the CPU (the ``router_logits`` each ``moe.MoE`` keeps after a forward)."""
    n_experts = getattr(model.cfg, "n_experts", None) or 0  # 0 or None: a dense feed-forward
    check_int("model.cfg.n_experts", n_experts, min=1, note="router_logits needs a mixture of experts")
    check_tensor("ids", ids, ("T",), note="one sequence")
    device = next(model.parameters()).device
    model.eval()
    model(ids[None].to(device))
    return torch.stack([block.ffn.router_logits.float().cpu() for block in model.blocks])  # (L, T, E)


def training_state_bytes(model: Llama) -> int:
    """Bytes an AdamW step keeps per fp32 parameter: the weight, its gradient and two moments (16 bytes)."""
    return 16 * sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- several seeds, committed
RECORD_NAME = "moe_vs_dense"  # checkpoints/<name>.json: every seed's results; <name>.safetensors: seed 0's models


def _checkpoint_dir():

    return CHECKPOINT_DIR


def _prefix(name: str) -> str:
    """The tensor-name prefix of config ``name`` in the committed file ("moe, no balancing" -> "moe_no_balancing.")."""
    return name.replace(",", "").replace(" ", "_") + "."


def run_seeds(seeds=(0, 1, 2, 3, 4), steps: int | None = None, device=None, progress: bool = True):
    """Train the three configs of ``pair_configs`` with each seed. Returns ``(record, {name: seed 0's model})``:
    ``record["runs"][name]`` holds ``val_loss`` (one per seed), ``expert_load`` (per seed, ``(n_layers, n_experts)``
    shares on the held-out batches), ``num_params`` and ``train_loss_first_seed`` (the first seed's loss per step,
    for the chapter's curves)."""
    vocab = shakespeare_corpus().tokenizer.vocab_size
    configs = pair_configs(vocab)
    record = {
        "seeds": list(seeds),
        "steps": steps or RECIPE.steps,
        "block": BLOCK,
        "batch": BATCH,
        "provenance": provenance(),
        "configs": {n: dataclasses.asdict(c) for n, c in configs.items()},
        "runs": {},
    }
    kept = {}
    for name, cfg in configs.items():
        runs = {"val_loss": [], "expert_load": [], "num_params": None}
        for seed in seeds:
            model, hist, val = train_one(cfg, seed, steps, device, desc=f"{name}, seed {seed}")
            runs["val_loss"].append(val)
            runs["num_params"] = model.num_params()
            if cfg.n_experts:
                runs["expert_load"].append(expert_load(model, val_batches()).tolist())
            if seed == seeds[0]:
                kept[name] = model
                runs["train_loss_first_seed"] = [float(x) for x in hist.train_loss]
            if progress:
                print(f"{name:>18} seed {seed}: held-out {val:.4f} nats/char")
        record["runs"][name] = runs
    return record, kept


def save_record(record: dict, models: dict[str, Llama]) -> None:
    """Write ``checkpoints/moe_vs_dense.json`` and the first seed's three models as ``moe_vs_dense.safetensors``."""
    from ..data.checkpoint_io import save_tensors_and_record, tied_names

    tensors = {
        _prefix(name) + k: v.detach().cpu().contiguous()
        for name, model in models.items()
        for k, v in model.state_dict().items()
        if k not in tied_names(model)
    }  # tied copies are re-tied on loading
    save_tensors_and_record(_checkpoint_dir() / RECORD_NAME, tensors, record)


def load_record() -> dict:
    import json

    return json.loads((_checkpoint_dir() / f"{RECORD_NAME}.json").read_text())


def load_trained(name: str = "moe", device=None) -> Llama:
    """The record's first seed's trained model of config ``name`` ("dense", "moe", "moe, no balancing"), eval mode."""
    from safetensors.torch import load_file

    from ..data.checkpoint_io import load_weights

    configs = load_record()["configs"]
    check_choice("name", name, configs)
    weights = load_file(str(_checkpoint_dir() / f"{RECORD_NAME}.safetensors"), device="cpu")
    prefix = _prefix(name)
    own = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    return load_weights(Llama(LlamaConfig(**configs[name])), own, device or "cpu").eval()
