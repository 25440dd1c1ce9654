"""The Triton attention kernel against ``F.scaled_dot_product_attention``: in Triton's interpreter on the CPU (tiny
shapes, a few seconds), and compiled on CUDA (tests marked ``cuda``: fp16/bf16, and a timing against SDPA's flash
backend printed as a benchmark, not asserted). Skipped with a reason when ``triton`` is not installed."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    # the interpreter must be chosen before the kernel module is imported (Triton decides at decoration time)
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip(
    "triton", reason="triton is not installed (pip install -r requirements-triton.txt; Linux wheels only)"
)
import torch.nn.functional as F  # noqa: E402

from transformer_lib.kernels.flash_triton import INTERPRETED, flash_attention_triton  # noqa: E402
from transformer_lib.blocks.masking import causal_mask  # noqa: E402
from transformer_lib.book_tools.timing import ratio_with_interval  # noqa: E402


def qkv(B, H, Tq, Tk, D, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, device=device, dtype=dtype) for T in (Tq, Tk, Tk)]


def sdpa(q, k, v, causal):
    mask = causal_mask(q.shape[2], k.shape[2], device=q.device) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


needs_interpreter = pytest.mark.skipif(not INTERPRETED, reason="a CUDA GPU is present: the kernel is compiled")


@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 16, 16, 16), (2, 3, 37, 37, 24), (1, 2, 5, 50, 8), (1, 1, 1, 77, 32)])
def test_interpreted_kernel_matches_sdpa(shape, causal):
    q, k, v = qkv(*shape)
    torch.testing.assert_close(
        flash_attention_triton(q, k, v, causal=causal), sdpa(q, k, v, causal), atol=1e-6, rtol=1e-5
    )


@needs_interpreter
def test_larger_blocks_give_the_same_result():
    q, k, v = qkv(1, 2, 45, 45, 16)
    out = flash_attention_triton(q, k, v, causal=True, block_m=32, block_n=64)
    torch.testing.assert_close(out, sdpa(q, k, v, True), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda q, k, v: flash_attention_triton(q[0], k, v),
            "q must be a tensor of shape (B, H, Tq, D), got (2, 5, 16)",
        ),
        (
            lambda q, k, v: flash_attention_triton(q.double(), k, v),
            "q must be a torch.float16 or torch.bfloat16 or torch.float32 tensor, got torch.float64",
        ),
        (lambda q, k, v: flash_attention_triton(q, k.half(), v), "k must be a torch.float32 tensor, got torch.float16"),
        (
            lambda q, k, v: flash_attention_triton(q, k[..., :8], v),
            "k must be a tensor of shape (1, 2, any, 16) ((B, H, Tk, D), B, H, D and dtype as in q), got (1, 2, 6, 8)",
        ),
        (lambda q, k, v: flash_attention_triton(q, k, v[:, :, :3]), "v must be a tensor of shape (1, 2, 6, 16)"),
        (
            lambda q, k, v: flash_attention_triton(q, k[:, :, :3], v[:, :, :3], causal=True),
            "k.shape[2] must be an int >= 5 (Tk: causal needs at least Tq = q.shape[2] keys), got 3",
        ),
        (
            lambda q, k, v: flash_attention_triton(q, k, v, block_m=24),
            "block_m must be one of [16, 32, 64, 128, 256, 512, 1024, 2048, 4096], got 24",
        ),
        (lambda q, k, v: flash_attention_triton(q, k, v, block_n=8), "block_n must be one of [16, 32,"),
    ],
)
def test_bad_inputs_are_named(call, message):
    q, k, v = qkv(1, 2, 5, 6, 16)
    with pytest.raises(ValueError) as error:
        call(q, k, v)
    assert message in str(error.value)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_compiled_kernel_matches_sdpa_in_half_precision(dtype, causal):
    q, k, v = qkv(2, 4, 300, 300, 64, dtype=dtype, device="cuda")
    out = flash_attention_triton(q, k, v, causal=causal, block_m=64, block_n=64)
    ref = sdpa(q.float(), k.float(), v.float(), causal)
    torch.testing.assert_close(out.float(), ref, atol=2e-2 if dtype == torch.bfloat16 else 3e-3, rtol=0)


@pytest.mark.cuda
def test_compiled_kernel_timed_against_sdpa_flash_backend(capsys):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = qkv(4, 16, 4096, 4096, 64, dtype=torch.float16, device="cuda")

    def reference():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    ratio = ratio_with_interval(
        lambda: flash_attention_triton(q, k, v, causal=True, block_m=64, block_n=64),
        reference,
        repeats=9,
        warmup=3,
        device="cuda",
    )
    with capsys.disabled():
        print(f"\nTriton kernel / SDPA flash backend, B4 H16 T4096 D64 fp16 causal: {ratio}")
    assert ratio.seconds_a > 0  # a benchmark print: speed is not a pass/fail here (house rule 7)


@needs_interpreter
def test_the_interpreter_refuses_bf16_which_it_computes_wrongly():
    q, k, v = qkv(1, 1, 16, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"q must not be bfloat16 under Triton's interpreter"):
        flash_attention_triton(q, k, v)
