"""Chapter 05's committed norm-placement runs (experiments.norm_placement): the record matches the configuration,
round-trips, and (slow) training the runs again reproduces the chapter's claims about them."""

import math

import pytest

from transformer_lib.data.corpus import shakespeare_corpus
from transformer_lib.experiments import norm_placement
from transformer_lib.models.variants import PLACEMENTS


def test_committed_record_matches_the_chapters_configuration():
    runs, cfg, record = norm_placement.load_runs()
    assert cfg == norm_placement.NormConfig()
    assert list(runs) == list(PLACEMENTS)
    for placement, rs in runs.items():
        assert [r.seed for r in rs] == list(cfg.seeds) and all(r.placement == placement for r in rs)
        assert all(r.diverged or len(r.losses) == cfg.steps for r in rs)
    assert record["train_seconds"] > 0


def test_save_and_load_round_trip(tmp_path):
    cfg = norm_placement.NormConfig(
        n_layers=2, d_model=16, n_heads=2, block_size=8, batch_size=4, steps=3, eval_batches=1, seeds=(0, 1)
    )
    runs = norm_placement.norm_placement_experiment(cfg, progress=False, device="cpu")
    norm_placement.save_runs(runs, cfg, 1.0, tmp_path / "n.json")
    back, back_cfg, _ = norm_placement.load_runs(tmp_path / "n.json")
    assert back_cfg == cfg and back == runs


def check_chapter_claims(runs, cfg):
    """The conditions of chapter 05's claims about the training runs."""
    corpus = shakespeare_corpus()
    plateau = norm_placement.unigram_entropy(corpus.train, corpus.tokenizer.vocab_size)
    s = {p: norm_placement.summarize_runs(rs, cfg.final_window, level=plateau - 0.1) for p, rs in runs.items()}
    left = {p: sum(v is not None for v in s[p]["steps_below"]) for p in s}
    assert left["pre"] == len(cfg.seeds)  # pre-norm leaves the plateau in every seed
    assert s["pre"]["final_loss"][0] < min(s["post"]["final_loss"][0], s["none"]["final_loss"][0])
    assert all(math.isfinite(s[p]["final_loss"][0]) for p in s)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)])
def test_training_again_reproduces_the_chapters_claims(seeds):
    """Train nine runs again (about 30 s of CPU per set of seeds; the chapter's are (0, 1, 2)) and check chapter
    05's claims about them: they must hold for other seeds too, not only for the committed sample."""
    cfg = norm_placement.NormConfig(seeds=seeds)
    check_chapter_claims(norm_placement.norm_placement_experiment(cfg, progress=False, device="cpu"), cfg)
