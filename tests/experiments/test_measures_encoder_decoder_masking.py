"""Small measures the encoder_decoder and masking chapters put on their outputs: known_word_share (generated text)
and scale_embeddings (the control of the gradient profile), on hand-made inputs."""

from transformer_lib.experiments.causal_leak import known_word_share, word_set


def test_word_set_lowercases_and_splits_on_non_letters():
    assert word_set("ROMEO:\nO, she doth teach the torches!") == {
        "romeo",
        "o",
        "she",
        "doth",
        "teach",
        "the",
        "torches",
    }


def test_known_word_share_counts_repeats_and_invented_words():
    vocab = word_set("to be or not to be")
    assert known_word_share("To be, to BE!", vocab) == 1.0
    assert known_word_share("to xqz be wrrd", vocab) == 0.5  # 2 of 4 words known
    assert known_word_share("... 123 !", vocab) == 0.0


def test_scale_embeddings_sets_the_std_of_the_embedding_tables():
    import torch
    from transformer_lib.experiments.norm_placement import scale_embeddings
    from transformer_lib.models.configs import GPTConfig
    from transformer_lib.models.transformer import GPT

    torch.manual_seed(0)
    model = scale_embeddings(GPT(GPTConfig(vocab_size=50, block_size=16, n_layers=2, n_heads=2, d_model=16)), 1.0)
    for table in (model.tok_emb.weight, model.pos.weight):
        assert abs(float(torch.std(table.detach())) - 1.0) < 1e-5


def test_torch_threads_sets_and_restores_the_thread_count():
    import pytest
    import torch
    from transformer_lib.experiments.threads import torch_threads

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("restored even when the block raises")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must be"):
        with torch_threads(0):
            pass


def test_sample_texts_continue_the_prompt_like_generate():
    import torch
    from transformer_lib.experiments.causal_leak import sample_texts
    from transformer_lib.serving.generation import generate
    from transformer_lib.models.configs import GPTConfig
    from transformer_lib.models.transformer import GPT
    from transformer_lib.data.tokenization import CharTokenizer

    tok = CharTokenizer.from_text("abcdefgh \n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=8, n_layers=1, n_heads=2, d_model=16)).eval()
    texts = sample_texts(model, tok, "abc", max_new_tokens=12, seeds=(0, 1))
    want = generate(model, torch.tensor([tok.encode("abc")]), 12, temperature=0.8, use_cache=False, seed=1)
    assert len(texts) == 2 and all(len(t) == 12 for t in texts)
    assert texts[1] == tok.decode(want[0, 3:].tolist())
