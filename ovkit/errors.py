"""The base of every exception ovkit raises; each also keeps its standard base (``ValueError``
for bad input, ``RuntimeError`` for a failed run), so ``except ValueError`` keeps working."""

from __future__ import annotations


class OvkitError(Exception):
    """An error raised by ovkit (see the module docstring)."""
