"""Figures and widgets for the book's chapters."""

from .plots import plot_attention, plot_positional_encoding
from .source import show_source
from .widgets import figure_to_png, frame_slider, frame_tabs, live_view

__all__ = [
    "plot_attention",
    "plot_positional_encoding",
    "show_source",
    "figure_to_png",
    "frame_slider",
    "frame_tabs",
    "live_view",
]
