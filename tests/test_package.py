"""The package's public surface: lazy names complete in Jupyter and type checkers see them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ovkit

INIT = Path(ovkit.__file__)


def test_dir_is_the_public_names_and_the_headline_classes_are_there() -> None:
    """``dir(ovkit)`` is ``__all__``: no stray imports (``os``, ``Any``), no submodules beside the
    classes; the model runner and the error base at the top level."""
    assert dir(ovkit) == sorted(ovkit.__all__)
    assert {"Graph", "get_engine", "Model", "OvkitError", "SimulatedCore"} <= set(dir(ovkit))
    assert not {"os", "Any", "TYPE_CHECKING", "importlib", "engine", "graph", "widgets"} & set(dir(ovkit))


def test_every_public_name_resolves() -> None:
    for name in ovkit.__all__:
        assert getattr(ovkit, name) is not None, name
    assert ovkit.Graph is __import__("ovkit.graph", fromlist=["Graph"]).Graph
    assert ovkit.Model is __import__("ovkit.model", fromlist=["Model"]).Model


def test_type_checkers_see_every_lazy_name() -> None:
    """Each lazy name is imported under ``if TYPE_CHECKING:`` (what mypy and editors read)."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        n
        for n in tree.body
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    )
    seen = {a.asname or a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert set(ovkit._LAZY) - seen == set()


def test_importing_ovkit_loads_neither_the_engine_nor_openvino_graph_code() -> None:
    """Lazy means lazy: ``import ovkit`` stays light (``ovkit list-devices`` starts fast)."""
    code = (
        "import sys, ovkit; print(sorted(m for m in ('ovkit.engine', 'ovkit.graph', 'ovkit.model', "
        "'ovkit.ops.translate') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=INIT.parents[1]
    )
    assert out.stdout.strip() == "[]"


def test_the_package_ships_its_typing_marker() -> None:
    assert (INIT.parent / "py.typed").is_file()


@pytest.mark.slow
def test_an_install_without_the_repository_runs_the_test_backend_ops_catalogue(tmp_path: Path) -> None:
    """What a wheel holds (the package's modules and pyproject.toml's package-data), alone in a
    directory: ``ovkit test-ops --catalogue test-backend-ops`` reads the shipped case list from
    the package (it was read from the repository's tests/data)."""
    import shutil
    import tomllib

    root = INIT.parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    package_data = config["tool"]["setuptools"]["package-data"]
    files = list(INIT.parent.rglob("*.py"))
    for package, globs in package_data.items():
        for pattern in globs:
            files += (root / package.replace(".", "/")).glob(pattern)
    for f in files:
        dest = tmp_path / f.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    cmd = [sys.executable, "-m", "ovkit", "test-ops", "--catalogue", "test-backend-ops", "-o", "ABS",
           "--no-progress", "--workers", "1"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env={**env, "PYTHONPATH": str(tmp_path)},
                         timeout=600)  # fmt: skip
    assert "test-backend-ops catalogue, 6 cases" in out.stdout, out.stderr[-2000:]
    which = subprocess.run([sys.executable, "-c", "import ovkit; print(ovkit.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, env={**env, "PYTHONPATH": str(tmp_path)}, check=True)  # fmt: skip
    assert Path(which.stdout.strip()).is_relative_to(tmp_path)  # the copy ran, not the checkout
    assert "ABS(type=f32,ne_a=[5,7,11,13],v=1)" in out.stdout
