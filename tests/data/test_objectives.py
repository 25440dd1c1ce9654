"""BERT's masking (``objectives.mlm_mask``): the 15% / 80-10-10 split within exact binomial bounds (each bound has a
false-alarm probability below 1e-6, and the same bounds reject a sampler whose rates are off by a little), labels
only at chosen positions, special tokens and padding never chosen, random replacements uniform over ordinary
tokens, seeding; and next-token shifting."""

import math

import pytest
import torch

from transformer_lib.data.objectives import (
    IGNORE_INDEX,
    MASKED,
    NOT_CHOSEN,
    RANDOM,
    UNCHANGED,
    mlm_mask,
    next_token_targets,
)

VOCAB, PAD, CLS, SEP, MASK = 1000, 0, 1, 2, 3
SPECIAL = (PAD, CLS, SEP)
ALPHA = 1e-6  # two-sided false-alarm probability of each bound


def binomial_bounds(n: int, p: float, alpha: float = ALPHA) -> tuple[int, int]:
    """The smallest ``lo`` and largest ``hi`` with P(X < lo) <= alpha/2 and P(X > hi) <= alpha/2, X ~ Bin(n, p),
    from the exact probability mass function (log-gamma), no normal approximation."""

    def logpmf(k):
        return (
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log1p(-p)
        )

    pmf = [math.exp(logpmf(k)) for k in range(n + 1)]
    lo, tail = 0, 0.0
    while tail + pmf[lo] <= alpha / 2:
        tail += pmf[lo]
        lo += 1
    hi, tail = n, 0.0
    while tail + pmf[hi] <= alpha / 2:
        tail += pmf[hi]
        hi -= 1
    return lo, hi


def test_binomial_bounds_match_the_normal_approximation_for_large_n():
    lo, hi = binomial_bounds(10_000, 0.15)
    z = 4.892  # the normal quantile for 1 - 0.5e-6
    sd = math.sqrt(10_000 * 0.15 * 0.85)
    assert abs(lo - (1500 - z * sd)) < 6 and abs(hi - (1500 + z * sd)) < 6


def batch(B=256, T=256, seed=0):
    """Rows of random ordinary tokens, [CLS] first, [SEP] after the row's length, [PAD] after; some [MASK]-free."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (B, T), generator=g)
    lengths = torch.randint(T // 4, T - 1, (B,), generator=g)
    pos = torch.arange(T)
    ids[:, 0] = CLS
    ids[pos[None, :] == lengths[:, None]] = SEP
    attention = (pos[None, :] <= lengths[:, None]).long()
    ids[attention == 0] = PAD
    return ids, attention


def split_counts(out):
    c = out.choice
    return {k: int((c == k).sum()) for k in (NOT_CHOSEN, MASKED, RANDOM, UNCHANGED)}


def within(count, n, p):
    lo, hi = binomial_bounds(n, p)
    return lo <= count <= hi


@pytest.fixture(scope="module")
def masked():
    ids, attention = batch()
    out = mlm_mask(ids, MASK, VOCAB, SPECIAL, attention, generator=torch.Generator().manual_seed(1))
    return ids, attention, out


def test_fifteen_percent_of_ordinary_tokens_are_chosen(masked):
    ids, attention, out = masked
    n_ordinary = int(((ids >= 4) & (attention == 1)).sum())
    n_chosen = int((out.choice != NOT_CHOSEN).sum())
    assert n_ordinary > 30_000
    assert within(n_chosen, n_ordinary, 0.15)


def test_chosen_split_80_10_10(masked):
    _, _, out = masked
    counts = split_counts(out)
    m = counts[MASKED] + counts[RANDOM] + counts[UNCHANGED]
    assert within(counts[MASKED], m, 0.8)
    assert within(counts[RANDOM], m, 0.1)
    assert within(counts[UNCHANGED], m, 0.1)


def test_the_bounds_reject_a_slightly_wrong_sampler():
    """The same bounds fail a sampler with 13% chosen, or with 76/14/10, on a batch of the same size: the tests above
    can fail."""
    ids, attention = batch()
    n_ordinary = int(((ids >= 4) & (attention == 1)).sum())
    off = mlm_mask(ids, MASK, VOCAB, SPECIAL, attention, mask_prob=0.13, generator=torch.Generator().manual_seed(1))
    assert not within(int((off.choice != NOT_CHOSEN).sum()), n_ordinary, 0.15)
    off = mlm_mask(
        ids,
        MASK,
        VOCAB,
        SPECIAL,
        attention,
        mask_frac=0.76,
        random_frac=0.14,
        generator=torch.Generator().manual_seed(1),
    )
    counts = split_counts(off)
    m = counts[MASKED] + counts[RANDOM] + counts[UNCHANGED]
    assert not within(counts[MASKED], m, 0.8) and not within(counts[RANDOM], m, 0.1)


def test_labels_and_inputs_follow_the_choice(masked):
    ids, attention, out = masked
    chosen = out.choice != NOT_CHOSEN
    assert torch.equal(out.labels[chosen], ids[chosen])
    assert (out.labels[~chosen] == IGNORE_INDEX).all()
    assert (out.input_ids[out.choice == MASKED] == MASK).all()
    keep = (out.choice == NOT_CHOSEN) | (out.choice == UNCHANGED)
    assert torch.equal(out.input_ids[keep], ids[keep])
    rand = out.input_ids[out.choice == RANDOM]
    assert ((rand >= 4) & (rand < VOCAB)).all()  # an ordinary token, never special nor [MASK]
    # a random replacement differs from the original except by chance (1 in 996)
    same = int((rand == ids[out.choice == RANDOM]).sum())
    assert within(same, rand.numel(), 1 / (VOCAB - 4))


def test_special_tokens_and_padding_are_never_chosen(masked):
    ids, attention, out = masked
    special = (ids < 4) | (attention == 0)
    assert special.sum() > 1000
    assert (out.choice[special] == NOT_CHOSEN).all()
    assert torch.equal(out.input_ids[special], ids[special])


def test_positions_are_chosen_alike_everywhere(masked):
    """Early and late positions (within the rows' real tokens) are each chosen at 15%."""
    ids, attention, out = masked
    ordinary = (ids >= 4) & (attention == 1)
    for part in (slice(0, 64), slice(64, 128), slice(128, 256)):
        n = int(ordinary[:, part].sum())
        assert within(int((out.choice[:, part] != NOT_CHOSEN).sum()), n, 0.15)


def test_random_replacements_are_uniform_over_ordinary_tokens():
    vocab, mask_id = 20, 3
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(4, vocab, (512, 512), generator=g)
    out = mlm_mask(
        ids,
        mask_id,
        vocab,
        (0, 1, 2),
        mask_prob=1.0,
        mask_frac=0.0,
        random_frac=1.0,
        generator=torch.Generator().manual_seed(3),
    )
    assert (out.choice == RANDOM).all()
    counts = torch.bincount(out.input_ids.flatten(), minlength=vocab)
    assert counts[:4].sum() == 0
    n, k = ids.numel(), vocab - 4
    lo, hi = binomial_bounds(n, 1 / k, ALPHA / k)  # Bonferroni over the 16 ids
    assert all(lo <= int(c) <= hi for c in counts[4:])


def test_seeded_and_input_left_alone():
    ids, attention = batch(B=8, T=64)
    before = ids.clone()
    a = mlm_mask(ids, MASK, VOCAB, SPECIAL, attention, generator=torch.Generator().manual_seed(7))
    b = mlm_mask(ids, MASK, VOCAB, SPECIAL, attention, generator=torch.Generator().manual_seed(7))
    c = mlm_mask(ids, MASK, VOCAB, SPECIAL, attention, generator=torch.Generator().manual_seed(8))
    assert torch.equal(ids, before)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.choice, c.choice)


def test_loss_is_taken_only_at_chosen_positions():
    """``F.cross_entropy`` with the labels averages over the chosen positions only."""
    ids, attention = batch(B=16, T=64)
    out = mlm_mask(ids, MASK, VOCAB, SPECIAL, attention, generator=torch.Generator().manual_seed(4))
    logits = torch.randn(*ids.shape, VOCAB, generator=torch.Generator().manual_seed(0))
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), out.labels.flatten())
    chosen = out.choice != NOT_CHOSEN
    by_hand = -torch.log_softmax(logits[chosen], -1).gather(1, ids[chosen][:, None]).mean()
    torch.testing.assert_close(loss, by_hand)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"input_ids": torch.zeros(2, 3)}, "input_ids"),
        ({"input_ids": torch.zeros(6, dtype=torch.long)}, "input_ids"),
        ({"mask_token_id": VOCAB}, "mask_token_id"),
        ({"mask_prob": 1.5}, "mask_prob"),
        ({"mask_frac": 0.9, "random_frac": 0.2}, "mask_frac"),
        ({"special_token_ids": (VOCAB,)}, "special_token_ids"),
        ({"input_ids": torch.full((2, 3), VOCAB)}, "input_ids"),
        ({"attention_mask": torch.ones(2, 4)}, "attention_mask"),
        ({"attention_mask": torch.full((2, 3), 2)}, "attention_mask"),
        ({"ignore_index": 5}, "ignore_index"),
        ({"generator": 3}, "generator"),
    ],
)
def test_bad_input_is_named(kwargs, word):
    args = {
        "input_ids": torch.full((2, 3), 5),
        "mask_token_id": MASK,
        "vocab_size": VOCAB,
        "special_token_ids": SPECIAL,
        "attention_mask": None,
    }
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=word):
        mlm_mask(**args)


@pytest.mark.cuda
def test_runs_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ids, attention = batch(B=64, T=128)
    out = mlm_mask(ids.cuda(), MASK, VOCAB, SPECIAL, attention.cuda(), generator=torch.Generator("cuda").manual_seed(0))
    assert out.input_ids.is_cuda and out.labels.is_cuda
    with pytest.raises(ValueError, match="generator"):
        mlm_mask(ids.cuda(), MASK, VOCAB, SPECIAL, generator=torch.Generator().manual_seed(0))


# ----------------------------------------------------------------------------- next token
def test_next_token_targets_shift_and_ignore_padding():
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    inputs, targets = next_token_targets(ids, attention)
    assert torch.equal(inputs, ids[:, :-1])
    assert targets.tolist() == [[6, 7, 8], [10, IGNORE_INDEX, IGNORE_INDEX]]
    assert next_token_targets(ids)[1].tolist() == [[6, 7, 8], [10, 0, 0]]
    assert ids.tolist()[1] == [9, 10, 0, 0]  # unchanged
    with pytest.raises(
        ValueError, match=r"input_ids.shape\[1\] must be an int >= 2 \(tokens per row, to shift\), got 1"
    ):
        next_token_targets(ids[:, :1])
