"""Interactive figures that work with a kernel (Jupyter, Colab) *and* in the static online book.

Used in chapters 01, 03, 05, 06 and 08.

The static book has no Python to run a callback, so ``frame_slider`` renders every setting
beforehand (one PNG per value) into an ``ipywidgets.Stack`` and links the slider to the stack
in the browser (``jslink``): moving the slider switches frames with no kernel at all.
``live_view`` is the continuous version for a running kernel (any value, any sentence).
"""

from __future__ import annotations

import base64
import html
import io
from typing import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt

from ..utils.checks import check_int

HAS_STACK = hasattr(widgets, "Stack")  # ipywidgets >= 8

WIDE = {"description_width": "initial"}  # labels are never truncated


def figure_to_png(fig, dpi: int = 80) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _frame(render: Callable, value, dpi: int) -> tuple[bytes, str | None]:
    """``render(value)`` as PNG bytes, with its caption (HTML) or None."""
    out = render(value)
    fig, caption = out if isinstance(out, tuple) else (out, None)
    return figure_to_png(fig, dpi), caption


def _frame_widget(png: bytes, caption: str | None) -> widgets.Widget:
    image = widgets.Image(value=png, format="png")
    return image if caption is None else widgets.VBox([image, widgets.HTML(caption)])


def _picture_html(png: bytes, caption: str | None, alt: str) -> str:
    """One frame as an inline ``<figure>``, for a page read without JavaScript (``<noscript>``)."""
    img = f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" alt="{html.escape(alt)}">'
    return f"<noscript><figure>{img}{f'<figcaption>{caption}</figcaption>' if caption else ''}</figure></noscript>"


class FramesView(widgets.VBox):
    """A frame slider's or tabs' widget that, displayed, first writes its first frame as a plain picture inside
    ``<noscript>``: a page read without JavaScript (where no widget can render) shows that frame instead of nothing,
    and a page with JavaScript shows only the widget."""

    def __init__(self, children, picture_html: str):
        super().__init__(children)
        self.picture_html = picture_html

    def _ipython_display_(self):
        from IPython.display import display

        display({"text/html": self.picture_html, "text/plain": ""}, raw=True)
        if hasattr(widgets.VBox, "_repr_mimebundle_"):  # ipywidgets 8
            display(self._repr_mimebundle_(), raw=True)
        else:  # ipywidgets 7
            super()._ipython_display_()


def frame_slider(
    render: Callable, values: Sequence, description: str, initial=None, dpi: int = 80, play: bool = False
) -> widgets.VBox:
    """A slider over ``values`` that shows ``render(value)``, precomputed for every value (a ``FramesView``: the
    controls, then the frames; without JavaScript the page shows the first frame as a picture).

    ``render(value)`` returns a matplotlib figure, or ``(figure, caption_html)``.
    The slider's ``index`` is ``jslink``ed to the frames' ``Stack.selected_index``, so it works
    in the static book as well as in a kernel. ``play=True`` adds a Play button that animates it.
    With ipywidgets 7 (Colab preloads 7.7), which has no ``Stack``, the kernel swaps the frame instead.
    """
    values = list(values)
    check_int("len(values)", len(values), min=1, note="one frame per value")
    start = values.index(initial) if initial is not None else 0
    rendered = [_frame(render, v, dpi) for v in values]
    frames = [_frame_widget(*r) for r in rendered]
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
    picture = _picture_html(*rendered[start], alt=f"{description} = {values[start]}")
    return FramesView([widgets.HBox(controls), stack], picture)


def frame_tabs(render: Callable, values: Sequence, titles: Sequence[str] | None = None, dpi: int = 80) -> widgets.VBox:
    """One precomputed frame per tab (tabs switch in the browser, no kernel needed), in a ``FramesView`` whose
    first child is the ``Tab``."""
    values = list(values)
    rendered = [_frame(render, v, dpi) for v in values]
    tab = widgets.Tab([_frame_widget(*r) for r in rendered])
    names = [str(t) for t in (titles or values)]
    for i, title in enumerate(names):
        tab.set_title(i, title)  # ipywidgets 7 and 8 (8 also has the ``titles`` trait)
    return FramesView([tab], _picture_html(*rendered[0], alt=names[0]))


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
