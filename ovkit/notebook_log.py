"""ovkit's log lines in a notebook (opt in with :func:`install`): routine lines as quiet info, the
fallback warning and hints standing out, each a display output with inline-styled ``text/html``
(nbconvert keeps the look) and ``text/plain``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ovkit.escape import html_attr

LOGGER = "ovkit"


@dataclass(frozen=True, slots=True)
class Severity:
    """How one kind of log line looks: a plain-text prefix and an inline style."""

    prefix: str
    style: str
    mark: str = ""


QUIET = "color: var(--jp-ui-font-color2, #616161); font-size: var(--jp-ui-font-size0, 11px);"
BOX = (
    "border-left: 3px solid {c}; background: {bg}; padding: 2px 8px; margin: 2px 0;"
    " color: var(--jp-ui-font-color1, #1f1f1f); font-size: var(--jp-ui-font-size1, 13px);"
)
SEVERITIES: dict[str, Severity] = {
    "info": Severity("", QUIET + " font-family: var(--jp-code-font-family, monospace);"),
    "hint": Severity(
        "hint: ", BOX.format(c="var(--jp-info-color1, #0288d1)", bg="var(--jp-info-color3, #e1f5fe)")
    ),  # no mark: the line starts with "hint:" (and emoji fonts are often missing)
    "warning": Severity(
        "warning: ",
        BOX.format(c="var(--jp-warn-color1, #f57c00)", bg="var(--jp-warn-color3, #fff3e0)"),
        "⚠ ",
    ),
    "error": Severity(
        "error: ", BOX.format(c="var(--jp-error-color1, #d32f2f)", bg="var(--jp-error-color3, #ffebee)"), "✖ "
    ),
}


def severity_of(record: logging.LogRecord) -> str:
    """``info``, ``hint`` (an info line starting with ``hint:``), ``warning`` or ``error``."""
    if record.levelno >= logging.ERROR:
        return "error"
    if record.levelno >= logging.WARNING:
        return "warning"
    return "hint" if record.getMessage().startswith("hint:") else "info"


def render(record: logging.LogRecord) -> dict[str, str]:
    """The mime bundle of one record: its text, and its line styled by severity as escaped HTML."""
    kind, message = severity_of(record), record.getMessage()
    sev = SEVERITIES[kind]
    text = message if sev.prefix and message.startswith(sev.prefix) else sev.prefix + message
    html = f'<div class="ovkit-log ovkit-log-{kind}" style="{sev.style}">{sev.mark}{html_attr(message)}</div>'
    return {"text/plain": text, "text/html": html}


class NotebookLogHandler(logging.Handler):
    """Displays each record as a styled output of the running cell."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from IPython.display import display

            display(render(record), raw=True)
        except Exception:
            self.handleError(record)


def install(logger: str = LOGGER) -> NotebookLogHandler:
    """Route ``logger``'s records to the notebook (replacing its stream handlers); idempotent."""
    log = logging.getLogger(logger)
    for h in list(log.handlers):
        if isinstance(h, NotebookLogHandler):
            return h
        if isinstance(h, logging.StreamHandler):
            log.removeHandler(h)
    handler = NotebookLogHandler()
    log.addHandler(handler)
    log.setLevel(min(log.level or logging.INFO, logging.INFO))
    log.propagate = False
    return handler
