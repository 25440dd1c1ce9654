"""pytest on a notebook (``pytest notebooks/kv_cache.ipynb --nbval-lax``) is strict: a false claim fails it.

``transformer_lib.book_tools.claims`` reads ``BOOK_CLAIMS`` in the notebook's kernel, which inherits this process's
environment; without it, a run outside CI would be in report mode, where a false claim shows a box and the
notebook passes. ``make test`` sets the same explicitly; an explicit ``BOOK_CLAIMS`` wins.
"""

import os

os.environ.setdefault("BOOK_CLAIMS", "strict")
