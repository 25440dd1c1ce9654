"""The parts of the book's Sphinx extension, one fix (or one family of fixes) a module; tools/book_fixes.py loads them
and its docstring lists which module holds which fix."""
