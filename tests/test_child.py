"""A child process that dies says how: the signal's name and, for SIGILL, which instruction set of
which native build it most likely was and how to rebuild (ovkit.child and its four callers)."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from ovkit import child, native

#: A host like the Xeons whose AMX faults: AMX and AVX-512 listed.
AMX_HOST = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8"})
AVX2_HOST = frozenset({"avx2", "fma", "sse4_2"})

#: Python code that answers the first request, then dies of SIGILL on the second.
ANSWER_THEN_SIGILL = (
    "import os, signal, sys\n"
    "from ovkit.child import serve\n"
    "n = []\n"
    "def answer(line):\n"
    "    n.append(line)\n"
    "    print('native noise on stdout')\n"
    "    if len(n) == 2:\n"
    "        sys.stderr.write('about to execute tilezero\\n'); sys.stderr.flush()\n"
    "        os.kill(os.getpid(), signal.SIGILL)\n"
    "    return line.strip().upper()\n"
    "serve(answer)\n"
)


def _stamp(name: str, cflags: str, host: frozenset[str]) -> native.BuildStamp:
    isa = tuple(sorted(f for f in host if f in native.ISA_FAMILIES or f == "avx2"))
    return native.BuildStamp(name, "1.0", cflags, "x86_64", isa)


@pytest.fixture
def amx_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This process sees an AMX host whose native builds were all made here without -mno-amx-*
    (a pip build with plain -march=native)."""
    monkeypatch.setattr(native, "cpu_flags", lambda: AMX_HOST)
    monkeypatch.setattr(native, "build_stamp_dir", lambda: tmp_path)
    for name in native.BUILD_NAMES:
        (tmp_path / f"{name}.json").write_text(json.dumps(asdict(_stamp(name, "", AMX_HOST))))
    return tmp_path


def _crasher(tmp_path: Path, when: str, sig: str = "ILL") -> str:
    """A ``python`` that kills itself with ``sig`` when its arguments match ``when`` (a shell
    pattern) and runs the real interpreter otherwise."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\ncase "$*" in {when}) kill -{sig} $$;; esac\nexec {sys.executable} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


# ------------------------------------------------------------------------------ sigill_hint
def test_an_amx_host_with_a_build_that_kept_amx_names_amx() -> None:
    hint = native.sigill_hint(_stamp("llama-cpp-python-cpu", "", AMX_HOST), host_flags=AMX_HOST)
    assert "AMX" in hint and "llama-cpp-python-cpu" in hint
    assert "-mno-amx-tile" in hint and native.INSTALL_SCRIPT in hint  # how to rebuild


def test_an_amx_host_with_a_build_without_amx_does_not_blame_amx() -> None:
    stamp = _stamp("llama-cpp-python-cpu", native.NATIVE_CFLAGS, AMX_HOST)
    assert "AMX" not in native.sigill_hint(stamp, host_flags=AMX_HOST)


def test_an_avx512_build_on_an_avx2_host_names_avx512f() -> None:
    stamp = _stamp("ggml-python-openvino", native.NATIVE_CFLAGS, frozenset({"avx2", "avx512f"}))
    hint = native.sigill_hint(stamp, host_flags=AVX2_HOST)
    assert "avx512f" in hint and "ggml-python-openvino" in hint and "lacks" in hint
    assert native.INSTALL_SCRIPT in hint


def test_sigill_hint_for_reads_the_named_build(amx_machine: Path) -> None:
    assert "llama-cpp-python-openvino" in native.sigill_hint_for("llama-cpp-python-openvino")
    with pytest.raises(ValueError, match="unknown build name 'llama'"):
        native.sigill_hint_for("llama")


# ------------------------------------------------------------------------------ ovkit.child
def test_a_child_that_dies_of_sigill_names_it_with_the_hint() -> None:
    with child.Child([sys.executable, "-c", ANSWER_THEN_SIGILL], sigill_hint=lambda: "HINT: rebuild") as c:
        assert c.ask("first", 60) == "FIRST"  # stdout noise never reaches the reply
        with pytest.raises(child.ChildCrashed) as info:
            c.ask("second", 60)
    died = info.value.death
    assert child.signal_name(died.returncode) == "SIGILL" and died.hint == "HINT: rebuild"
    assert str(info.value) == "SIGILL, HINT: rebuild: about to execute tilezero"


def test_the_hint_is_asked_for_sigill_only() -> None:
    asked = []
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    with pytest.raises(child.ChildCrashed) as info:
        child.run([sys.executable, "-c", code], sigill_hint=lambda: asked.append(1) or "x")
    assert info.value.death.describe() == "SIGSEGV" and not asked


def test_run_reports_sigill_and_an_error_exit() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGILL)"
    with pytest.raises(child.ChildCrashed, match=r"^SIGILL, why$"):
        child.run([sys.executable, "-c", code], sigill_hint=lambda: "why")
    with pytest.raises(child.ChildCrashed, match=r"^exit code 3: oops$"):
        child.run([sys.executable, "-c", "import sys; print('oops', file=sys.stderr); sys.exit(3)"])
    assert child.run([sys.executable, "-c", "print('hi'); raise SystemExit(1)"], ok=(0, 1)) == "hi\n"


def test_a_child_that_hangs_is_killed_after_its_time() -> None:
    with child.Child([sys.executable, "-c", "import time; time.sleep(60)"]) as c:
        with pytest.raises(child.ChildTimedOut, match="no answer within 0.5 s"):
            c.ask("x", 0.5)
        assert not c.alive


def test_an_answer_after_the_deadline_is_a_timeout() -> None:
    """A reply that comes after the time given is a timeout, however soon after (the wait once
    polled in half-second steps and took a reply up to 0.5 s late)."""
    slow = "import time\nfrom ovkit.child import serve\nserve(lambda line: time.sleep(0.3) or 'late')\n"
    with child.Child([sys.executable, "-c", slow]) as c:
        with pytest.raises(child.ChildTimedOut, match="no answer within 0.1 s"):
            c.ask("x", 0.1)
        assert not c.alive


# ------------------------------------------------------------------------------ the callers
@pytest.mark.parametrize(
    ("upstream", "name"), [(False, "llama-cpp-python-cpu"), (True, "llama-cpp-python-openvino")]
)
def test_a_llama_cpp_reference_dying_of_sigill_says_amx_and_how_to_rebuild(
    amx_machine: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, upstream: bool, name: str
) -> None:
    from ovkit.model import reference

    monkeypatch.setattr(reference, "upstream_env", lambda: dict(__import__("os").environ))
    monkeypatch.setattr(sys, "executable", _crasher(tmp_path, "*ovkit.model.reference*"))
    with pytest.raises(reference.LlamaCppError) as info:
        reference.run_reference(tmp_path / "model.gguf", [1, 2], [3], upstream=upstream)
    text = str(info.value)
    assert text.startswith("llama.cpp subprocess failed (SIGILL, illegal instruction: most likely ggml's AMX")
    assert name in text and native.INSTALL_SCRIPT in text and "-mno-amx-tile" in text


def test_test_ops_isolate_names_sigill_and_ggml_pythons_build(
    amx_machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ovkit.catalogue import run
    from ovkit.cli import main

    crash = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGILL)"
    monkeypatch.setattr(run, "WORKER_COMMAND", (sys.executable, "-c", crash))  # test-ops' workers too
    code = main(["test-ops", "--isolate", "-o", "SQRT", "--no-progress", "--reference", "numpy"])
    out = capsys.readouterr().out
    assert code == 1
    line = next(x for x in out.splitlines() if "SQRT(type=f32,ne_a=[10,10,1,1])" in x)
    assert "FAIL the worker process crashed (SIGILL, illegal instruction: most likely ggml's AMX" in line
    assert "ggml-python-openvino" in line and native.INSTALL_SCRIPT in line


def test_a_catalogue_worker_dying_of_sigill_names_it(
    amx_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ovkit.catalogue import run

    crash = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGILL)"
    monkeypatch.setattr(run, "WORKER_COMMAND", (sys.executable, "-c", crash))
    df = run.run([run.Row("ADD", "type=f32,ne=[10,5,4,3],nr=[1,1,1,1],nf=1")], policy="none", isolate=True,
                 progress=False)  # fmt: skip
    detail = df["detail"][0]
    assert df["status"][0] == "FAIL"
    assert detail.startswith(
        "the worker process crashed (SIGILL, illegal instruction: most likely ggml's AMX"
    )
    assert "ggml-python-openvino" in detail


def test_the_real_backends_worker_dying_of_sigill_names_it(
    amx_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ovkit.upstream import isolate

    crash = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGILL)"
    monkeypatch.setattr(isolate, "require", lambda: None)  # no real backend needed to die
    monkeypatch.setattr(isolate, "WORKER_COMMAND", (sys.executable, "-c", crash))
    with isolate.Isolated() as worker:
        out = worker.call({"cmd": "info"})
    assert out.status == "CRASH" and worker.crashes == 1
    assert out.detail.startswith("SIGILL, illegal instruction: most likely ggml's AMX")
    assert "ggml-python-openvino" in out.detail
