"""Chat templates, untrusted Jinja from a model file, rendered sandboxed and within bounds.

Only Jinja2's ``ImmutableSandboxedEnvironment`` renders (an unsandboxed render let a GGUF run shell
commands: CVE-2024-34359), refusing a template that reads a Python internal.  The sandbox cannot stop
an endless loop or one huge allocation, so the render runs in a child process (:mod:`ovkit.child`,
the ``python -m ovkit.template`` side) under a time, memory and output bound; every failure is a
one-line :class:`TemplateError`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from ovkit.errors import OvkitError

#: The longest template rendered, in characters (real chat templates are tens of KiB).
MAX_TEMPLATE_CHARS = 1 << 20
#: The longest output, in characters (past what the largest contexts hold).
MAX_OUTPUT_CHARS = 1_000_000
#: Seconds a render may take once the child has started (real templates take milliseconds).
RENDER_TIMEOUT_S = 3.0
#: Memory the child may allocate beyond what its interpreter holds when it starts rendering.
MAX_MEMORY_BYTES = 512 << 20
#: Seconds the child may take to start (the interpreter and jinja2 loading; not the render).
START_TIMEOUT_S = 60.0

_READY = "ready"


class TemplateError(OvkitError, ValueError):
    """A template that cannot be rendered: invalid, refused, failing, or past a bound."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def render(template: str, variables: Mapping[str, Any]) -> str:
    """``template`` rendered with ``variables`` (JSON data) in the sandboxed child, within the bounds."""
    from ovkit import child

    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(
            f"the chat template is {len(template):,} characters, more than the bound of {MAX_TEMPLATE_CHARS:,}"
        )
    try:
        request = json.dumps({"template": template, "variables": variables, "max_chars": MAX_OUTPUT_CHARS})
    except (TypeError, ValueError) as exc:
        raise TemplateError(f"the messages are not JSON data ({_one_line(exc)})") from None
    with child.Child([sys.executable, "-m", "ovkit.template"]) as proc:
        try:
            proc.ask(_READY, START_TIMEOUT_S)
            reply = json.loads(proc.ask(request, RENDER_TIMEOUT_S))
        except child.ChildTimedOut:
            raise TemplateError(
                f"the chat template did not finish within {RENDER_TIMEOUT_S:g} s (the bound on rendering time)"
            ) from None
        except child.ChildCrashed as exc:
            raise TemplateError(f"the chat template's rendering process died ({_one_line(exc)})") from None
    if "error" in reply:
        raise TemplateError(reply["error"])
    return str(reply["text"])


# ----------------------------------------------------------------------------------- child side
def _sandbox() -> Any:
    """The immutable sandbox with HF transformers' settings (blocks trimmed, loop controls) and
    helpers; any unsafe attribute is an error, not an empty undefined."""
    from datetime import datetime

    import jinja2.ext
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            # the stock sandbox returns an undefined that only fails when used ({{ x.__class__ }}
            # renders ""); a template that reaches for internals at all is refused
            raise SecurityError(f"{attribute!r} of a {type(obj).__name__} object")

    def raise_exception(message: str) -> None:
        raise _Refused(message)

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, sort_keys=False: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys
    )
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env


class _Refused(OvkitError):
    """The template's own ``raise_exception`` (it refused the messages)."""


def _render_here(env: Any, request: Mapping[str, Any]) -> str:
    """The reply to one render request: ``{"text": ...}`` or ``{"error": one line}``."""
    import jinja2
    from jinja2.exceptions import SecurityError

    max_chars = int(request["max_chars"])
    try:
        parts, n = [], 0
        for chunk in env.from_string(request["template"]).generate(**request["variables"]):
            n += len(chunk)
            if n > max_chars:
                return json.dumps(
                    {"error": f"the chat template's output passed the bound of {max_chars:,} characters"}
                )
            parts.append(chunk)
        return json.dumps({"text": "".join(parts)})
    except SecurityError as exc:
        error = f"the chat template tried to access an unsafe attribute ({_one_line(exc)}); the sandbox refused it"
    except jinja2.TemplateSyntaxError as exc:
        error = f"the chat template is not valid Jinja (line {exc.lineno}: {_one_line(exc.message)})"
    except _Refused as exc:
        error = f"the chat template refused the messages: {_one_line(exc)}"
    except MemoryError:
        error = f"the chat template needed more than the bound of {MAX_MEMORY_BYTES >> 20} MiB of memory"
    except Exception as exc:  # a template is arbitrary code: any error it raises is the template's
        error = f"the chat template failed ({type(exc).__name__}: {_one_line(exc)[:300]})"
    return json.dumps({"error": error})


def _cap_memory() -> None:
    """Cap the address space at what the interpreter holds now plus :data:`MAX_MEMORY_BYTES`."""
    try:
        import os
        import resource

        with open("/proc/self/statm", encoding="ascii") as f:
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):  # not Linux: no cap (the time bound still holds)
        return
    limit = held + MAX_MEMORY_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> int:
    """The child: load jinja2, cap memory, then answer ``ready`` and render requests."""
    from ovkit.child import serve

    env = _sandbox()
    env.from_string("{{ x }}").render(x=1)  # the compiler loaded before the clock starts
    _cap_memory()

    def answer(line: str) -> str:
        return _READY if line.strip() == _READY else _render_here(env, json.loads(line))

    serve(answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
