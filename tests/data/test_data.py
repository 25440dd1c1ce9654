"""Data sets and tokenizers (tokenization.py, corpus.py, dates.py): determinism, round trips, and dates checked by
Python's own ``datetime`` parser."""

import datetime as dt
import random
import re

import pytest
import torch

from transformer_lib.data.corpus import (
    get_batch,
    shakespeare_corpus,
    shakespeare_split,
    shakespeare_token_corpus,
    shakespeare_works,
    strip_gutenberg,
)
from transformer_lib.data.dates import (
    DATE_STYLES,
    FIRST_DATE,
    LAST_DATE,
    MONTHS,
    date_pairs,
    date_split,
    date_test_set,
    date_tokenizers,
    format_date,
    translation_batch,
)
from transformer_lib.data.tokenization import BPETokenizer, CharTokenizer, pad_sequences


# ----------------------------------------------------------------------------- tokenizer
def test_char_tokenizer_round_trips_any_text_of_its_alphabet():
    tok = CharTokenizer.from_text("To be, or not to be: that is the question.\n")
    rng = random.Random(0)
    for _ in range(20):
        text = "".join(rng.choice(tok.itos) for _ in range(rng.randint(0, 50)))
        assert tok.decode(tok.encode(text)) == text
        assert tok.encode_tensor(text).tolist() == tok.encode(text)


def test_tokenizer_specials_come_first_and_are_skipped_when_decoding():
    tok = CharTokenizer("abc", ("<pad>", "<bos>", "<eos>"))
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    ids = tok.encode("cab", bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and tok.decode(ids) == "cab"
    assert tok.decode(ids, skip_specials=False) == "<bos>cab<eos>"


def test_tokenizer_rejects_unknown_characters_and_ids():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("az")
    with pytest.raises(ValueError, match=r"ids\[0\] must be an int in \[0, 2\] \(token ids\), got 5"):
        tok.decode([5])
    with pytest.raises(ValueError, match=r"token must be one of \[\], got '<pad>'"):
        tok.pad_id


def test_tokenizer_json_round_trip(tmp_path):
    tok = CharTokenizer("xyz ", ("<pad>",))
    tok.save(tmp_path / "t.json")
    assert CharTokenizer.load(tmp_path / "t.json") == tok
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind


@pytest.fixture(scope="module")
def small_bpe():
    return BPETokenizer.train(shakespeare_works()["sonnets"], 400)


def test_bpe_learns_merges_deterministically_and_round_trips(small_bpe):
    assert small_bpe.vocab_size == 400
    assert BPETokenizer.train(shakespeare_works()["sonnets"], 400) == small_bpe  # same text, same merges
    text = shakespeare_works()["hamlet"][:3000]  # not seen while learning the merges
    ids = small_bpe.encode(text)
    assert small_bpe.decode(ids) == text
    assert len(text) / len(ids) > 1.5  # merges made tokens longer than one character
    assert small_bpe.encode_tensor(text).tolist() == ids
    assert int(small_bpe.token_lengths[ids].sum()) == len(text)  # what nats-per-character counting relies on
    assert small_bpe.decode(small_bpe.encode("zebra-crossing, 2026!")) == "zebra-crossing, 2026!"  # any bytes


def test_bpe_json_round_trip_and_errors(small_bpe, tmp_path):
    small_bpe.save(tmp_path / "bpe.json")
    assert BPETokenizer.load(tmp_path / "bpe.json") == small_bpe
    assert small_bpe != CharTokenizer("ab")
    with pytest.raises(ValueError, match=r"ids\[0\] must be an int in \[0, 399\] \(token ids\), got 400"):
        small_bpe.decode([400])
    with pytest.raises(
        ValueError, match=r"vocab_size must be an int >= 257 \(more than the 256 byte tokens\), got 100"
    ):
        BPETokenizer.train("abc", 100)
    with pytest.raises(
        ValueError, match=r"d\['type'\] must be 'BPETokenizer' \(a BPETokenizer dict\), got 'CharTokenizer'"
    ):
        BPETokenizer.from_dict(CharTokenizer("ab").to_dict())


# ----------------------------------------------------------------------------- Shakespeare
def test_shakespeare_has_42_works_and_the_split_is_by_work():
    works = shakespeare_works()
    assert len(works) == 42 and "hamlet" in works
    corpus = shakespeare_corpus()
    total = sum(len(t) for t in works.values())
    assert abs(corpus.train.numel() + corpus.val.numel() - total) <= len(works)  # joined by one newline each
    assert 0.05 <= corpus.val.numel() / total <= 0.10
    val_text = corpus.tokenizer.decode(corpus.val)
    assert val_text.startswith(works["hamlet"]) and works["twelfth_night"] in val_text
    assert works["hamlet"][:2000] not in corpus.tokenizer.decode(corpus.train)
    assert corpus.tokenizer.vocab_size == len(set("".join(works.values())))
    assert shakespeare_split() == (corpus.tokenizer.decode(corpus.train), val_text)


def test_token_corpus_encodes_the_same_split(small_bpe):
    corpus = shakespeare_token_corpus(small_bpe)
    train_text, val_text = shakespeare_split()
    assert small_bpe.decode(corpus.val) == val_text
    assert int(small_bpe.token_lengths[corpus.train].sum()) == len(train_text)


def test_strip_gutenberg_removes_licence_header_and_footer():
    text = (
        "The Project Gutenberg EBook of Hamlet\r\nlicence\r\n*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***"
        "\r\nTo be, or not to be\r\n*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\nmore licence\r\n"
    )
    assert strip_gutenberg(text) == "To be, or not to be\n"
    assert strip_gutenberg("no header here\n") == "no header here\n"


def test_get_batch_targets_are_inputs_shifted_by_one_and_seeded():
    data = torch.arange(1000)
    x, y = get_batch(data, 16, 8, torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)
    x2, _ = get_batch(data, 16, 8, torch.Generator().manual_seed(3))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match=r"block_size must be an int in \[1, 999\] \(shorter than data's 1000 ids\)"):
        get_batch(data, 1000, 2)


# ----------------------------------------------------------------------------- dates: parsed back by datetime
_ORD = re.compile(r"(\d+)(st|nd|rd|th)\b")
_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_WORDS.update(
    {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if w != "_"}
)
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fifth": 5, "eighth": 8, "ninth": 9, "twelfth": 12}


def _word_value(word: str) -> int:
    """An independent reading of number words: 'twenty-first' -> 21, 'eighty-seven' -> 87, 'thirtieth' -> 30."""
    total = 0
    for part in word.split("-"):
        if part in _ORDINALS:
            total += _ORDINALS[part]
        elif part in _WORDS:
            total += _WORDS[part]
        elif part.endswith("ieth") and part[:-4] + "y" in _WORDS:
            total += _WORDS[part[:-4] + "y"]
        elif part.endswith("th") and part[:-2] in _WORDS:
            total += _WORDS[part[:-2]]
        else:
            raise AssertionError(f"unknown number word {part!r} in {word!r}")
    return total


def _spelled_year(words: str) -> int:
    w = words.split()
    if w[0] == "nineteen":
        return 1900 + _word_value(w[1])
    if w[:2] == ["two", "thousand"]:
        rest = [x for x in w[2:] if x != "and"]
        return 2000 + (_word_value(rest[0]) if rest else 0)
    if w[0] == "twenty":
        return 2000 + _word_value(w[1])
    raise AssertionError(f"cannot read year {words!r}")


def _parse(text: str) -> dt.date:
    """Read a generated date with ``datetime.strptime`` (English month/day names of the C locale)."""
    spelled = re.fullmatch(r"(?:(\w+) )?the ([\w-]+) of (\w+),? (.+)", text)
    if spelled and not spelled.group(2)[0].isdigit():
        weekday, day, month, year = spelled.groups()
        d = dt.datetime.strptime(f"{_word_value(day)} {month} {_spelled_year(year)}", "%d %B %Y").date()
        if weekday:
            assert d.strftime("%A") == weekday, text
        return d
    plain = _ORD.sub(r"\1", text)
    for fmt in (
        "the %d of %B, %Y",
        "%B %d, %Y",
        "%B %d %Y",
        "%d %B %Y",
        "%A, %d %B %Y",
        "%a, %b %d, %Y",
        "%b %d '%y",
        "%d-%b-%Y",
        "%m/%d/%y",
        "%m/%d/%Y",
        "%d.%m.%Y",
        "%Y/%m/%d",
    ):
        try:
            d = dt.datetime.strptime(plain, fmt).date()
        except ValueError:
            continue
        if "%A" in fmt or "%a" in fmt:  # the weekday must be the real one
            assert d.strftime("%A" if "%A" in fmt else "%a") == plain.split(",")[0], text
        return d
    raise AssertionError(f"no datetime format reads {text!r}")


@pytest.mark.parametrize("style", sorted(DATE_STYLES))
def test_every_date_style_parses_back_to_the_same_day(style):
    rng = random.Random(style)
    days = [FIRST_DATE, LAST_DATE, dt.date(2000, 2, 29), dt.date(1999, 12, 31), dt.date(2001, 1, 1)]
    days += [FIRST_DATE + dt.timedelta(rng.randrange((LAST_DATE - FIRST_DATE).days + 1)) for _ in range(300)]
    for d in days:
        text = format_date(d, style, rng)
        assert _parse(text) == d, (style, text, d)


def test_date_pairs_targets_are_iso_dates_of_their_sources():
    for src, tgt in date_pairs(date_split()[0], 500, seed=7):
        assert _parse(src).isoformat() == tgt


def test_date_split_is_disjoint_complete_and_deterministic():
    train, test = date_split()
    assert not set(train) & set(test)
    assert len(train) + len(test) == (LAST_DATE - FIRST_DATE).days + 1
    assert date_split.__wrapped__() == (train, test)
    assert len(test) == round(0.1 * (len(train) + len(test)))
    assert all(dt.date.fromisoformat(t) in set(test) for _, t in date_test_set())


def test_date_test_set_is_fixed_and_covers_every_style():
    a, b = date_test_set(), date_test_set()
    assert a == b and len(a) == 1000
    assert date_pairs(date_split()[1], 50, seed=1) == date_pairs(date_split()[1], 50, seed=1)
    assert date_pairs(date_split()[1], 50, seed=1) != date_pairs(date_split()[1], 50, seed=2)
    months_seen = {m for s, _ in a for m in MONTHS if m in s}
    assert len(months_seen) == 12


def test_format_date_rejects_bad_style_and_out_of_range_day():
    with pytest.raises(ValueError, match="style must be one of"):
        format_date(dt.date(2000, 1, 1), "klingon")
    with pytest.raises(ValueError, match="1969-01-01"):
        format_date(dt.date(1968, 12, 31), "us_short")


def test_translation_batch_shifts_targets_and_pads():
    src_tok, tgt_tok = date_tokenizers()
    pairs = [("3/3/87", "1987-03-03"), ("the 3rd of March, 1987", "1987-03-03")]
    b = translation_batch(pairs, src_tok, tgt_tok)
    assert b.src.shape == (2, len(pairs[1][0]))
    assert (b.src[0, 6:] == src_tok.pad_id).all() and src_tok.decode(b.src[0]) == "3/3/87"
    assert b.tgt_in[0, 0] == tgt_tok.bos_id and b.tgt_out[0, -1] == tgt_tok.eos_id
    assert torch.equal(b.tgt_in[:, 1:], b.tgt_out[:, :-1])
    assert tgt_tok.decode(b.tgt_out[1]) == "1987-03-03"
    assert pad_sequences([[1], [1, 2, 3]], 0).tolist() == [[1, 0, 0], [1, 2, 3]]
