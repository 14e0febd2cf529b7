"""ovkit's log lines in a notebook: severity decides the look; stream handlers are replaced."""

from __future__ import annotations

import logging

import pytest

from ovkit import notebook_log


def _record(level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord("ovkit", level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(
    ("level", "msg", "kind", "plain"),
    [
        (logging.INFO, "OpenVINO: using device CPU", "info", "OpenVINO: using device CPU"),
        (logging.INFO, "hint: use 'GPU'", "hint", "hint: use 'GPU'"),
        (logging.WARNING, "device gpu is not available, fallback to CPU", "warning", "warning: device gpu"),
    ],
)
def test_each_severity_has_its_own_look(level: int, msg: str, kind: str, plain: str) -> None:
    bundle = notebook_log.render(_record(level, msg))
    assert bundle["text/plain"].startswith(plain)
    assert f'class="ovkit-log ovkit-log-{kind}"' in bundle["text/html"]
    assert notebook_log.SEVERITIES[kind].style in bundle["text/html"]


def test_messages_are_escaped() -> None:
    assert "&lt;b&gt;" in notebook_log.render(_record(logging.WARNING, "<b>x"))["text/html"]


def test_install_replaces_stream_handlers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging.getLogger("ovkit-test-notebook-log")
    monkeypatch.setattr(log, "handlers", [logging.StreamHandler()])
    first = notebook_log.install(log.name)
    assert notebook_log.install(log.name) is first
    assert log.handlers == [first] and not log.propagate and log.level == logging.INFO
    shown: list[dict[str, str]] = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw: shown.append(obj))
    log.warning("GGML OpenVINO Backend: device X is not available, fallback to CPU")
    assert shown[0]["text/plain"].startswith("warning: GGML OpenVINO Backend")
