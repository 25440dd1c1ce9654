"""The one exercise-check helper (``exercises.checking.check_against``) and its one behaviour in every chapter.

The helper is tested on small hand-made functions whose right answers are closed-form; then every ``check_*`` of
every chapter is given the same broken reader functions (one that raises, a stub, one returning a str) and must
treat them the same way. (A predict-then-run exercise takes the reader's prediction, not a function: its
check is named ``explain_*_prediction``.) Finally the exercise modules import no private name from another module.
"""

import ast
import importlib
import inspect
import pathlib

import pytest
import torch

import transformer_lib.exercises as exercises
from transformer_lib.exercises.checking import ExerciseResult, check_against, random_int

CHAPTERS = sorted(
    p.stem for p in pathlib.Path(exercises.__file__).parent.glob("*.py") if p.stem not in {"__init__", "checking"}
)
CHECKS = [
    (ch, name, fn)
    for ch in CHAPTERS
    for name, fn in inspect.getmembers(importlib.import_module(f"transformer_lib.exercises.{ch}"), inspect.isfunction)
    if name.startswith("check_") and fn.__module__.endswith(ch)
]


def square_inputs(gen):
    return (torch.randn(random_int(gen, 1, 4), 3, generator=gen),)


def square(x):
    return x * x


# ----------------------------------------------------------------------------- the helper, case by case
def test_a_right_answer_passes_and_says_on_how_many_cases():
    result = check_against(lambda x: x**2, square, square_inputs, trials=4)
    assert (
        result.passed
        and bool(result)
        and repr(result) == "Correct. Your function matches the library on 4 random cases."
    )  # a sentence: capitalised
    assert result._repr_markdown_().startswith("**Correct.**")


def test_a_reader_that_raises_is_reported_with_its_exception_and_inputs():
    def broken(x):
        raise KeyError("boom")

    result = check_against(broken, square, square_inputs)
    assert not result
    assert result.message.startswith("your function raised KeyError: 'boom' (inputs: (")
    assert "float32" in result.message and result._repr_markdown_().startswith("**Not yet.**")


def test_a_stub_is_not_written_yet_with_or_without_a_message():
    def stub(x):
        raise NotImplementedError

    def stub_with_words(x):
        raise NotImplementedError("your code here")

    assert (
        check_against(stub, square, square_inputs).message
        == "your function is not written yet (it raised NotImplementedError)."
    )
    assert (
        check_against(stub_with_words, square, square_inputs).message
        == "your function is not written yet (it raised NotImplementedError: your code here)."
    )


def test_no_hint_is_searched_when_the_reader_raises():
    calls = []

    def variant(x):
        calls.append(1)
        return x

    result = check_against(lambda x: 1 / 0, square, square_inputs, hints={"never shown": variant})
    assert "ZeroDivisionError" in result.message and "Hint" not in result.message and calls == []


@pytest.mark.parametrize(
    "reader, expected",
    [
        (lambda x: (x * x).tolist(), "returned a list, expected a torch.Tensor"),
        (lambda x: (x * x)[:, :2], "returned shape"),
        (lambda x: (x * x).double(), "returned dtype float64, expected float32"),
        (lambda x: (x * x).to(torch.float16), "returned dtype float16, expected float32"),
        (lambda x: torch.full_like(x, float("nan")), "returned nan at index (0, 0) where the expected value is"),
        (lambda x: torch.full_like(x, float("inf")), "returned inf at index (0, 0)"),
        (lambda x: x * x + 0.01, "largest difference 0.01"),
    ],
)
def test_each_kind_of_wrong_output_is_named(reader, expected):
    result = check_against(reader, square, square_inputs)
    assert not result and expected in result.message, result.message
    assert result.message.startswith("On random case 1 (inputs: (")


def test_the_largest_difference_is_located_with_both_values():
    want = torch.arange(6.0).view(2, 3)
    got = want.clone()
    got[1, 2] = 7.5
    result = check_against(lambda x: got, lambda x: want, lambda gen: (torch.zeros(1),), trials=1)
    assert "largest difference 2.5 at index (1, 2): got 7.5, expected 5." in result.message, result.message


def test_tolerances_are_the_allclose_ones():
    off = lambda x: x * x + 1e-3  # noqa: E731
    assert not check_against(off, square, square_inputs)
    assert check_against(off, square, square_inputs, atol=2e-3)


def test_bool_and_integer_answers_must_be_equal_and_of_the_same_dtype():
    def make(gen):
        return (torch.randint(0, 5, (4,), generator=gen),)

    assert check_against(lambda x: x > 2, lambda x: x > 2, make, atol=0, rtol=0)
    assert "dtype int64, expected bool" in check_against(lambda x: (x > 2).long(), lambda x: x > 2, make).message
    assert "largest difference 1" in check_against(lambda x: x + 1, lambda x: x, make, atol=0, rtol=0).message


def test_a_number_is_compared_with_a_number():
    def make(gen):
        return (random_int(gen, 1, 100),)

    assert check_against(lambda n: 2 * n, lambda n: 2 * n, make, atol=0, rtol=0)
    assert check_against(lambda n: torch.tensor(2 * n), lambda n: 2 * n, make, atol=0, rtol=0)  # 1-element tensor
    assert "returned a str, expected a number" in check_against(lambda n: "two", lambda n: 2 * n, make).message
    assert "largest difference 1" in check_against(lambda n: 2 * n + 1, lambda n: 2 * n, make, atol=0).message


def test_the_reader_works_on_copies_and_cannot_change_the_references_answer():
    def doubles_in_place(x):
        return x.mul_(2)

    result = check_against(doubles_in_place, lambda x: x.view(-1, 3), square_inputs)  # the answer is a view of x
    assert not result and "largest difference" in result.message, result.message


def test_the_first_matching_hint_is_appended_and_failing_variants_are_skipped():
    def crashes(x):
        raise RuntimeError("a variant that cannot run is no hint")

    hints = {"crash": crashes, "you returned x": lambda x: x, "also x (never reached)": lambda x: x.clone()}
    result = check_against(lambda x: x, square, square_inputs, hints=hints)
    assert not result and result.message.endswith(" Hint: you returned x")


def test_no_hint_when_no_variant_agrees():
    result = check_against(lambda x: x + 1, square, square_inputs, hints={"you returned x": lambda x: x})
    assert not result and "Hint" not in result.message


def test_a_nan_answer_can_match_a_nan_variant():
    nan_variant = lambda x: torch.where(x > 0, x * x, torch.nan)  # noqa: E731
    result = check_against(nan_variant, square, square_inputs, hints={"NaN for x <= 0": nan_variant})
    assert "returned nan" in result.message and result.message.endswith("Hint: NaN for x <= 0")


def test_hints_are_tried_on_hint_inputs():
    def big(gen):
        return (torch.randn(2, 3, generator=gen) + 100,)

    # right on small inputs, wrong on big ones: the hint is found only on small inputs
    reader = lambda x: torch.where(x.abs() < 50, x * x, 0.0)  # noqa: E731
    hints = {"right on small inputs": square}
    assert "Hint" not in check_against(reader, square, big, hints=hints).message
    assert "right on small inputs" in check_against(reader, square, big, hints=hints, hint_inputs=square_inputs).message


def test_a_check_is_deterministic():
    reader = lambda x: x * x * 1.0001  # noqa: E731
    assert check_against(reader, square, square_inputs).message == check_against(reader, square, square_inputs).message


def test_a_broken_reference_is_a_bug_of_the_check_and_raises():
    with pytest.raises(ZeroDivisionError):
        check_against(square, lambda x: 1 / 0, square_inputs)


def test_random_int_covers_both_ends_and_nothing_else():
    gen = torch.Generator().manual_seed(0)
    assert {random_int(gen, 2, 4) for _ in range(200)} == {2, 3, 4}


def test_the_package_exports_the_helper():
    assert exercises.check_against is check_against and exercises.ExerciseResult is ExerciseResult
    assert exercises.random_int is random_int


# ----------------------------------------------------------------------------- the same treatment in every chapter
def test_every_chapter_has_its_checks():
    assert {ch for ch, _, _ in CHECKS} == set(CHAPTERS) and len(CHECKS) == 33


@pytest.mark.parametrize("chapter, name, check", CHECKS, ids=[f"{c}.{n}" for c, n, _ in CHECKS])
def test_a_reader_that_raises_gets_the_same_treatment_in_every_chapter(chapter, name, check):
    def raises(*args):
        raise ValueError("my bug")

    result = check(raises)
    assert isinstance(result, ExerciseResult) and not result
    assert "your function raised ValueError: my bug (inputs: " in result.message, result.message
    assert "Hint" not in result.message


@pytest.mark.parametrize("chapter, name, check", CHECKS, ids=[f"{c}.{n}" for c, n, _ in CHECKS])
def test_a_stub_gets_the_same_treatment_in_every_chapter(chapter, name, check):
    def stub(*args):
        raise NotImplementedError

    result = check(stub)
    assert not result and "your function is not written yet (it raised NotImplementedError)." in result.message


@pytest.mark.parametrize("chapter, name, check", CHECKS, ids=[f"{c}.{n}" for c, n, _ in CHECKS])
def test_a_str_answer_gets_the_same_treatment_in_every_chapter(chapter, name, check):
    result = check(lambda *args: "an answer")
    assert not result and "your function returned a str, expected a" in result.message, result.message


# ----------------------------------------------------------------------------- no private names across modules
def test_exercise_modules_import_no_private_name():
    folder = pathlib.Path(exercises.__file__).parent
    private = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private += [
                    f"{path.name}: from {'.' * node.level}{node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if isinstance(node.value, ast.Name) and node.value.id in CHAPTERS:
                    private.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert private == []


def test_the_explanation_reads_as_its_own_sentence_and_code_names_keep_their_case():
    from transformer_lib.exercises.checking import ExerciseResult

    assert repr(ExerciseResult(False, "your function returned NaN.")) == "Not yet. Your function returned NaN."
    assert repr(ExerciseResult(False, "q.k adds d_k products.")) == "Not yet. q.k adds d_k products."
    assert repr(ExerciseResult(True, "x must be 2.")) == "Correct. x must be 2."
