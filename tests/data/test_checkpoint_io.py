"""Checkpoint files: safetensors round trip with tied weights, strict loading, atomic writes, permissions."""

import json
import os
import struct
from pathlib import Path

import pytest
import torch

from transformer_lib.data.checkpoint_io import atomic_write_bytes, load_weights, save_weights
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT


def _tiny_gpt(seed=0, vocab=20):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=16, n_layers=1, n_heads=2, d_model=32))


def _header(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + n])


def test_save_load_round_trip_is_exact_and_reties_the_gpt_head(tmp_path):
    model = _tiny_gpt(seed=0)
    path = tmp_path / "gpt.safetensors"
    save_weights(model, path, {"note": "hi"})
    header = _header(path)  # safetensors: 8-byte length, JSON header, raw tensors (no pickle)
    assert "lm_head.weight" not in header and "tok_emb.weight" in header
    assert header["__metadata__"] == {"note": "hi"}  # tied names are found from the model, not stored
    fresh = load_weights(_tiny_gpt(seed=1), path)
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), k
    assert fresh.lm_head.weight is fresh.tok_emb.weight
    x = torch.randint(0, 20, (2, 16))
    assert torch.equal(model(x)[0], fresh(x)[0])


def test_load_is_strict(tmp_path):
    save_weights(_tiny_gpt(), tmp_path / "a.safetensors")
    bigger = GPT(GPTConfig(vocab_size=20, block_size=16, n_layers=2, n_heads=2, d_model=32))
    with pytest.raises(RuntimeError, match="Missing key"):
        load_weights(bigger, tmp_path / "a.safetensors")


def test_save_is_atomic_on_error(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    save_weights(_tiny_gpt(seed=0), path)
    before = path.read_bytes()

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        save_weights(_tiny_gpt(seed=5), path)
    assert path.read_bytes() == before  # the old file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]  # and no partial temporary file


def test_saved_files_get_ordinary_permissions(tmp_path):
    save_weights(_tiny_gpt(), tmp_path / "a.safetensors")
    (tmp_path / "b").write_bytes(b"")  # what open() gives under the current umask
    assert (tmp_path / "a.safetensors").stat().st_mode & 0o777 == (tmp_path / "b").stat().st_mode & 0o777


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_new_files_follow_the_umask_and_leave_it_unchanged(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "new.json", b"{}")
        assert os.umask(umask) == umask  # the writer did not change the process umask
    finally:
        os.umask(old)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("proc_readable", [True, False])
def test_new_files_follow_the_umask_with_and_without_proc(tmp_path, monkeypatch, proc_readable):
    """Linux reads the umask from /proc/self/status; elsewhere the set-and-restore fallback must agree."""
    if not proc_readable:
        real = Path.read_text

        def no_proc(self, *args, **kwargs):
            if str(self).startswith("/proc"):
                raise OSError("no /proc here")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", no_proc)
    old = os.umask(0o027)
    try:
        atomic_write_bytes(tmp_path / "new.json", b"{}")
        assert os.umask(0o027) == 0o027  # and it is left as it was
    finally:
        os.umask(old)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664])
def test_overwritten_files_keep_their_mode(tmp_path, mode):
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"old")
    path.chmod(mode)
    save_weights(_tiny_gpt(), path)
    assert path.stat().st_mode & 0o777 == mode
    assert path.read_bytes() != b"old"


def test_a_saved_run_carries_what_produced_it_and_round_trips(tmp_path):
    import json

    import torch
    from safetensors.torch import load_file

    from transformer_lib.data.checkpoint_io import provenance, save_tensors_and_record

    record = {"losses": [2.0, 1.5], **provenance(threads=1)}
    assert record["torch"] == torch.__version__ and record["torch_threads"] == 1
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    tensors = {"w": torch.arange(6.0).reshape(2, 3)}
    save_tensors_and_record(tmp_path / "sub" / "run", tensors, record)
    assert torch.equal(load_file(str(tmp_path / "sub" / "run.safetensors"))["w"], tensors["w"])
    assert json.loads((tmp_path / "sub" / "run.json").read_text()) == record
