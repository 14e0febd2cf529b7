"""ovkit's public face: importing it changes nothing in the process, and no module reads another's
private names."""

from __future__ import annotations

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
