"""Argument checks shared by the whole library (house rule 6: a clear error naming the argument, what was expected
and what was received; never a silent NaN).

Used by every chapter's modules; no chapter imports it directly.

Each check returns its value, so a caller can write ``n = check_int("n", n, min=1)``. A value of the wrong type
raises ``TypeError``; one of the right type outside its range raises ``ValueError``. A ``bool`` is never accepted as
a number (``True`` is an ``int`` to Python, but ``n_heads=True`` is a mistake, not a 1). The message reads
``"<name> must be <expected>, got <received>"``; the received part names the type when the type is what is wrong.

* ``check_int(name, value, min=None, max=None, note="", optional=False, multiple_of=None)``: an integer (Python or
  NumPy), not a bool, not a float;
* ``check_number(name, value, min=None, max=None, min_open=False, max_open=False, finite=True, ...)``: a real number;
* ``check_probability(name, value, allow_one=False)``: a number in ``[0, 1)`` (dropout) or ``[0, 1]``;
* ``check_bool(name, value)``: exactly ``True`` or ``False``;
* ``check_tensor(name, value, shape=None, finite=False, dtype=None, floating=False, integer=False, min=None, ...)``:
  a tensor, of ``shape`` (``None`` entries match any size >= 1, a leading ``...`` any leading dimensions) and, with
  ``finite=True``, holding no NaN or infinity; with ``min``, no value below it;
* ``check_ids(name, value, vocab_size, shape=None, ignore_index=None, dtype=None)``: an integer tensor of token ids
  (or targets) in ``[0, vocab_size)`` (``>= 0`` with ``vocab_size=None``), ``ignore_index`` allowed where given;
* ``check_choice(name, value, choices, note="")``: one of a set of options;
* ``check_equal(name, value, expected, note="")``: a value that must equal another (a size, a flag);
* ``check_empty(name, items, note="")``: nothing left over (a loader's unplaced keys);
* ``check_fields(name, obj, **expected)``: attributes of ``obj`` (a module's configuration) with given values;
* ``check_dtype(name, value, floating=False)``: a ``torch.dtype`` (a floating-point one with ``floating``);
* ``check_sequence(name, value, min_len=0, length=None, note="", items=None, unique=False)``: a list or tuple
  of a length, each item a type or passing a check;
* ``check_type(name, value, types=(), methods=(), expected="", optional=False)``: an instance of ``types``, or an
  object with the callable ``methods`` (a duck-typed protocol: a KV cache, an iterable, a callable);
* ``broadcast_shape(*shapes)``: the shape they broadcast to, or None (``torch.broadcast_shapes``, without its
  cost per call).
"""

from __future__ import annotations

import math
import numbers

import torch


def _received(value) -> str:
    """``value`` as an error message shows it: its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _wrong_type(name: str, expected: str, value) -> TypeError:
    return TypeError(f"{name} must be {expected}, got {type(value).__name__} {_received(value)}")


def _range_text(kind: str, min, max, min_open: bool = False, max_open: bool = False) -> str:
    """``"an int >= 1"``, ``"a number in (0, 1]"``, ...: what a range check expects, in words."""
    if min is not None and max is not None:
        return f"{kind} in {'(' if min_open else '['}{min}, {max}{')' if max_open else ']'}"
    if min is not None:
        return f"{kind} {'>' if min_open else '>='} {min}"
    if max is not None:
        return f"{kind} {'<' if max_open else '<='} {max}"
    return kind


def _expected(text: str, note: str, optional: bool | str) -> str:
    """``"an int >= 1 (note) or None (what None means)"``."""
    text += f" ({note})" if note else ""
    if optional:
        text += " or None" + (f" ({optional})" if isinstance(optional, str) else "")
    return text


def check_int(
    name: str,
    value,
    min: int | None = None,
    max: int | None = None,
    note: str = "",
    optional: bool | str = False,
    multiple_of: int | None = None,
) -> int | None:
    """``value`` as an ``int``: an integer (``int`` or NumPy integer; not a bool, not a float) in ``[min, max]``,
    and a multiple of ``multiple_of`` where given (``multiple_of=2``: even).

    ``TypeError`` for another type, ``ValueError`` outside the range. ``None`` bounds are open ended; ``note``
    says in the message what the number is for; ``optional``: ``None`` is accepted (and returned), and a string
    says what ``None`` means (``optional="full attention"``).
    """
    if optional and value is None:
        return None
    kind = _range_text("an int", min, max) + ("" if multiple_of is None else f", a multiple of {multiple_of}")
    expected = _expected(kind, note, optional)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _wrong_type(name, expected, value)
    bad = (min is not None and value < min) or (max is not None and value > max)
    if bad or (multiple_of is not None and value % multiple_of != 0):
        raise ValueError(f"{name} must be {expected}, got {_received(value)}")
    return int(value)


def check_number(
    name: str,
    value,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    finite: bool = True,
    note: str = "",
    optional: bool | str = False,
) -> float | None:
    """``value`` as a ``float``: a real number (not a bool) in the range the bounds give (closed unless
    ``min_open``/``max_open``), finite unless ``finite=False``. NaN is never in a range.

    ``TypeError`` for another type, ``ValueError`` for NaN, infinity (with ``finite``) or outside the range.
    ``note`` and ``optional`` as in ``check_int``.
    """
    if optional and value is None:
        return None
    kind = "a number" if not finite or min is not None and max is not None else "a finite number"
    expected = _expected(_range_text(kind, min, max, min_open, max_open), note, optional)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _wrong_type(name, expected, value)
    x = float(value)
    bad = math.isnan(x) or (finite and math.isinf(x))
    bad = bad or (min is not None and (x <= min if min_open else x < min))
    bad = bad or (max is not None and (x >= max if max_open else x > max))
    if bad:
        raise ValueError(f"{name} must be {expected}, got {_received(value)}")
    return x


def check_probability(name: str, value, allow_one: bool = False) -> float:
    """A probability: a number in ``[0, 1)`` (a dropout rate: 1 would drop everything), or ``[0, 1]`` with
    ``allow_one``."""
    if allow_one:
        return check_number(name, value, 0, 1)
    expected = "a probability in [0, 1)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _wrong_type(name, expected, value)
    if not 0 <= value < 1:  # also refuses NaN
        raise ValueError(f"{name} must be {expected}, got {_received(value)}")
    return float(value)


def check_bool(name: str, value) -> bool:
    """Exactly ``True`` or ``False`` (not 0/1, not a tensor): ``TypeError`` otherwise."""
    if not isinstance(value, bool):
        raise _wrong_type(name, "a bool", value)
    return value


def _shape_text(shape) -> str:
    sizes = ["..." if s is Ellipsis else "any" if s is None else str(s) for s in shape]
    return "(" + ", ".join(sizes) + ("," if len(shape) == 1 else "") + ")"


def check_fields(name: str, obj, **expected) -> object:
    """``obj`` if each attribute named in ``expected`` has the value given (a module whose configuration must match:
    ``check_fields("module", rnn, num_layers=1, bidirectional=False)``); ``ValueError`` naming those that differ."""
    wrong = {key: getattr(obj, key, None) for key, want in expected.items() if getattr(obj, key, None) != want}
    if wrong:
        want = ", ".join(f"{key}={expected[key]!r}" for key in wrong)
        raise ValueError(f"{name} must have {want}, got {', '.join(f'{k}={v!r}' for k, v in wrong.items())}")
    return obj


def check_choice(name: str, value, choices, note: str = "") -> object:
    """``value`` if it is one of ``choices`` (a string option such as a nonlinearity); ``ValueError`` otherwise,
    with ``note`` (what each choice means) in the message."""
    if value not in choices:
        raise ValueError(
            f"{name} must be one of {sorted(choices)}{f' ({note})' if note else ''}, got {_received(value)}"
        )
    return value


def check_equal(name: str, value, expected, note: str = "") -> object:
    """``value`` if it equals ``expected`` (a size that must match another: ``check_equal("k.shape[-1]", ...)``);
    ``ValueError`` saying both, and ``note`` (why they must match) otherwise."""
    if value != expected:
        raise ValueError(f"{name} must be {_received(expected)}{f' ({note})' if note else ''}, got {_received(value)}")
    return value


def check_empty(name: str, items, note: str = "") -> None:
    """Nothing left in ``items`` (a loader's unplaced keys): ``ValueError`` naming how many and the first three."""
    if len(items):
        first = sorted(items)[:3]
        raise ValueError(f"{name} must be empty{f' ({note})' if note else ''}, got {len(items)}, e.g. {first}")


def check_tensor(
    name: str,
    value,
    shape: tuple | None = None,
    finite: bool = False,
    dtype=None,
    floating: bool = False,
    allow_neg_inf: bool = False,
    note: str = "",
    optional: bool | str = False,
    integer: bool = False,
    min: float | None = None,
    device=None,
    broadcasts_to: tuple | None = None,
) -> torch.Tensor | None:
    """``value`` checked to be a ``torch.Tensor`` and returned as it is.

    ``shape``: the sizes it must have (``None`` entries match any size >= 1; a string such as ``"H"`` too, but the
    same size wherever it repeats: ``("H", "H")`` is square; a leading ``...`` matches any leading dimensions, as in
    ``(..., "T", "D")``); ``dtype``: one dtype or a tuple of them; ``floating``: a floating-point dtype;
    ``integer``: an integer dtype (not bool); ``min``: every value ``>= min`` (the message names the smallest);
    ``device``: on that device (another tensor's ``.device``); ``broadcasts_to``: a shape it broadcasts to
    (PyTorch's rules; a mask against the scores); ``finite``: no NaN or infinity (with
    ``allow_neg_inf``, ``-inf`` is accepted: a masked score). ``TypeError`` for a non-tensor, ``ValueError`` for the
    rest, naming the shape or dtype received and, for ``finite``, how many values are not finite and where the first
    is. ``note`` says in the shape message what the sizes are; ``optional`` as in ``check_int``.
    """
    if optional and value is None:
        return None
    if not isinstance(value, torch.Tensor):
        want = "a tensor" if shape is None else f"a tensor of shape {_shape_text(shape)}"
        raise TypeError(f"{name} must be {_expected(want, note, optional)}, got {type(value).__name__}")
    if shape is not None:
        named = {}  # a named size ("H") matches any size >= 1, the same one wherever the name repeats
        sizes = shape[1:] if shape[:1] == (...,) else shape  # (..., T, D): the trailing sizes, any leading ones
        ok = (value.dim() >= len(sizes) if sizes is not shape else value.dim() == len(sizes)) and all(
            v == s if isinstance(s, int) else v >= 1 and (s is None or named.setdefault(s, v) == v)
            for v, s in zip(value.shape[value.dim() - len(sizes) :], sizes)
        )
        if not ok:
            want = _expected(f"a tensor of shape {_shape_text(shape)}", note, False)
            raise ValueError(f"{name} must be {want}, got {tuple(value.shape)}")
    if broadcasts_to is not None and broadcast_shape(value.shape, broadcasts_to) != tuple(broadcasts_to):
        want = _expected(f"a tensor that broadcasts to {_shape_text(broadcasts_to)}", note, False)
        raise ValueError(f"{name} must be {want}, got {tuple(value.shape)}")
    dtypes = (dtype,) if isinstance(dtype, torch.dtype) else dtype
    if dtypes is not None and value.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise ValueError(f"{name} must be a {want} tensor, got {value.dtype}")
    if floating and not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {value.dtype}")
    if device is not None and value.device != torch.device(device):
        raise ValueError(f"{name} must be on {device}, got {value.device}")
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise ValueError(f"{name} must be an integer tensor (int64, int32, ...), got {value.dtype}")
    if min is not None and value.numel() and not value.is_meta and value.min() < min:
        raise ValueError(f"{name} must hold values >= {min}, got {value.min().item()}")
    if finite and (value.is_floating_point() or value.is_complex()) and not value.is_meta:  # meta: shapes only
        bad = (value.isnan() | (value == math.inf)) if allow_neg_inf else ~torch.isfinite(value)
        if bad.any():
            first = tuple(int(i) for i in bad.nonzero()[0])
            allowed = "no NaN or +inf; -inf masks" if allow_neg_inf else "no NaN or inf"
            raise ValueError(
                f"{name} must be finite ({allowed}), got {int(bad.sum())} non-finite value(s), "
                f"the first {value[first].item()} at index {first}"
            )
    return value


def check_ids(
    name: str,
    value,
    vocab_size: int | None,
    shape: tuple | None = None,
    ignore_index: int | None = None,
    optional=False,
    dtype=None,
) -> torch.Tensor | None:
    """Token ids (or targets): an integer tensor (not bool) of ``shape`` whose values are in ``[0, vocab_size)``
    or equal ``ignore_index`` (a target the loss skips, e.g. -100); ``vocab_size=None``: any id >= 0 (the vocabulary
    is not known here); ``dtype``: the integer dtypes allowed (``nn.Embedding`` reads int64 and int32 only). The
    message names the first id out of range."""
    if check_tensor(name, value, shape=shape, optional=optional, integer=True) is None:
        return None
    check_tensor(name, value, dtype=dtype)
    bad = (value < 0) if vocab_size is None else (value < 0) | (value >= vocab_size)
    if ignore_index is not None:
        bad &= value != ignore_index
    if bad.any():
        ignored = "" if ignore_index is None else f" or {ignore_index} (ignored)"
        ids = "ids >= 0" if vocab_size is None else f"ids in [0, {vocab_size})"
        raise ValueError(f"{name} must hold {ids}{ignored}, got {int(value[bad][0])}")
    return value


def check_dtype(name: str, value, floating: bool = False) -> torch.dtype:
    """A ``torch.dtype``, and a floating-point one with ``floating`` (``ValueError`` for ``torch.long`` then)."""
    want = "a floating-point torch.dtype" if floating else "a torch.dtype"
    if not isinstance(value, torch.dtype):
        raise _wrong_type(name, want, value)
    if floating and not value.is_floating_point:
        raise ValueError(f"{name} must be {want}, got {value}")
    return value


def check_sequence(
    name: str,
    value,
    min_len: int = 0,
    length: int | None = None,
    note: str = "",
    items=None,
    unique: bool = False,
) -> list | tuple:
    """A list or tuple of at least ``min_len`` items, or exactly ``length``; ``note`` says what they are.

    ``items``: what each item must be, a type (or tuple of types: ``TypeError`` naming ``name[i]``) or a check
    called as ``items(f"{name}[{i}]", item)`` (``functools.partial(check_int, min=0, max=7)``); ``unique``: no
    item twice."""
    if not isinstance(value, (list, tuple)):
        raise _wrong_type(name, "a list or tuple", value)
    want = f"exactly {length}" if length is not None else f"at least {min_len}"
    if len(value) < min_len or length is not None and len(value) != length:
        raise ValueError(f"{name} must hold {want} item(s){f' ({note})' if note else ''}, got {len(value)}")
    for i, item in enumerate(value if items is not None else ()):
        if isinstance(items, (type, tuple)):
            check_type(f"{name}[{i}]", item, items)
        else:
            items(f"{name}[{i}]", item)
    if unique and len(set(value)) != len(value):
        raise ValueError(f"{name} must not repeat an item, got {_received(value)}")
    return value


def check_type(name: str, value, types=(), methods=(), expected: str = "", optional: bool | str = False):
    """``value`` if it is an instance of ``types`` (a type or a tuple) or has every one of ``methods`` as a callable
    attribute (a protocol: ``methods=("get_seq_length", "update")`` for a KV cache, ``("__call__",)`` for a
    callable); ``TypeError`` otherwise, saying ``expected`` (default: the types' and methods' names)."""
    if optional and value is None:
        return None
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, types) or (methods and all(callable(getattr(value, m, None)) for m in methods)):
        return value
    want = expected or " or ".join(
        [f"a {t.__name__}" for t in types] + ([f"an object with {', '.join(methods)}"] if methods else [])
    )
    raise _wrong_type(name, _expected(want, "", optional), value)


def broadcast_shape(*shapes) -> tuple[int, ...] | None:
    """The shape ``shapes`` broadcast to under PyTorch's (NumPy's) rules, or ``None`` where they do not broadcast.

    Trailing dimensions are aligned; two sizes agree when they are equal or one of them is 1 (a 1 against a 0
    gives 0). The same answer as ``torch.broadcast_shapes``, which raises instead of returning None, written out
    because that one costs about 0.1 ms a call on a CPU (it handles symbolic shapes): more than an attention
    kernel's decoding step, and the attention functions check their shapes on every call.
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, start=ndim - len(shape)):
            if size == 1:
                continue
            if out[i] == 1:
                out[i] = size
            elif out[i] != size:
                return None
    return tuple(out)
