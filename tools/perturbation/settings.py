"""The settings ``make perturb`` runs a notebook under (tools/perturb.py's docstring describes each), and the
environment each run starts from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

# variables the settings control: removed from the caller's environment first, so "default" is the default
CONTROLLED = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BOOK_CLAIMS",
    "BOOK_CLAIMS_LOG",
    "IPYTHONDIR",
)


@dataclass(frozen=True)
class Setting:
    name: str
    what: str
    env: dict = field(default_factory=dict)
    seed_offset: bool = False
    pinned: bool = False
    cuda: bool = False


SETTINGS = {
    s.name: s
    for s in (
        Setting("default", "the caller's environment, CPU"),
        Setting(
            "aten-default",
            "`ATEN_CPU_CAPABILITY=default`: torch's kernels without AVX2/AVX-512",
            env={"ATEN_CPU_CAPABILITY": "default"},
        ),
        Setting(
            "mkl-compatible",
            "`MKL_CBWR=COMPATIBLE`: MKL's conservative matrix products",
            env={"MKL_CBWR": "COMPATIBLE"},
        ),
        Setting(
            "avx2",
            "`ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`: an AVX2-only CPU's code paths",
            env={"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
        ),
        Setting(
            "one-thread", "`OMP_NUM_THREADS=1 MKL_NUM_THREADS=1`", env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        ),
        Setting("seed-offset", "every integer seed offset (torch, torch.Generator, random, numpy)", seed_offset=True),
        Setting("core0-busy", "the run and a competing busy process pinned to one core (`taskset -c 0`)", pinned=True),
        Setting("cuda", "the GPU visible (CUDA)", cuda=True),
    )
}


def probe_torch(env: dict) -> dict:
    """torch's version, CPU capability and whether it sees a GPU, in ``env`` (asked in a subprocess, once)."""
    code = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.cuda.is_available(), "
        "'capability': torch.backends.cpu.get_cpu_capability()}))"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {}


def first_core() -> int | None:
    """The first core this process may run on (``taskset -c 0`` where all are allowed); None off Linux."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    return min(os.sched_getaffinity(0))


def base_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env
