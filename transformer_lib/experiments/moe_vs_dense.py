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

from ..corpus import get_batch, shakespeare_corpus
from ..llama import Llama, LlamaConfig
from ..losses import gpt_loss
from ..train import TrainConfig, evaluate_loss, train

BLOCK, BATCH = 64, 16  # characters per window, windows per step
VAL_BATCHES, VAL_SEED = 8, 4321
RECIPE = TrainConfig(steps=300, lr=4e-3, warmup_steps=30, min_lr_ratio=0.1, weight_decay=0.1, grad_clip=1.0,
                     eval_every=10 ** 9, progress=True)
BALANCE_COEF = 0.01  # Switch Transformer's alpha


def pair_configs(vocab_size: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, n_kv_heads: int = 2,
                 d_ff: int = 192, n_experts: int = 4, top_k: int = 2) -> dict[str, LlamaConfig]:
    """``{"dense", "moe", "moe, no balancing"}``: the same decoder with a SwiGLU of ``d_ff`` or ``n_experts`` experts
    of ``d_ff // top_k``; the first mixture adds Switch's balancing loss (alpha = 0.01), the second none."""
    if d_ff % top_k:
        raise ValueError(f"d_ff={d_ff} must be a multiple of top_k={top_k} (experts of d_ff / top_k)")
    dense = LlamaConfig(vocab_size=vocab_size, block_size=BLOCK, n_layers=n_layers, n_heads=n_heads,
                        n_kv_heads=n_kv_heads, d_model=d_model, d_ff=d_ff)
    moe = dataclasses.replace(dense, d_ff=d_ff // top_k, n_experts=n_experts, top_k=top_k,
                              aux_loss_coef=BALANCE_COEF)
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


def training_state_bytes(model: Llama) -> int:
    """Bytes an AdamW step keeps per fp32 parameter: the weight, its gradient and two moments (16 bytes)."""
    return 16 * sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- several seeds, committed
RECORD_NAME = "moe_vs_dense"  # checkpoints/<name>.json: every seed's results; <name>.safetensors: seed 0's mixture


def _checkpoint_dir():
    from pathlib import Path
    return Path(__file__).resolve().parent.parent / "checkpoints"


def run_seeds(seeds=(0, 1, 2, 3, 4), steps: int | None = None, device=None, progress: bool = True):
    """Train the three configs of ``pair_configs`` with each seed. Returns ``(record, seed 0's balanced mixture)``:
    ``record[name]`` holds ``val_loss`` (one per seed), ``expert_load`` (per seed, ``(n_layers, n_experts)``
    shares on the held-out batches) and ``num_params``."""
    import platform
    vocab = shakespeare_corpus().tokenizer.vocab_size
    configs = pair_configs(vocab)
    record = {"seeds": list(seeds), "steps": steps or RECIPE.steps, "block": BLOCK, "batch": BATCH,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
              "configs": {n: dataclasses.asdict(c) for n, c in configs.items()}, "runs": {}}
    kept = None
    for name, cfg in configs.items():
        runs = {"val_loss": [], "expert_load": [], "num_params": None}
        for seed in seeds:
            model, hist, val = train_one(cfg, seed, steps, device, desc=f"{name}, seed {seed}")
            runs["val_loss"].append(val)
            runs["num_params"] = model.num_params()
            if cfg.n_experts:
                runs["expert_load"].append(expert_load(model, val_batches()).tolist())
            if name == "moe" and seed == seeds[0]:
                kept = model
            if progress:
                print(f"{name:>18} seed {seed}: held-out {val:.4f} nats/char")
        record["runs"][name] = runs
    return record, kept


def save_record(record: dict, model: Llama) -> None:
    """Write ``checkpoints/moe_vs_dense.json`` and seed 0's mixture as ``moe_vs_dense.safetensors``."""
    import json
    from ..checkpoint_io import atomic_write_bytes, save_weights
    folder = _checkpoint_dir()
    save_weights(model.cpu(), folder / f"{RECORD_NAME}.safetensors", {"name": RECORD_NAME})
    atomic_write_bytes(folder / f"{RECORD_NAME}.json", json.dumps(record, indent=1).encode())


def load_record() -> dict:
    import json
    return json.loads((_checkpoint_dir() / f"{RECORD_NAME}.json").read_text())


def load_trained_moe(device=None) -> Llama:
    """Seed 0's trained mixture (balancing loss on), eval mode."""
    from safetensors.torch import load_file
    from ..checkpoint_io import load_weights
    cfg = LlamaConfig(**load_record()["configs"]["moe"])
    weights = load_file(str(_checkpoint_dir() / f"{RECORD_NAME}.safetensors"), device="cpu")
    return load_weights(Llama(cfg), weights, device or "cpu").eval()
