"""causal_leak.word_set / known_word_share: the measure chapter 06 puts on generated text, on hand-made strings."""
from transformer_lib.experiments.causal_leak import known_word_share, word_set


def test_word_set_lowercases_and_splits_on_non_letters():
    assert word_set("ROMEO:\nO, she doth teach the torches!") == {"romeo", "o", "she", "doth", "teach", "the", "torches"}


def test_known_word_share_counts_repeats_and_invented_words():
    vocab = word_set("to be or not to be")
    assert known_word_share("To be, to BE!", vocab) == 1.0
    assert known_word_share("to xqz be wrrd", vocab) == 0.5  # 2 of 4 words known
    assert known_word_share("... 123 !", vocab) == 0.0
