"""show_source names the part of the library it shows by its text, so the part stays right when code above moves."""

import pytest

from transformer_lib.viz.source import show_source, source_part


def _example(x):
    """Docstring."""
    y = x + 1  # first step
    z = y * 2  # second step
    return z


def test_the_whole_source_without_a_part_and_a_named_part_from_start_to_before_stop():
    whole = source_part(_example)
    assert whole.startswith("def _example(x):") and whole.endswith("return z")
    assert source_part(_example, start="y = x + 1") == "y = x + 1  # first step\nz = y * 2  # second step\nreturn z"
    assert (
        source_part(_example, start="y = x + 1", stop="return") == "y = x + 1  # first step\nz = y * 2  # second step"
    )
    assert show_source(_example, start="z = y").data == "z = y * 2  # second step\nreturn z"


def test_text_that_is_not_in_the_source_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"start='w = 3' is on no line of _example's source"):
        source_part(_example, start="w = 3")
    with pytest.raises(ValueError, match=r"stop='y = x' is on no line of _example's source after start='z = y'"):
        source_part(_example, start="z = y", stop="y = x")  # stop must come after start


def test_the_chapters_parts_of_gptq_and_awq_are_still_there():
    from transformer_lib.quant import awq, gptq

    part = source_part(gptq.gptq_quantize, start="W = weight.detach()")
    assert part.startswith("W = weight.detach()") and "W[:, b1:] -= errs @ U[b0:b1, b1:]" in part
    part = source_part(awq.awq_scales, start="w, x = weight.detach()")
    assert part.endswith("return AWQScales(candidates[best], alphas[best].item(), alphas, torch.tensor(errors))")
