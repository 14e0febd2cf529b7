"""Escaping for each context a runtime string can land in: HTML text, an HTML attribute, a CSS
string inside ``<style>``.  Device names, descriptions and errors come from plugins, drivers and
profiles, so none is trusted markup (the live views' ES module writes text only through
``textContent`` and ``setAttribute``)."""

from __future__ import annotations

import html
import string
from typing import Any

# Characters a CSS string keeps as they are; every other one becomes a hex escape.
_CSS_PLAIN = frozenset(string.ascii_letters + string.digits + " -_.,;:()%+=#!?@'/")


def html_text(value: Any) -> str:
    """``str(value)`` for element content (``& < >`` escaped); not for attributes: :func:`html_attr`."""
    return html.escape(str(value), quote=False)


def html_attr(value: Any) -> str:
    """``str(value)`` for a quoted inert attribute value (``title="…"``; never an event handler, a
    URL or ``style``): ``& < > " '`` escaped, so also safe as element content."""
    return html.escape(str(value), quote=True)


def css_string(value: Any) -> str:
    """The inside of a double-quoted CSS string (a tooltip's ``content: "…"``): every character
    but :data:`_CSS_PLAIN` becomes a hex escape, so no quote, newline or ``</style>`` gets through."""
    return "".join(c if c in _CSS_PLAIN else f"\\{ord(c):x} " for c in str(value))
