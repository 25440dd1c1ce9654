"""GPU kernels written in Triton (Tillet, Kung & Cox 2019), optional: the library runs without them.

``flash_attention_triton`` (in ``kernels.flash_triton``) is the tiled forward pass of ``transformer_lib.blocks.flash``
as
one ``@triton.jit`` kernel. Triton is installed from ``requirements-triton.txt`` (a Linux wheel; none for macOS).
On a machine without a CUDA GPU the same kernel runs in Triton's interpreter, on CPU tensors, when the environment
variable ``TRITON_INTERPRET=1`` is set *before* the kernel module is imported (Triton decides at decoration time
whether ``@triton.jit`` compiles or interprets)::

    import os
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the import below; only where there is no GPU
    from transformer_lib.kernels.flash_triton import flash_attention_triton
"""

from __future__ import annotations

import importlib.util
import os


def triton_available() -> bool:
    """True when the ``triton`` package is installed (it is not imported here)."""
    return importlib.util.find_spec("triton") is not None


def interpreter_requested() -> bool:
    """True when ``TRITON_INTERPRET=1`` is set: ``@triton.jit`` kernels then run on the CPU, in Python."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
