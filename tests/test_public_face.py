"""ovkit's public face: importing it changes nothing in the process, and no module reads another's
private names."""

from __future__ import annotations

import ast
import io
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
    # llama-cpp-python's handle on the libggml it loaded: the same library, not a second copy
    "ovkit/model/compare/llama_side.py: from llama_cpp import _ggml",
    # a C++ function's mangled symbol (ov_singleton_core()), looked up in the backend's library
    "ovkit/model/compare/llama_side.py: backend._Z17ov_singleton_corev",
}


def test_no_module_reads_another_modules_private_names() -> None:
    found = {hit for path in sorted((ROOT / "ovkit").rglob("*.py")) for hit in _private_reach(path)}
    assert found == KNOWN_PRIVATE_REACH


def test_openvino_and_the_simulated_core_are_both_cores() -> None:
    """``ovkit.runtime.Core`` is what ovkit asks of a core; both kinds answer it, called the way
    ovkit calls them (positional device and config)."""
    import numpy as np
    import openvino as ov
    import openvino.opset16 as ops

    from ovkit.runtime import Core
    from ovkit.simulate import SimulatedCore

    x = ops.parameter([2], ov.Type.f32, name="x")
    model = ov.Model([ops.result(ops.multiply(x, x))], [x], "square")
    for core in (ov.Core(), SimulatedCore("laptop")):
        assert isinstance(core, Core)
        assert "CPU" in core.available_devices
        assert isinstance(core.get_property("CPU", "FULL_DEVICE_NAME"), str)
        compiled = core.compile_model(model, "CPU", {})
        blob = io.BytesIO()
        compiled.export_model(blob)
        again = core.import_model(blob.getvalue(), "CPU", {})
        assert again({"x": np.array([3.0, 4.0], np.float32)})[0].tolist() == [9.0, 16.0]
    assert not isinstance(object(), Core)


def _core_parameters(path: Path) -> list[tuple[str, str, bool, bool]]:
    """(where, annotation, keyword-only, sole parameter) of every parameter called ``core``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        positional = [a for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
        params = positional + node.args.kwonlyargs
        for arg in params:
            if arg.arg == "core":
                where = f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {node.name}"
                note = ast.unparse(arg.annotation) if arg.annotation else "none"
                found.append((where, note, arg in node.args.kwonlyargs, len(params) == 1))
    return found


def test_every_core_parameter_is_a_typed_keyword() -> None:
    """``core`` is an ``ovkit.runtime.Core`` (or None: the process-wide one) and passed as
    ``core=``, except where it is a function's only parameter (``get_engine(core)``)."""
    params = [p for path in sorted((ROOT / "ovkit").rglob("*.py")) for p in _core_parameters(path)]
    assert len(params) > 60
    assert [w for w, note, _, _ in params if note not in ("Core", "Core | None")] == []
    assert [w for w, _, keyword, sole in params if not (keyword or sole)] == []


def test_every_ovkit_exception_is_an_ovkit_error_and_keeps_its_kind() -> None:
    """``except ovkit.OvkitError`` catches whatever ovkit raises; ``except ValueError`` still
    catches bad input (each keeps its standard base)."""
    import importlib
    import inspect
    import pkgutil

    from ovkit.errors import OvkitError

    found = {}
    for info in pkgutil.walk_packages(ovkit.__path__, "ovkit."):
        if info.name == "ovkit.__main__":
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            own = inspect.isclass(value) and value.__module__ == info.name
            if own and issubclass(value, BaseException) and not issubclass(value, Warning):
                found[f"{info.name}.{name}"] = value
    assert len(found) >= 30
    assert [name for name, cls in found.items() if not issubclass(cls, OvkitError)] == []
    from ovkit.graph import GraphError
    from ovkit.oracle import GgmlUnavailableError
    from ovkit.runtime import RuntimeUnavailableError

    assert issubclass(GraphError, ValueError) and issubclass(GgmlUnavailableError, ImportError)
    assert issubclass(RuntimeUnavailableError, RuntimeError) and ovkit.OvkitError is OvkitError
