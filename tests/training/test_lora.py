"""LoRA (``transformer_lib.training.lora``) against the ``peft`` package (0.21.2) on the same weights and adapters:
outputs
before and after merging, merged weights, trainable-parameter counts, dropout, gradients and module matching; on a
Hugging Face ``BertModel`` built from all-MiniLM-L6-v2's local files, and on our ``BertEncoder`` holding the same
weights. Every comparison first makes the adapters non-zero (``B`` starts at zero, which would make equality
vacuous) and checks that they change the output."""

import copy
import math
import socket

import pytest
import torch
import torch.nn as nn

from transformer_lib.utils.params import count_parameters
from transformer_lib.training.lora import (
    LoRAConfig,
    LoRALinear,
    adam_state_bytes,
    apply_lora,
    lora_layers,
    lora_parameter_count,
    lora_targets,
    merge_and_unload,
    merge_lora,
    optimizer_state_bytes,
    unmerge_lora,
)
from transformer_lib.training.lora_sliced import SlicedLoRALinear, apply_sliced_lora, qkv_slices

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
# peft 0.21.2 calls a transformers 5.24 method that transformers deprecates (not ours to fix)
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

# whole-model outputs: six layers of float32 sums whose order (threads, CPU kernels) differs between runs and
# between a merged and an unmerged weight; the same tolerance as tests/models/test_pretrained.py
MODEL_TOL = dict(atol=1e-4, rtol=1e-4)
SENTENCES = ["The cat sat on the mat.", "A quick brown fox jumps over the lazy dog near the river.", "Hello!"]


def _no_network(*args, **kwargs):
    raise RuntimeError("test_lora must not touch the network")


@pytest.fixture(scope="module", autouse=True)
def offline():
    with pytest.MonkeyPatch.context() as mp:
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            mp.setenv(var, "1")
        mp.setattr(socket.socket, "connect", _no_network)
        mp.setattr(socket, "create_connection", _no_network)
        yield


@pytest.fixture(scope="module")
def minilm_files(offline):
    from transformer_lib.models.pretrained import load_minilm, minilm_dir

    model, tok = load_minilm(device="cpu")
    return minilm_dir(), model, tok


def hf_bert(path):
    model = transformers.BertModel.from_pretrained(str(path), attn_implementation="eager", local_files_only=True)
    return model.eval()


def peft_model(model, r, alpha, targets, dropout=0.0):
    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    return peft.get_peft_model(model, cfg)


def randomize_peft_B(pm, seed=0):
    """B is zero at init: give every peft adapter a random B (seeded) so the adapters change the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, m in pm.named_modules():
            if hasattr(m, "lora_B") and "default" in getattr(m, "lora_B", {}):
                w = m.lora_B["default"].weight
                w.copy_(torch.randn(w.shape, generator=g) * 0.05)


def copy_adapters(ours: nn.Module, pm, name_map=lambda n: n):
    """Copy peft's A and B into our LoRALinear layers (our name -> peft's inner-model name via name_map)."""
    inner = pm.base_model.model
    with torch.no_grad():
        for name, layer in lora_layers(ours).items():
            theirs = inner.get_submodule(name_map(name))
            layer.lora_A.copy_(theirs.lora_A["default"].weight)
            layer.lora_B.copy_(theirs.lora_B["default"].weight)


def peft_layers(pm) -> dict[str, nn.Module]:
    return {n: m for n, m in pm.base_model.model.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)}


# ----------------------------------------------------------------------------- config and matching
@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"r": 0}, "r"),
        ({"r": 2.0}, "r"),
        ({"r": True}, "r"),
        ({"alpha": 0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": -0.1}, "dropout"),
        ({"target_modules": ""}, "target_modules"),
        ({"target_modules": []}, "target_modules"),
        ({"target_modules": "query("}, "target_modules"),
        ({"target_modules": ["query", 3]}, "target_modules"),
    ],
)
def test_config_rejects_bad_values_naming_the_argument(kwargs, word):
    value = next(iter(kwargs.values()))
    wrong_type = word in ("r", "alpha", "dropout") and (isinstance(value, bool) or type(value) is not type(0 * value))
    wrong_type = wrong_type or (word == "r" and type(value) is not int)
    wrong_type = wrong_type or (word == "target_modules" and isinstance(value, list) and 3 in value)  # an int name
    with pytest.raises(TypeError if wrong_type else ValueError, match=rf"\b{word}\b"):
        LoRAConfig(**kwargs)


NAMES = [
    "encoder.layer.0.attention.self.query",
    "encoder.layer.10.attention.self.value",
    "encoder.layer.0.attention.output.dense",
    "encoder.layer.3.output.dense",
    "encoder.layer.3.intermediate.dense",
    "query",
    "myquery",
    "encoder.layer.0.attention.self",
    "pooler.dense",
    "layers.2.ffn.up",
    "layers.2.ffn.upper",
]


@pytest.mark.parametrize(
    "targets",
    [
        ["query", "value"],
        ["dense"],
        ["output.dense"],
        ["ffn.up", "self.query"],
        r".*\.layer\.\d+\.(output|intermediate)\.dense",
        r".*query",
        "query",
        r"layers\.\d\.ffn\.up",
    ],
)
def test_target_matching_is_peft_s(targets):
    from peft.tuners.tuners_utils import check_target_module_exists

    cfg_peft = peft.LoraConfig(target_modules=targets)
    ours = LoRAConfig(target_modules=targets)
    expected = [bool(check_target_module_exists(cfg_peft, n)) for n in NAMES]
    assert [ours.matches(n) for n in NAMES] == expected
    assert any(expected) and not all(expected)  # the case separates names


# ----------------------------------------------------------------------------- initialisation
def test_fresh_adapter_leaves_output_unchanged_and_A_is_kaiming_uniform():
    lin = nn.Linear(256, 64)
    layer = LoRALinear(copy.deepcopy(lin), r=64, alpha=16, generator=torch.Generator().manual_seed(0))
    x = torch.randn(5, 256)
    assert torch.equal(layer(x), lin(x))  # B = 0
    assert torch.count_nonzero(layer.lora_B) == 0
    bound = 1 / math.sqrt(256)  # kaiming_uniform(a=sqrt(5)): gain sqrt(2 / 6), bound gain * sqrt(3 / fan_in)
    a = layer.lora_A.detach().flatten()
    assert a.abs().max() <= bound and a.abs().max() > 0.999 * bound
    # uniform on +-bound: variance bound^2 / 3; its estimate over n draws has sd bound^2 * sqrt(4/45 / n)
    n = a.numel()
    assert abs(a.var().item() - bound**2 / 3) < 5 * bound**2 * math.sqrt(4 / 45 / n)
    # peft's lora_A on the same layer shape has the same support
    pm = peft_model(nn.Sequential(nn.Linear(256, 64)), r=64, alpha=16, targets=["0"])
    theirs = pm.base_model.model[0].lora_A["default"].weight.detach().flatten()
    assert theirs.abs().max() <= bound and theirs.abs().max() > 0.999 * bound
    assert abs(theirs.var().item() - bound**2 / 3) < 5 * bound**2 * math.sqrt(4 / 45 / n)


def test_generator_seeds_the_initialisation():
    def make(seed):
        return LoRALinear(nn.Linear(32, 8), r=4, generator=torch.Generator().manual_seed(seed)).lora_A

    assert torch.equal(make(1), make(1)) and not torch.equal(make(1), make(2))
    expected = torch.empty(4, 32)
    nn.init.kaiming_uniform_(expected, a=math.sqrt(5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(make(1), expected)


# ----------------------------------------------------------------------------- against peft on MiniLM
@pytest.fixture(scope="module")
def hf_pair(minilm_files):
    path = minilm_files[0]
    targets = ["query", "value", "dense"]
    pm = peft_model(hf_bert(path), r=4, alpha=8, targets=targets)
    randomize_peft_B(pm)
    ours = apply_lora(hf_bert(path), LoRAConfig(r=4, alpha=8, target_modules=targets))
    copy_adapters(ours, pm)
    return pm.eval(), ours.eval()


@pytest.fixture(scope="module")
def encoded(minilm_files):
    return minilm_files[2].encode(SENTENCES)


def test_adapted_layers_are_peft_s(hf_pair):
    pm, ours = hf_pair
    assert sorted(lora_layers(ours)) == sorted(peft_layers(pm))
    assert len(lora_layers(ours)) == 6 * 5 + 1  # query, value and three *.dense per layer; pooler.dense


def test_trainable_parameters_equal_peft_s_and_the_closed_form(hf_pair):
    pm, ours = hf_pair
    trainable, total = count_parameters(ours, trainable=True), count_parameters(ours)
    assert (trainable, total) == pm.get_nb_trainable_parameters()
    shapes = [tuple(m.base.weight.shape) for m in lora_layers(ours).values()]
    assert trainable == lora_parameter_count(LoRAConfig(r=4, alpha=8), shapes)
    assert all(p.requires_grad == ("lora_" in n) for n, p in ours.named_parameters())


def test_outputs_equal_peft_s_before_and_after_merging(hf_pair, encoded, minilm_files):
    pm, ours = hf_pair
    base = hf_bert(minilm_files[0])
    with torch.no_grad():
        plain = base(**encoded).last_hidden_state
        theirs = pm(**encoded).last_hidden_state
        mine = ours(**encoded).last_hidden_state
        assert (theirs - plain).abs().max() > 0.05  # the adapters matter, so equality below says something
        torch.testing.assert_close(mine, theirs, **MODEL_TOL)
        originals = {n: m.base.weight.clone() for n, m in lora_layers(ours).items()}
        merge_lora(ours)
        pm.merge_adapter()
        try:
            for name, layer in lora_layers(ours).items():
                torch.testing.assert_close(
                    layer.base.weight, peft_layers(pm)[name].base_layer.weight, atol=1e-6, rtol=1e-6
                )
            torch.testing.assert_close(ours(**encoded).last_hidden_state, pm(**encoded).last_hidden_state, **MODEL_TOL)
            torch.testing.assert_close(ours(**encoded).last_hidden_state, mine, **MODEL_TOL)
        finally:
            unmerge_lora(ours)
            pm.unmerge_adapter()
        for name, layer in lora_layers(ours).items():
            assert torch.equal(layer.base.weight, originals[name])  # exact round trip
        assert torch.equal(ours(**encoded).last_hidden_state, mine)


def test_merge_and_unload_equals_peft_s(hf_pair, encoded):
    pm, ours = hf_pair
    ours, theirs = merge_and_unload(copy.deepcopy(ours)), copy.deepcopy(pm).merge_and_unload()
    assert not lora_layers(ours) and not any("lora" in k for k in ours.state_dict())
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for k, v in ours.state_dict().items():
        torch.testing.assert_close(v, theirs.state_dict()[k], atol=1e-6, rtol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(ours(**encoded).last_hidden_state, pm(**encoded).last_hidden_state, **MODEL_TOL)


def test_our_encoder_with_our_lora_equals_hf_bert_with_peft(minilm_files, encoded):
    path, minilm, _ = minilm_files
    regex = r".*\.layer\.\d+\.(attention\.output|intermediate|output)\.dense"
    pm = peft_model(hf_bert(path), r=8, alpha=32, targets=regex)
    randomize_peft_B(pm, seed=1)
    ours = apply_lora(
        copy.deepcopy(minilm), LoRAConfig(r=8, alpha=32, target_modules=["self_attn.out", "ffn.up", "ffn.down"])
    )
    to_hf = {"self_attn.out": "attention.output.dense", "ffn.up": "intermediate.dense", "ffn.down": "output.dense"}

    def name_map(name):  # layers.3.ffn.up -> encoder.layer.3.intermediate.dense
        _, i, rest = name.split(".", 2)
        return f"encoder.layer.{i}.{to_hf[rest]}"

    copy_adapters(ours, pm, name_map)
    assert len(lora_layers(ours)) == len(peft_layers(pm)) == 18
    assert count_parameters(ours, trainable=True) == pm.get_nb_trainable_parameters()[0]
    mask = encoded["attention_mask"].bool()
    with torch.no_grad():
        theirs = pm(**encoded).last_hidden_state
        mine = ours(**encoded).last_hidden_state
        assert (theirs - minilm(**encoded).last_hidden_state)[mask].abs().max() > 0.05
        torch.testing.assert_close(mine[mask], theirs[mask], atol=1e-4, rtol=1e-4)
        merge_lora(ours)
        pm.merge_adapter()
        torch.testing.assert_close(
            ours(**encoded).last_hidden_state[mask], pm(**encoded).last_hidden_state[mask], atol=1e-4, rtol=1e-4
        )


def test_our_fused_qkv_with_q_and_v_adapters_equals_peft_on_query_and_value(minilm_files, encoded):
    """The paper's choice (W_Q and W_V) inside our stacked qkv, against peft on HF's separate query and value."""
    path, minilm, _ = minilm_files
    pm = peft_model(hf_bert(path), r=4, alpha=8, targets=["query", "value"])
    randomize_peft_B(pm, seed=2)
    ours = apply_sliced_lora(
        copy.deepcopy(minilm), LoRAConfig(r=4, alpha=8, target_modules=["self_attn.qkv"]), qkv_slices(384, "qv")
    )
    inner = pm.base_model.model
    with torch.no_grad():
        for name, layer in lora_layers(ours).items():
            i = name.split(".")[1]
            for part, hf in (("q", "query"), ("v", "value")):
                theirs = inner.get_submodule(f"encoder.layer.{i}.attention.self.{hf}")
                layer.lora_A[part].copy_(theirs.lora_A["default"].weight)
                layer.lora_B[part].copy_(theirs.lora_B["default"].weight)
    assert count_parameters(ours, trainable=True) == pm.get_nb_trainable_parameters()[0] == 6 * 2 * 4 * (384 + 384)
    mask = encoded["attention_mask"].bool()
    with torch.no_grad():
        theirs = pm(**encoded).last_hidden_state
        mine = ours(**encoded).last_hidden_state
        assert (theirs - minilm(**encoded).last_hidden_state)[mask].abs().max() > 0.05
        torch.testing.assert_close(mine[mask], theirs[mask], **MODEL_TOL)
        w = {n: m.base.weight.clone() for n, m in lora_layers(ours).items()}
        merge_lora(ours)
        delta = lora_layers(ours)["layers.0.self_attn.qkv"].base.weight - w["layers.0.self_attn.qkv"]
        assert delta[384:768].abs().max() == 0 and delta[:384].abs().max() > 0  # W_K untouched
        torch.testing.assert_close(ours(**encoded).last_hidden_state[mask], theirs[mask], **MODEL_TOL)
        unmerge_lora(ours)
        assert all(torch.equal(m.base.weight, w[n]) for n, m in lora_layers(ours).items())
        merged = merge_and_unload(copy.deepcopy(ours))
        torch.testing.assert_close(merged(**encoded).last_hidden_state[mask], theirs[mask], **MODEL_TOL)


def test_sliced_adapters_check_their_slices():
    lin = nn.Linear(8, 12)
    for bad in ({}, {"a": (0, 13)}, {"a": (4, 4)}, {"a": (0, 6), "b": (5, 9)}, {"a b": (0, 2)}):
        with pytest.raises(ValueError, match="slices"):
            SlicedLoRALinear(lin, bad)
    with pytest.raises(TypeError, match=r"slices\['a'\]\[0\] must be an int in \[0, 11\] \(start\), got float 0.0"):
        SlicedLoRALinear(lin, {"a": (0.0, 2)})
    with pytest.raises(ValueError, match="which"):
        qkv_slices(8, "qx")
    assert qkv_slices(8, "kv") == {"k": (8, 16), "v": (16, 24)}
    model = toy()
    with pytest.raises(ValueError, match="slices"):  # 8 output rows in layer "2": checked before any change
        apply_sliced_lora(model, LoRAConfig(target_modules=["0", "2"]), {"a": (0, 16)})
    assert not lora_layers(model) and all(p.requires_grad for p in model.parameters())


# ----------------------------------------------------------------------------- training behaviour
def toy():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))


def test_dropout_and_gradients_equal_peft_s():
    pm = peft_model(toy(), r=4, alpha=12, targets=["0", "2"], dropout=0.3)
    randomize_peft_B(pm, seed=3)
    ours = apply_lora(toy(), LoRAConfig(r=4, alpha=12, dropout=0.3, target_modules=["0", "2"]))
    copy_adapters(ours, pm)
    pm.train(), ours.train()
    x = torch.randn(64, 16)
    torch.manual_seed(5)
    y_theirs = pm(x)
    torch.manual_seed(5)
    y_mine = ours(x)  # the same dropout masks: nothing else draws random numbers
    torch.testing.assert_close(y_mine, y_theirs, atol=1e-6, rtol=1e-6)
    torch.manual_seed(6)
    assert (ours(x) - y_mine).abs().max() > 1e-3  # dropout is on: another draw, another output
    y_mine.square().sum().backward()
    y_theirs.square().sum().backward()
    inner = pm.base_model.model
    for name, layer in lora_layers(ours).items():
        torch.testing.assert_close(
            layer.lora_A.grad, inner.get_submodule(name).lora_A["default"].weight.grad, atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(
            layer.lora_B.grad, inner.get_submodule(name).lora_B["default"].weight.grad, atol=1e-5, rtol=1e-5
        )
    assert all((p.grad is None) != ("lora_" in n) for n, p in ours.named_parameters())


def test_eval_mode_turns_dropout_off():
    ours = apply_lora(toy(), LoRAConfig(r=4, dropout=0.5, target_modules=["0"])).eval()
    x = torch.randn(8, 16)
    assert torch.equal(ours(x), ours(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_base_keeps_float32_adapters(dtype):
    layer = LoRALinear(nn.Linear(64, 32).to(dtype), r=4, alpha=8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        layer.lora_B.normal_(generator=torch.Generator().manual_seed(1))
    x = torch.randn(3, 64, dtype=dtype)
    y = layer(x)
    assert y.dtype == dtype and layer.lora_A.dtype == layer.lora_B.dtype == torch.float32
    expected = x.float() @ layer.base.weight.float().T + layer.base.bias.float() + x.float() @ layer.delta_weight().T
    torch.testing.assert_close(y.float(), expected, atol=0.05, rtol=0.02)
    w = layer.base.weight.clone()
    layer.merge()
    layer.unmerge()
    assert torch.equal(layer.base.weight, w)


@pytest.mark.cuda
def test_runs_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    layer = LoRALinear(nn.Linear(64, 32).cuda(), r=4, generator=torch.Generator("cuda").manual_seed(0))
    assert layer.lora_A.is_cuda
    x = torch.randn(3, 64, device="cuda")
    layer(x).sum().backward()
    assert layer.lora_B.grad.is_cuda


# ----------------------------------------------------------------------------- errors and state
def test_errors_name_the_problem_and_leave_the_model_as_it_was():
    model = toy()
    with pytest.raises(ValueError, match=r"target_modules entries that match no module must be empty .*\['query'\]"):
        apply_lora(model, LoRAConfig(target_modules=["query"]))
    with pytest.raises(ValueError, match="not nn.Linear"):
        apply_lora(model, LoRAConfig(target_modules=["0", "1"]))
    assert all(p.requires_grad for p in model.parameters()) and not lora_layers(model)  # unchanged
    with pytest.raises(TypeError, match="config"):
        apply_lora(model, {"r": 4})
    with pytest.raises(TypeError, match="generator"):
        apply_lora(model, LoRAConfig(target_modules=["0", "2"]), generator=0)
    assert all(p.requires_grad for p in model.parameters()) and not lora_layers(model)  # unchanged
    with pytest.raises(ValueError, match=r"model's LoRALinear layers must hold at least 1 item\(s\)"):
        merge_lora(model)
    apply_lora(model, LoRAConfig(r=2, target_modules=["0", "2"]))
    with pytest.raises(RuntimeError, match="not merged"):
        unmerge_lora(model)
    lora_layers(model)["2"].merge()
    w0 = model[0].base.weight.clone()
    with pytest.raises(RuntimeError, match="already merged"):
        merge_lora(model)
    assert torch.equal(model[0].base.weight, w0) and not model[0].merged  # nothing merged by the failed call
    with pytest.raises(RuntimeError, match="already merged"):
        model[2].merge()
    with pytest.raises(ValueError, match="in_features=16"):
        model(torch.randn(2, 15))
    with pytest.raises(TypeError, match="base"):
        LoRALinear(nn.GELU())
    with pytest.raises(ValueError, match="r"):
        LoRALinear(nn.Linear(4, 4), r=0)
    with pytest.raises(ValueError, match="match no module"):  # a second apply finds nothing new to adapt
        apply_lora(model, LoRAConfig(target_modules=["0"]))
    assert lora_targets(toy(), LoRAConfig(target_modules=r"[02]")) == ["0", "2"]


def test_optimizer_state_bytes_equal_adam_s_closed_form_and_scale_with_trainable_parameters():
    full, lora = toy(), apply_lora(toy(), LoRAConfig(r=2, target_modules=["0", "2"]))
    x = torch.randn(4, 16)
    sizes = {}
    for name, model in (("full", full), ("lora", lora)):
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        model(x).square().sum().backward()
        opt.step()
        sizes[name] = optimizer_state_bytes(opt)
        assert sizes[name] == adam_state_bytes(model.parameters())
    n_full = sum(p.numel() for p in full.parameters())
    assert sizes["full"] == 8 * n_full + 4 * 4  # two float32 moments per weight, a step per tensor (4 tensors)
    assert sizes["lora"] == 8 * (2 * (16 + 32) + 2 * (32 + 8)) + 4 * 4  # only the adapters' A and B
    with pytest.raises(TypeError, match="optimizer"):
        optimizer_state_bytes([])


def test_a_target_name_that_matches_nothing_is_named_before_anything_is_wrapped():
    model = nn.Sequential(toy(), nn.Linear(8, 4))  # linears named 0.0, 0.2 and 1
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        ValueError, match=r"target_modules entries that match no module .*'0.0'.*got 2, e.g. \['proj', 'qkv'\]"
    ):
        apply_lora(model, LoRAConfig(target_modules=["qkv", "0.2", "proj"]))
    assert not lora_layers(model) and all(p.requires_grad for p in model.parameters())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    apply_lora(model, LoRAConfig(target_modules=["0.2", "0.0"]))  # the corrected retry
    assert sorted(lora_layers(model)) == ["0.0", "0.2"]
