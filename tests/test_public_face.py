"""ovkit's public face: importing it changes nothing in the process, and no module reads another's
private names."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import ovkit
from ovkit import child

ROOT = Path(ovkit.__file__).parents[1]

# What `import ovkit, ovkit.gguf, ovkit.model` did to the process, as JSON.
IMPORT_PROBE = """
import json, logging, os, sys
before = dict(os.environ)
import ovkit, ovkit.gguf, ovkit.model
after = dict(os.environ)
print(json.dumps({
    "changed": sorted(k for k in {*before, *after} if before.get(k) != after.get(k)),
    "handlers": [type(h).__name__ for h in logging.getLogger("ovkit").handlers],
    "libggml": sorted({l.split()[-1] for l in open("/proc/self/maps") if "libggml" in l}),
    "modules": sorted(m for m in ("ggml", "ovkit.oracle") if m in sys.modules),
}))
"""


def test_importing_ovkit_changes_nothing_in_the_process() -> None:
    """No environment variable set, no log handler but a NullHandler, no libggml loaded (the
    oracle loads ggml-python on first use only)."""
    env = {k: v for k, v in os.environ.items() if k != child.NO_BACKTRACE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    seen = json.loads(out.stdout)
    assert seen == {"changed": [], "handlers": ["NullHandler"], "libggml": [], "modules": []}


def test_every_child_starts_with_ggmls_backtrace_off_unless_asked() -> None:
    """A child is started to die on a ggml abort, not to hang in ggml's backtrace helper."""
    code = ["-c", "import os; print(os.environ.get('GGML_NO_BACKTRACE'))"]
    env = {k: v for k, v in os.environ.items() if k != child.NO_BACKTRACE_ENV}
    assert child.run([sys.executable, *code], env=env).strip() == "1"
    assert child.run([sys.executable, *code], env={**env, "GGML_NO_BACKTRACE": "0"}).strip() == "0"


def test_the_oracle_loads_ggml_on_first_use_with_its_backtrace_off(tmp_path: Path) -> None:
    """ggml in this process (a stand-in module here): loaded by the first question, not by the
    import, and with GGML_NO_BACKTRACE set then (unless the user set it)."""
    (tmp_path / "ggml.py").write_text("")
    code = (
        "import os, sys; from ovkit import oracle; loaded = 'ggml' in sys.modules; "
        "print(loaded, oracle.ggml_available(), os.environ.get('GGML_NO_BACKTRACE'))"
    )
    env = {k: v for k, v in os.environ.items() if k != child.NO_BACKTRACE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["False", "True", "1"]


def _private(name: str) -> bool:
    """A private name: ``_x``, but neither a dunder nor a protocol name such as IPython's
    ``_repr_html_`` (leading and trailing underscore)."""
    return name.startswith("_") and not name.endswith("_")


def _private_reach(path: Path) -> list[str]:
    """Where the module at ``path`` reads a private name that is not its own: ``from m import _x``,
    ``obj._x`` and ``getattr(obj, "_x")`` (``self``/``cls`` and names the module defines itself
    excepted), as ``"ovkit/m.py: obj._x"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            own.add(node.attr)
    where = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"{where}: from {node.module} import {a.name}" for a in node.names if _private(a.name)]
            continue
        if isinstance(node, ast.Attribute):
            base, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            base, name = node.args[0], node.args[1].value
        else:
            continue
        if not _private(name) or name in own or (isinstance(base, ast.Name) and base.id in ("self", "cls")):
            continue
        found.append(f"{where}: {ast.unparse(base)}.{name}")
    return found


#: Private names of other packages that ovkit reads, each for a reason; nothing of ovkit's own.
KNOWN_PRIVATE_REACH = {
    # the engine's per-call snapshot of its variables (issue 34, item 4 removes it)
    "ovkit/engine/engine.py: os.environ._data",
    # llama-cpp-python's handle on the libggml it loaded: the same library, not a second copy
    "ovkit/model/compare.py: from llama_cpp import _ggml",
    # a C++ function's mangled symbol (ov_singleton_core()), looked up in the backend's library
    "ovkit/model/compare.py: backend._Z17ov_singleton_corev",
}


def test_no_module_reads_another_modules_private_names() -> None:
    found = {hit for path in sorted((ROOT / "ovkit").rglob("*.py")) for hit in _private_reach(path)}
    assert found == KNOWN_PRIVATE_REACH
