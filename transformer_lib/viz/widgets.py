"""Interactive figures that work with a kernel (Jupyter, Colab) *and* in the static online book.

Used in chapters 01, 03, 05, 06 and 08.

The static book has no Python to run a callback, so ``frame_slider`` renders every setting
beforehand (one PNG per value) into an ``ipywidgets.Stack`` and links the slider to the stack
in the browser (``jslink``): moving the slider switches frames with no kernel at all.
``live_view`` is the continuous version for a running kernel (any value, any sentence).
"""

from __future__ import annotations

import io
from typing import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt

HAS_STACK = hasattr(widgets, "Stack")  # ipywidgets >= 8

WIDE = {"description_width": "initial"}  # labels are never truncated


def figure_to_png(fig, dpi: int = 80) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _frame(render: Callable, value, dpi: int) -> widgets.Widget:
    out = render(value)
    fig, caption = out if isinstance(out, tuple) else (out, None)
    image = widgets.Image(value=figure_to_png(fig, dpi), format="png")
    return image if caption is None else widgets.VBox([image, widgets.HTML(caption)])


def frame_slider(
    render: Callable, values: Sequence, description: str, initial=None, dpi: int = 80, play: bool = False
) -> widgets.VBox:
    """A slider over ``values`` that shows ``render(value)``, precomputed for every value.

    ``render(value)`` returns a matplotlib figure, or ``(figure, caption_html)``.
    The slider's ``index`` is ``jslink``ed to the frames' ``Stack.selected_index``, so it works
    in the static book as well as in a kernel. ``play=True`` adds a Play button that animates it.
    With ipywidgets 7 (Colab preloads 7.7), which has no ``Stack``, the kernel swaps the frame instead.
    """
    values = list(values)
    if not values:
        raise ValueError("values must not be empty")
    start = values.index(initial) if initial is not None else 0
    frames = [_frame(render, v, dpi) for v in values]
    slider = widgets.SelectionSlider(
        options=[(str(v), i) for i, v in enumerate(values)],
        index=start,
        description=description,
        style=WIDE,
        layout=widgets.Layout(width="min(520px, 95%)"),
    )
    if HAS_STACK:  # ipywidgets 8: the browser switches frames, with or without a kernel
        stack = widgets.Stack(frames, selected_index=start)
        widgets.jslink((slider, "index"), (stack, "selected_index"))
    else:  # ipywidgets 7 (Colab's own): no Stack, so the kernel swaps the frame shown when the slider moves
        stack = widgets.Box([frames[start]])
        slider.observe(lambda change: setattr(stack, "children", (frames[change["new"]],)), names="index")
    controls = [slider]
    if play:
        player = widgets.Play(min=0, max=len(values) - 1, value=start, interval=700, description="play")
        widgets.jslink((player, "value"), (slider, "index"))
        controls.insert(0, player)
    return widgets.VBox([widgets.HBox(controls), stack])


def frame_tabs(render: Callable, values: Sequence, titles: Sequence[str] | None = None, dpi: int = 80) -> widgets.Tab:
    """One precomputed frame per tab (tabs switch in the browser, no kernel needed)."""
    values = list(values)
    tab = widgets.Tab([_frame(render, v, dpi) for v in values])
    for i, title in enumerate(titles or values):
        tab.set_title(i, str(title))  # ipywidgets 7 and 8 (8 also has the ``titles`` trait)
    return tab


def live_view(render: Callable, **controls) -> widgets.VBox:
    """Continuous version for a running kernel: ``render(**values)`` is called on every change.

    ``controls`` maps argument names to ipywidgets (or ``interactive`` abbreviations such as
    ``(0.1, 5.0, 0.1)``). In the static book this shows the first frame only: tag its cell
    ``remove-output`` and pair it with a ``frame_slider``.
    """

    def show(**kwargs):
        out = render(**kwargs)
        fig, caption = out if isinstance(out, tuple) else (out, None)
        plt.show(fig)
        if caption:
            from IPython.display import HTML, display

            display(HTML(caption))

    ui = widgets.interactive(show, **controls)
    for child in ui.children[:-1]:
        child.style = WIDE
    return ui
