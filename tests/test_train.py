"""The training loop, schedule, decoding and checkpoint files."""
import itertools
import math
import os
import struct
import json

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.data import CharTokenizer, date_tokenizers, get_batch, translation_batch
from transformer_lib.models import GPT, GPTConfig, Transformer, TransformerConfig
from transformer_lib.train import (TrainConfig, atomic_write_bytes, beam_search, evaluate_loss, exact_match, gpt_loss,
                                   greedy_decode, load_weights, lr_at, save_weights, seq2seq_loss, train, translate)

TEXT = "to be, or not to be, that is the question. " * 40


def _tiny_gpt(seed=0, vocab=20):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=16, n_layers=1, n_heads=2, d_model=32))


def _tiny_translator(seed=0, src_vocab=30, tgt_vocab=14):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(src_vocab, tgt_vocab, d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1,
                                         n_decoder_layers=1, dropout=0.0, max_len=64)).eval()


def _text_run(steps=60, seed=0, **kw):
    tok = CharTokenizer.from_text(TEXT)
    data = tok.encode_tensor(TEXT)
    model = _tiny_gpt(seed, tok.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    cfg = TrainConfig(steps=steps, lr=3e-3, warmup_steps=10, eval_every=20, seed=seed, progress=False, **kw)
    val = [get_batch(data, 16, 8, torch.Generator().manual_seed(99))]
    hist = train(model, lambda step: get_batch(data, 16, 8, gen), cfg, gpt_loss,
                 eval_fn=lambda m: evaluate_loss(m, val), device="cpu")
    return model, hist


# ----------------------------------------------------------------------------- schedule and loop
def test_lr_schedule_is_linear_warmup_then_torch_cosine_annealing():
    cfg = TrainConfig(steps=200, lr=1e-2, warmup_steps=20, min_lr_ratio=0.1)
    assert [lr_at(s, cfg) for s in range(3)] == pytest.approx([1e-2 / 20, 2e-2 / 20, 3e-2 / 20])
    # after warm-up: torch's CosineAnnealingLR from lr to eta_min over steps - warmup_steps
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=180, eta_min=1e-3)
    expected = []
    for _ in range(181):
        expected.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert [lr_at(s, cfg) for s in range(20, 201)] == pytest.approx(expected, rel=1e-6)


def test_training_lowers_the_loss_and_records_history():
    _, hist = _text_run()
    assert hist.steps_done == 60 and hist.stopped_by == "steps"
    assert len(hist.train_loss) == len(hist.lr) == 60
    assert hist.val_step == [20, 40, 60]
    assert hist.train_loss[0] > math.log(17) * 0.9  # starts near uniform over the 17 characters
    assert hist.val_loss[-1] < 0.6 * hist.train_loss[0]


def test_training_is_deterministic_on_cpu():
    m1, h1 = _text_run(steps=25)
    m2, h2 = _text_run(steps=25)
    assert h1.train_loss == h2.train_loss and h1.val_loss == h2.val_loss
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    _, h3 = _text_run(steps=25, seed=1)
    assert h3.train_loss != h1.train_loss


def test_wall_clock_budget_stops_the_run():
    _, hist = _text_run(steps=1000, max_seconds=1e-9)
    assert hist.stopped_by == "time" and hist.steps_done < 1000


def test_gradient_clipping_bounds_the_first_sgd_like_update():
    # with lr tiny and clip tiny, AdamW's first step moves each weight by ~lr regardless; check the norm is clipped
    model = _tiny_gpt()
    x = torch.randint(0, 20, (4, 16))
    captured = []
    orig = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        params = list(params)
        total = orig(params, max_norm, *a, **k)
        captured.append((float(total), float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None]))), max_norm))
        return total
    torch.nn.utils.clip_grad_norm_ = spy
    try:
        train(model, lambda s: (x, x), TrainConfig(steps=2, grad_clip=1e-3, progress=False), device="cpu")
    finally:
        torch.nn.utils.clip_grad_norm_ = orig
    assert len(captured) == 2
    for before, after, max_norm in captured:
        assert before > max_norm and after == pytest.approx(max_norm, rel=1e-3)


def test_nan_loss_raises_instead_of_training_on():
    model = _tiny_gpt()
    x = torch.randint(0, 20, (2, 16))
    with pytest.raises(FloatingPointError, match="step 0"):
        train(model, lambda s: (x, x), TrainConfig(steps=3, progress=False),
              loss_fn=lambda m, b: gpt_loss(m, b) * float("nan"), device="cpu")


def test_evaluate_loss_is_the_mean_cross_entropy_and_keeps_the_mode():
    model = _tiny_gpt().train()
    batches = [(torch.randint(0, 20, (3, 16)), torch.randint(0, 20, (3, 16))) for _ in range(2)]
    with torch.no_grad():
        ref = sum(F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()) for x, y in batches) / 2
    assert evaluate_loss(model, batches) == pytest.approx(float(ref), rel=1e-6)
    assert model.training


def test_seq2seq_loss_ignores_padding():
    src_tok, tgt_tok = date_tokenizers()
    model = _tiny_translator(src_vocab=src_tok.vocab_size, tgt_vocab=tgt_tok.vocab_size)
    pairs = [("3/3/87", "1987-03-03"), ("May 4, 1960", "1960-05-04")]
    both = seq2seq_loss(model, translation_batch(pairs, src_tok, tgt_tok))
    one = [seq2seq_loss(model, translation_batch([p], src_tok, tgt_tok)) for p in pairs]
    # equal target lengths: the batch loss is the mean of the single-pair losses
    assert float(both.detach()) == pytest.approx(float(sum(one).detach() / 2), rel=1e-5)


# ----------------------------------------------------------------------------- decoding
def _sequence_logprob(model, src, seq, bos, eos):
    """Teacher-forced log p(seq | src), stopping at the first EOS."""
    if eos in seq:
        seq = seq[: seq.index(eos) + 1]
    tgt_in = torch.tensor([[bos] + seq[:-1]])
    logp = F.log_softmax(model(src, tgt_in)[0].float(), -1)
    return float(sum(logp[i, t] for i, t in enumerate(seq)))


def test_beam_search_with_a_wide_beam_finds_the_exhaustive_best():
    model = _tiny_translator(seed=3, src_vocab=10, tgt_vocab=5)  # pad 0, bos 1, eos 2, two letters 3 and 4
    src = torch.tensor([[4, 5, 6, 7]])
    L = 3
    candidates = set()  # every output of at most L tokens: ends at the first EOS, or has L tokens
    for seq in itertools.product((2, 3, 4), repeat=L):
        seq = list(seq)
        candidates.add(tuple(seq[: seq.index(2) + 1] if 2 in seq else seq))
    with torch.no_grad():
        scores = {c: _sequence_logprob(model, src, list(c), 1, 2) for c in candidates}
    best = max(scores, key=scores.get)
    out = beam_search(model, src, bos_id=1, eos_id=2, beam_size=3 ** L, max_len=L)[0].tolist()
    assert tuple(t for t in out if t != 0) == best
    assert sorted(scores.values())[-1] - sorted(scores.values())[-2] > 1e-4  # a unique best, so the test is sharp


def test_beam_of_one_is_greedy():
    model = _tiny_translator(seed=1)
    src = torch.randint(3, 30, (6, 9))
    assert torch.equal(greedy_decode(model, src, 1, 2, 12), beam_search(model, src, 1, 2, 1, 12))


def test_greedy_decode_picks_the_argmax_of_a_full_forward():
    model = _tiny_translator(seed=2)
    src = torch.randint(3, 30, (4, 7))
    out = greedy_decode(model, src, 1, 2, 6)
    tgt_in = torch.cat([torch.ones(4, 1, dtype=torch.long), out[:, :-1]], 1)
    with torch.no_grad():
        ref = model(src, tgt_in).argmax(-1)
    alive = torch.cumsum(out == 2, 1) - (out == 2).long() == 0  # positions up to and including the first EOS
    assert torch.equal(out[alive], ref[alive])


def test_translate_and_exact_match():
    src_tok, tgt_tok = date_tokenizers()
    model = _tiny_translator(src_vocab=src_tok.vocab_size, tgt_vocab=tgt_tok.vocab_size)
    outs = translate(model, ["3/3/87", "May 4, 1960", "1987/3/3"], src_tok, tgt_tok, max_len=5)
    assert len(outs) == 3 and all(len(o) <= 5 and set(o) <= set("0123456789-") for o in outs)
    assert translate(model, ["3/3/87"], src_tok, tgt_tok, beam_size=3, max_len=5)[0] is not None
    assert exact_match(["a", "b", "c", "d"], ["a", "x", "c", "y"]) == 0.5
    with pytest.raises(ValueError, match="equally long"):
        exact_match(["a"], ["a", "b"])


# ----------------------------------------------------------------------------- files
def _header(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8: 8 + n])


def test_save_load_round_trip_is_exact_and_reties_the_gpt_head(tmp_path):
    model = _tiny_gpt(seed=0)
    path = tmp_path / "gpt.safetensors"
    save_weights(model, path, {"note": "hi"})
    header = _header(path)  # safetensors: 8-byte length, JSON header, raw tensors (no pickle)
    assert "lm_head.weight" not in header and "tok_emb.weight" in header
    assert header["__metadata__"]["note"] == "hi"
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
def test_current_umask_with_and_without_proc(monkeypatch, proc_readable):
    """Linux reads the umask from /proc/self/status; elsewhere the set-and-restore fallback must agree."""
    from pathlib import Path

    from transformer_lib import train as train_module
    if not proc_readable:
        real = Path.read_text

        def no_proc(self, *args, **kwargs):
            if str(self).startswith("/proc"):
                raise OSError("no /proc here")
            return real(self, *args, **kwargs)
        monkeypatch.setattr(Path, "read_text", no_proc)
    old = os.umask(0o027)
    try:
        assert train_module._current_umask() == 0o027
        assert os.umask(0o027) == 0o027  # and it is left as it was
    finally:
        os.umask(old)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664])
def test_overwritten_files_keep_their_mode(tmp_path, mode):
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"old")
    path.chmod(mode)
    save_weights(_tiny_gpt(), path)
    assert path.stat().st_mode & 0o777 == mode
    assert path.read_bytes() != b"old"
