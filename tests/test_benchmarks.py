"""The benchmarks still run: each one's --quick mode, as a user would start it, end to end.

Speed is not asserted here (house rule 7: benchmarks measure it, tests do not); these tests catch a benchmark broken
by a library change, and check that its output holds the tables and the ratios it promises.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RATIO = re.compile(r"\d+\.\d\dx")  # "1.23x": a ratio against the baseline of the same run


def run_benchmark(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_bench_attention_quick():
    out = run_benchmark("bench_attention.py", "--quick")
    assert "nn.MHA" in out and RATIO.search(out), out


@pytest.mark.slow
def test_bench_kv_cache_quick():
    out = run_benchmark("bench_kv_cache.py", "--quick")
    assert "static" in out and RATIO.search(out), out


@pytest.mark.slow
def test_bench_compression_quick():
    out = run_benchmark("bench_compression.py", "--quick")
    titles = re.findall(r"^## (.*)$", out, flags=re.MULTILINE)
    assert len(titles) == 11, titles  # 3 pruning tables (GPT), 2 pruning on MiniLM, 6 quantization tables
    assert sum(t.startswith("MiniLM:") for t in titles) == 2 and "36 heads removed" in out, titles
    for start in ("Trained GPT at int4", "MiniLM at int4", "MiniLM W8A8", "NF4 vs int4"):
        assert any(t.startswith(start) for t in titles), start
    for method in ("rtn", "gptq", "awq"):
        assert re.search(rf"^\s*(per-channel|g32)\s+{method}\s", out, flags=re.MULTILINE), method
    for fmt in ("fp32", "bf16", "int8 per-channel", "int8 W8A8", "int4 g128", "int4 g32", "quantize_dynamic"):
        assert fmt in out, fmt
    size_row = next(line for line in out.splitlines() if line.strip().startswith("int8 per-channel"))
    assert float(size_row.split()[3]) <= 0.29  # bytes on disk vs fp32: the int8 size target
