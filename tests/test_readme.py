"""The README's "Use the library" example runs as printed, offline, and does what its comments say.

The block is found by its section's heading, not by a line number, and executed in a fresh namespace with every
network connection refused; the names it leaves behind are then checked against the library and closed-form counts.
"""

import math
import re
import socket
from pathlib import Path

import pytest
import torch

from transformer_lib import quant as Q
from transformer_lib.training.lora import lora_layers

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Use the library"


def readme_example() -> str:
    """The Python code block of the README's "Use the library" section; fails with the reason when it is missing."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    if f"\n{HEADING}\n" not in text:
        pytest.fail(f"README.md has no section headed {HEADING!r}: tests/test_readme.py runs its Python block")
    section = text.split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.M | re.S)
    if len(blocks) != 1:
        pytest.fail(f"README.md's {HEADING!r} section must hold exactly one ```python block, found {len(blocks)}")
    return blocks[0]


def test_the_readme_has_the_example_section_with_one_python_block():
    code = readme_example()
    compile(code, "README.md", "exec")  # a syntax error names the README, not this file
    assert "import transformer_lib as tl" in code


def test_the_readme_example_runs(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise OSError("the README example must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    ns = {"__name__": "readme_example"}
    exec(compile(readme_example(), "README.md", "exec"), ns)
    printed = capsys.readouterr().out

    losses = ns["history"].train_loss
    assert all(math.isfinite(x) for x in losses) and losses[-1] < 0.8 * losses[0], losses  # seeded, with a margin
    n_prompt = ns["prompt"].shape[1]
    assert ns["ids"].shape == ns["int8_ids"].shape == (1, n_prompt + 40)
    assert torch.equal(ns["ids"][:, :n_prompt], ns["prompt"]) and "ROMEO:" in printed

    float_bytes, int8_bytes = Q.state_dict_bytes(ns["model"]), Q.state_dict_bytes(ns["int8_model"])
    assert int8_bytes < float_bytes / 3, (int8_bytes, float_bytes)  # 1 byte a weight instead of 4, plus scales
    assert isinstance(ns["model"].lm_head, torch.nn.Linear)  # the float model was left as it was

    adapters = lora_layers(ns["lora_model"])
    assert adapters and ns["trainable"] == sum(a.r * (a.in_features + a.out_features) for a in adapters.values())
    assert ns["trainable"] < ns["model"].num_params() / 10

    emb = ns["emb"]
    assert emb.shape == (2, 384)  # all-MiniLM-L6-v2's d_model
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(2))
    assert float(emb[0] @ emb[1]) > 0.5, "two sentences about a sitting cat should be close"
