"""The base of every exception ovkit raises: ``except ovkit.OvkitError`` catches all of them.

Each ovkit exception also keeps the standard base that says what kind of failure it is
(``ValueError`` for bad input, ``RuntimeError`` for a failed run, ``ImportError`` for a missing
part), so ``except ValueError`` keeps working.  This module is the floor: it imports nothing.
"""

from __future__ import annotations


class OvkitError(Exception):
    """An error raised by ovkit (see the module docstring)."""
