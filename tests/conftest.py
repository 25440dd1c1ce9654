"""Shared test setup.

* Tests marked ``@pytest.mark.cuda`` are skipped when no CUDA GPU is visible (the marker is registered in
  ``pyproject.toml``). ``requires_cuda`` is the same skip as a decorator for a single test.
* Every test starts from the same torch seed, so a failure reproduces.
* ``make_cache`` gives a minimal object with the library's KV-cache protocol.
* Torch runs on one thread (see below).
"""
import pytest
import torch

# The tests use tiny tensors, which gain nothing from intra-op threads; on a busy 2-core machine two threads
# spinning against other processes made them ~6x slower. One thread keeps the suite fast everywhere.
torch.set_num_threads(1)

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marked @pytest.mark.cuda)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)


class ConcatCache:
    """The smallest object with the library's cache protocol (``get_seq_length``, ``update``): it concatenates
    each layer's keys and values along time. Used to check cached decoding against a full recompute."""

    def __init__(self):
        self.keys, self.values = {}, {}

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[-2] if layer_idx in self.keys else 0

    def update(self, k, v, layer_idx: int):  # k, v: (B, H, T, d_head)
        if layer_idx in self.keys:
            k = torch.cat([self.keys[layer_idx], k], dim=-2)
            v = torch.cat([self.values[layer_idx], v], dim=-2)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v


@pytest.fixture
def make_cache():
    """A factory of empty ``ConcatCache``s."""
    return ConcatCache
