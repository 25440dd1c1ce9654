"""experiments.left_padding: a left-padded batch with its attention_mask generates what each prompt generates
alone, checked against a plain greedy loop (full forward pass, argmax, no cache) written here."""

import pytest
import torch

from transformer_lib.experiments.left_padding import generate_batched_and_alone, left_pad
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT, init_weights


def _greedy_alone(model, prompt, n):
    ids = torch.tensor([prompt])
    for _ in range(n):
        nxt = model(ids)[0][0, -1].argmax()
        ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    return ids[0, len(prompt) :].tolist()


def test_left_pad_puts_padding_on_the_left():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]


def test_left_pad_takes_tensors_too():
    ids, mask = left_pad([torch.tensor([5, 6, 7]), torch.tensor([9])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    with pytest.raises(
        ValueError, match=r"prompts\[0\] must be a tensor of shape \(T,\) \(one prompt's token ids\), got \(0,\)"
    ):
        left_pad([torch.tensor([], dtype=torch.long)])


def test_left_pad_rejects_an_empty_prompt():
    with pytest.raises(
        ValueError, match=r"prompts\[1\] must hold at least 1 item\(s\) \(one prompt's token ids\), got 0"
    ):
        left_pad([[1, 2], []])
    with pytest.raises(ValueError, match=r"prompts must hold at least 1 item\(s\), got 0"):
        left_pad([])
    with pytest.raises(TypeError, match=r"prompts must be a list or tuple, got Tensor"):
        left_pad(torch.tensor([[1, 2]]))


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_batched_generation_equals_each_prompt_alone(positional):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=32, n_layers=2, n_heads=4, d_model=32, positional=positional))
    model.apply(lambda m: init_weights(m, std=0.2))
    model.eval()
    prompts = [[3, 9, 4, 1, 7, 2], [5, 5], [11, 30, 2, 8]]
    with torch.no_grad():
        res = generate_batched_and_alone(model, prompts, 10)
        reference = [_greedy_alone(model, p, 10) for p in prompts]
    assert res.batched == res.alone == reference
    assert res.max_logit_diff < 1e-4
    assert res.attention_mask.sum(-1).tolist() == [6, 2, 4]
