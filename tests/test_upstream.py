"""The real llama.cpp OpenVINO backend side by side (``scripts/install-upstream`` builds it in CI).

Budget: about 2 minutes on an idle 2-core machine (the catalogue three ways is most of it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ovkit.memory import MIB
from ovkit.ops.policy import Revision
from ovkit.upstream import build, cases, devices, isolate, ops
from ovkit.upstream.agreement import agreement

ROOT = Path(__file__).resolve().parents[1]


def _ovkit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "ovkit", *args], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def worker():
    with isolate.Isolated() as w:
        yield w


def test_the_installed_build_is_the_openvino_flavour() -> None:
    found = build.detect()
    assert found.available and found.ggml is not None
    assert found.ggml.openvino_lib is not None and found.ggml.openvino_lib.name.startswith("libggml-openvino")
    assert found.revision == Revision.P
    assert "ggml-python 0.0.45 (openvino" in found.describe()


def test_device_list_comes_from_the_real_backend(worker) -> None:
    found = devices.list_devices(worker)
    by_name = {d.name: d for d in found}
    ov = by_name["OPENVINO0"]
    # the backend's single-device state: "OpenVINO Runtime", type GPU, host RAM with all of it free
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert (ov.description, ov.type, ov.registry) == ("OpenVINO Runtime", "GPU", "OPENVINO")
    assert ov.memory_total == ov.memory_free == ram
    assert by_name["CPU"].type == "CPU"
    text = devices.format_list_devices(found)
    assert text.splitlines() == [
        "Available devices:",
        f"  OPENVINO0: OpenVINO Runtime ({ram // MIB} MiB, {ram // MIB} MiB free)",
    ]  # llama-bench skips CPU-type devices
    frame = devices.device_frame(found)
    assert list(frame["name"]) == [d.name for d in found] and frame["total_mib"].iloc[0] == ram // MIB


def test_list_devices_upstream_prints_llama_bench_text() -> None:
    out = _ovkit("list-devices", "--upstream")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == devices.format_list_devices(devices.list_devices())


def test_a_crashing_call_is_reported_and_the_next_one_runs(worker) -> None:
    crashed = worker.call({"cmd": "crash"})  # supports_op(NULL) dereferences the null tensor
    assert crashed.status == "CRASH" and crashed.detail.startswith("SIGSEGV")
    assert worker.crashes >= 1
    assert devices.list_devices(worker)[0].name == "OPENVINO0"  # a fresh child answers


def test_catalogue_cases_run_three_ways() -> None:
    results = list(ops.iter_three_way(progress=False))
    assert len(results) == len(cases.catalogue()) >= 50
    both = [r for r in results if r.upstream_nmse is not None and r.ovkit_nmse is not None]
    assert len(both) >= 50
    for r in results:
        assert r.upstream_status in ("OK", "FAIL", "not supported"), r.line()
        if r.upstream_nmse is not None:
            assert (r.upstream_status == "OK") == (r.upstream_nmse <= r.max_nmse), r.line()
        assert r.upstream_supported == (r.upstream_status != "not supported")
        assert r.agrees, r.line()  # ovkit's policy at revision P predicts the real backend
    # ovkit's f32 numbers match ggml wherever it runs
    assert all(r.ovkit_status == "OK" for r in results if r.ovkit_status != "not supported")


def test_test_ops_upstream_prints_both_verdicts() -> None:
    out = _ovkit("test-ops", "--upstream", "-o", "ADD", "--no-progress")
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("  ADD(")]
    assert len(lines) == len([c for c in cases.catalogue() if c.op == "ADD"])
    assert all("upstream " in ln and "| ovkit " in ln and "agrees" in ln for ln in lines)
    assert any("upstream not supported" in ln and "[binary.src1_permute]" in ln for ln in lines)


def test_live_agreement_is_total_at_the_installed_revision() -> None:
    result = agreement(catalogue=False, progress=False)
    assert result.revision == Revision.P
    assert result.compared["test-backend-ops"] > 9000
    assert result.differences == [], "\n".join(result.lines())
    # the CSV came from revision V: its SWIGLU_OAI and CPY view-fit rows answer differently here
    assert result.csv_changed == 3


def test_without_the_build_features_name_the_script(monkeypatch, tmp_path) -> None:
    cpu_only = build.LibraryBuild("ggml-python", "0.0.45", tmp_path, None)
    monkeypatch.setattr(build, "ggml_python_build", lambda: cpu_only)
    with pytest.raises(build.UpstreamUnavailableError, match="CPU-only build.*scripts/install-upstream"):
        build.require()
    monkeypatch.setattr(build, "ggml_python_build", lambda: None)
    with pytest.raises(
        build.UpstreamUnavailableError, match="ggml-python is missing; run scripts/install-upstream"
    ):
        isolate.Isolated()


def test_info_names_the_vendored_ggml(worker) -> None:
    from ovkit.upstream.devices import ggml_info

    info = ggml_info(worker)
    assert info["ggml_version"].count(".") == 2 and "OPENVINO" in info["registries"].split(", ")


def test_a_request_past_its_timeout_is_killed_and_reported() -> None:
    with isolate.Isolated() as w:
        late = w.call({"cmd": "devices"}, timeout_s=0.01)  # the child cannot even start in 10 ms
        assert late.status == "TIMEOUT" and "0.01 s" in late.detail
        assert w.call({"cmd": "devices"}).ok  # a fresh child answers


def test_the_openvino_llama_cpp_loads_apart_from_the_cpu_one() -> None:
    lib = build.llama_openvino_build()
    assert lib is not None and lib.has_openvino and lib.has_model_cache  # the newer backend
    where, names = build.llama_openvino_devices()
    assert where.is_relative_to(build.llama_openvino_dir())  # not the environment's CPU llama_cpp
    assert "OPENVINO0" in names


#: Ops of the test-backend-ops sample: elementwise, reductions, matmul (plain and quantized),
#: indexing, copies, attention-side ops, index-set judged TOP_K.
SAMPLE_OPS = ("ADD", "SCALE", "RMS_NORM", "SOFT_MAX", "MUL_MAT", "GET_ROWS", "CPY", "TOP_K", "ROPE")


def test_backend_ops_catalogue_runs_three_ways() -> None:
    from ovkit.catalogue import run as catalogue

    rows = catalogue.stratified([r for r in catalogue.read_rows() if r.op in SAMPLE_OPS], 40)
    results = list(ops.iter_three_way(rows=rows, progress=False))
    assert len(results) == len(rows) >= 30 and len({r.op for r in results}) == len(SAMPLE_OPS)
    asked = [r for r in results if r.upstream_status != "no case"]
    accepted = [r for r in asked if r.upstream_supported]
    assert len(accepted) >= 10 and {r.op for r in accepted} >= {"ADD", "MUL_MAT", "RMS_NORM"}
    for r in asked:
        assert r.upstream_status in ("OK", "FAIL", "not supported", "CRASH"), r.line()
        if r.upstream_status == "CRASH":  # ggml-python 0.0.45's CPU backend aborts on q4_1 x f16
            assert r.detail.startswith("SIG"), r.line()
        else:
            assert r.agrees, r.line()  # the policy at the installed revision predicts the verdict
    for r in accepted:  # both sides computed and were judged against ggml
        assert r.upstream_nmse is not None and (r.upstream_status == "OK") == (r.upstream_nmse <= r.max_nmse)
        if r.ovkit_status == "OK":
            assert r.ovkit_nmse is not None and r.ovkit_nmse <= r.max_nmse, r.line()
    assert sum(r.ovkit_nmse is not None and r.upstream_nmse is not None for r in accepted) >= 10


def test_test_ops_upstream_runs_the_backend_ops_catalogue() -> None:
    out = _ovkit("test-ops", "--catalogue", "test-backend-ops", "--upstream", "-o", "RMS_NORM", "--sample", "4",
                 "--no-progress")  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("  RMS_NORM(")]
    assert len(lines) >= 3 and all(
        "upstream " in ln and "| ovkit OK (NMSE " in ln and "agrees" in ln for ln in lines
    )
    assert sum("upstream OK (NMSE " in ln for ln in lines) >= 2
    assert "test-backend-ops catalogue" in out.stdout and "verdicts agree" in out.stdout
