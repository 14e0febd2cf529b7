"""Escaping for each context a runtime string can land in: HTML text, an HTML attribute, a CSS
string inside ``<style>``, JSON inside ``<script>``.

Device names, descriptions, property values and error messages come from OpenVINO plugins,
drivers and simulation profiles, so none of them is trusted markup: every one goes through the
function for the place it lands in.  This is the one place for that; it needs nothing else of
ovkit, so every layer (devices, engine, notebook, widgets) can use it.  The live views' browser
side is the fifth context: the anywidget payload carries raw text (the comm JSON-encodes it) and
the ES module writes it only through ``textContent`` and ``setAttribute``, never as markup.
"""

from __future__ import annotations

import html
import json
import string
from typing import Any

# Characters a CSS string keeps as they are; every other one becomes a hex escape.
_CSS_PLAIN = frozenset(string.ascii_letters + string.digits + " -_.,;:()%+=#!?@'/")

# Characters that could end or change a <script> element (or a JS string) if left in JSON as they are.
_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def html_text(value: Any) -> str:
    """``str(value)`` for element content (between tags, not in ``<style>`` or ``<script>``):
    ``& < >`` become entities, quotes stay as they are.  Not for attributes: use :func:`html_attr`."""
    return html.escape(str(value), quote=False)


def html_attr(value: Any) -> str:
    """``str(value)`` for a quoted attribute value (``title="…"``, ``data-device="…"``): ``& < > " '``
    become entities (also safe as element content).  Only for inert attributes: never an event
    handler, a URL or ``style``."""
    return html.escape(str(value), quote=True)


def css_string(value: Any) -> str:
    """The inside of a double-quoted CSS string (a tooltip's ``content: "…"`` in a ``<style>``
    block): every character but letters, digits, space and ``-_.,;:()%+=#!?@'/`` becomes a hex escape
    followed by a space (``<`` is ``\\3c ``; the space ends the escape and is not shown), so no
    quote, backslash, newline or ``</style>`` reaches the style sheet and the browser shows the
    original text."""
    return "".join(c if c in _CSS_PLAIN else f"\\{ord(c):x} " for c in str(value))


def script_json(value: Any) -> str:
    """``value`` as JSON to put inside a ``<script>`` element (a state blob, a JS literal): ``<``,
    ``>``, ``&``, U+2028 and U+2029 become ``\\u`` escapes, so no ``</script>`` or ``<!--`` can end
    or change the element, and the text reads back as the same value in JSON and in JS."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return "".join(_SCRIPT_ESCAPES.get(c, c) for c in text)
