"""The ``seed-offset`` setting: every integer seed a chapter sets moves by an offset, in the kernel, before any cell
runs (tools/perturb.py's docstring says which functions are wrapped and which seeds are kept).

The kernel loads this file by path from an IPython start-up file (``write_ipython_dir``), so it imports nothing of
tools/.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve()

# seeds fixed by a committed file, not samples to redraw: the days the committed translator was trained on; the
# held-out windows of the Shakespeare GPT, which its checkpoint's record and chapter 09's committed study were scored
# on (the page checks its perplexity on them against the file's); and the sentence sets and gradient probes of
# chapter 08's committed MiniLM study (the page recomputes part of it with the same seeds to check that the file
# belongs to the model, and pairs its own measurements with the file's, set by set); chapter 12's split of lines
# that the committed adapters were trained on; chapter 11's held-out windows, which its record scored the committed
# mixtures on (the page checks the loaded models against the record on them)
DEFAULT_KEEP = (
    "transformer_lib.data.dates:date_split",
    "transformer_lib.book_models.metrics:shakespeare_val_batches",
    "transformer_lib.experiments.minilm_pruning:sentence_sets",
    "transformer_lib.experiments.minilm_pruning:sensitivity_importance",
    "transformer_lib.data.task_data:play_line_task",
    "transformer_lib.experiments.moe_vs_dense:val_batches",
)
DEFAULT_OFFSET = 1000


def install_seed_offset(offset: int, keep=DEFAULT_KEEP) -> None:
    """Wrap the seeding functions of torch, ``random`` and numpy so that every integer seed becomes
    ``seed + offset``, except in calls made from within a function named in ``keep`` (``"module:function"``)."""
    import functools
    import random
    import threading

    keep = {tuple(k.split(":", 1)) for k in keep}
    inside = threading.local()

    def kept() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if (frame.f_globals.get("__name__"), frame.f_code.co_name) in keep:
                return True
            frame = frame.f_back
        return False

    def shifted(seed):
        import numbers

        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            return seed
        return int(seed) + offset

    def wrap(fn, position: int, keyword: str):
        """``fn`` whose seed argument (``position`` among the positional ones, or ``keyword``) is offset."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if getattr(inside, "on", False) or kept():
                return fn(*args, **kwargs)
            if len(args) > position:
                args = (*args[:position], shifted(args[position]), *args[position + 1 :])
            elif keyword in kwargs:
                kwargs[keyword] = shifted(kwargs[keyword])
            inside.on = True
            try:
                return fn(*args, **kwargs)
            finally:
                inside.on = False

        wrapper.__perturb_wrapped__ = True
        return wrapper

    def subclass(native, **methods):
        """``native`` with ``methods`` replaced; ``isinstance`` and ``issubclass`` answer as for ``native``, so
        the instances made before (``torch.default_generator``, numpy's global ``RandomState``) still pass."""

        class Meta(type(native)):
            def __instancecheck__(cls, obj):
                return isinstance(obj, native)

            def __subclasscheck__(cls, sub):
                return issubclass(sub, native)

        return Meta(
            native.__name__,
            (native,),
            {**methods, "__module__": native.__module__, "__qualname__": native.__qualname__},
        )

    random.Random.seed = wrap(random.Random.seed, 1, "a")  # random.Random(s) calls it from __init__
    random.seed = random._inst.seed  # the module's function is a method bound to its hidden instance

    import numpy as np

    np.random.seed = wrap(np.random.seed, 0, "seed")
    np.random.default_rng = wrap(np.random.default_rng, 0, "seed")
    legacy = np.random.RandomState
    np.random.RandomState = subclass(
        legacy, __init__=wrap(legacy.__init__, 1, "seed"), seed=wrap(legacy.seed, 1, "seed")
    )

    import torch

    torch.manual_seed = torch.random.manual_seed = wrap(torch.random.manual_seed, 0, "seed")
    native = torch.Generator
    torch.Generator = subclass(native, manual_seed=wrap(native.manual_seed, 1, "seed"))


STARTUP = """\
def _perturb_seed_offset():
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("_perturb_tool", {path!r})
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install_seed_offset({offset!r}, {keep!r})
_perturb_seed_offset()
del _perturb_seed_offset
"""


def write_ipython_dir(folder: Path, offset: int, keep) -> Path:
    """An ``IPYTHONDIR`` whose default profile installs the seed offset at kernel start."""
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-perturb-seed-offset.py").write_text(
        STARTUP.format(path=str(HERE), offset=int(offset), keep=tuple(keep)), encoding="utf-8"
    )
    return folder
