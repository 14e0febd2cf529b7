"""The package's public surface: lazy names complete in Jupyter and type checkers see them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ovkit

INIT = Path(ovkit.__file__)


def test_dir_lists_graph_and_every_public_lazy_name() -> None:
    names = dir(ovkit)
    assert "Graph" in names and "get_engine" in names
    assert set(ovkit.__all__) <= set(names)
    assert set(ovkit._LAZY) <= set(names)


def test_every_public_name_resolves() -> None:
    for name in ovkit.__all__:
        assert getattr(ovkit, name) is not None, name
    assert ovkit.Graph is __import__("ovkit.graph", fromlist=["Graph"]).Graph


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
    code = "import sys, ovkit; print(sorted(m for m in ('ovkit.engine', 'ovkit.graph', 'ovkit.ops.translate') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=INIT.parents[1]
    )
    assert out.stdout.strip() == "[]"


def test_the_package_ships_its_typing_marker() -> None:
    assert (INIT.parent / "py.typed").is_file()
