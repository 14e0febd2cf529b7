"""The three device layouts (seed, llama.cpp master, Intel's fork) as users see them."""

from __future__ import annotations

import json
import logging
import os

import pytest

import ovkit
from ovkit.cli import main
from ovkit.devices import format_device_list, list_devices
from ovkit.devices_view import device_table
from ovkit.layouts import LAYOUTS, BackendAbort, OnUnknown, UnknownLayoutError
from ovkit.memory import MIB, host_memory
from ovkit.selection import resolve_device
from ovkit.simulate import DeviceProfile, Profile, SimulatedCore
from ovkit.simulate.profiles import PROFILES

LAPTOP = {
    "seed": [
        "  CPU: Intel(R) Core(TM) Ultra 7 258V (31623 MiB, 31623 MiB free)",
        "  GPU: Intel(R) Arc(TM) Graphics (iGPU) (29276 MiB, 29276 MiB free)",
        "  NPU: Intel(R) AI Boost (NPU 4000) (31623 MiB, 31623 MiB free)",
    ],
    "master": ["  OPENVINO0: OpenVINO Runtime (31623 MiB, 31623 MiB free)"],
    # the laptop's MemAvailable is 24 GiB: the iGPU's and the NPU's free is capped there
    "fork": [
        "  OPENVINO0: GGML_OPENVINO_DEVICE=CPU (selected) - Intel(R) Core(TM) Ultra 7 258V (31623 MiB, 31623 MiB free)",
        "  OPENVINO1: GGML_OPENVINO_DEVICE=GPU - Intel(R) Arc(TM) Graphics (iGPU) (29276 MiB, 24576 MiB free)",
        "  OPENVINO2: GGML_OPENVINO_DEVICE=NPU - Intel(R) AI Boost (NPU 4000) (31623 MiB, 24576 MiB free)",
    ],
}
WORKSTATION = {
    "seed": [
        "  CPU: Intel(R) Xeon(R) w5-3435X (65536 MiB, 65536 MiB free)",
        "  GPU.0: Intel(R) UHD Graphics 770 (iGPU) (28672 MiB, 28672 MiB free)",
        "  GPU.1: Intel(R) Arc(TM) A770 Graphics (dGPU) (16384 MiB, 14784 MiB free)",
    ],
    "master": ["  OPENVINO0: OpenVINO Runtime (65536 MiB, 65536 MiB free)"],
    # the fork drops only AUTO/MULTI/HETERO (BATCH stays) and does not count usm_host (64 MiB)
    "fork": [
        "  OPENVINO0: GGML_OPENVINO_DEVICE=BATCH - BATCH virtual device (65536 MiB, 65536 MiB free)",
        "  OPENVINO1: GGML_OPENVINO_DEVICE=CPU (selected) - Intel(R) Xeon(R) w5-3435X (65536 MiB, 65536 MiB free)",
        "  OPENVINO2: GGML_OPENVINO_DEVICE=GPU.0 - Intel(R) UHD Graphics 770 (iGPU) (28672 MiB, 28672 MiB free)",
        "  OPENVINO3: GGML_OPENVINO_DEVICE=GPU.1 - Intel(R) Arc(TM) A770 Graphics (dGPU) (16384 MiB, 14848 MiB free)",
    ],
}


def listing(core: object, layout: str, env: dict[str, str] | None = None) -> list[str]:
    text = format_device_list(list_devices(layout, env or {}, core=core))
    assert text.splitlines()[0] == "Available devices:"
    return text.splitlines()[1:]


@pytest.mark.parametrize("layout", ["seed", "master", "fork"])
@pytest.mark.parametrize(("profile", "expected"), [("laptop", LAPTOP), ("workstation", WORKSTATION)])
def test_each_layout_lists_the_simulated_profiles_as_its_code_does(
    profile: str, expected: dict[str, list[str]], layout: str
) -> None:
    assert listing(SimulatedCore(profile), layout) == expected[layout]


def test_seed_stays_the_default_layout() -> None:
    core = SimulatedCore("laptop")
    assert format_device_list(ovkit.list_devices(core=core)) == format_device_list(
        list_devices("seed", core=core)
    )
    assert [d.layout for d in ovkit.list_devices(core=core)] == ["seed"] * 3


def test_real_cpu_in_each_layout() -> None:
    ram = host_memory().total_bytes // MIB
    cpu = next(d for d in list_devices("seed", {}) if d.name == "CPU")
    full_name = cpu.description
    assert cpu.total_mib == ram
    assert listing(None, "master")[0] == f"  OPENVINO0: OpenVINO Runtime ({ram} MiB, {ram} MiB free)"
    fork = listing(None, "fork")
    index = [d.name for d in list_devices("seed", {})].index("CPU")
    assert fork[index] == (
        f"  OPENVINO{index}: GGML_OPENVINO_DEVICE=CPU (selected) - {full_name} ({ram} MiB, {ram} MiB free)"
    )


def test_master_layout_matches_what_the_installed_backend_reports() -> None:
    """ovkit's master layout for this machine's CPU is the real backend's device list, byte for byte."""
    from ovkit.upstream import devices as upstream

    real = upstream.list_devices()
    ours = list_devices("master", {})
    assert format_device_list(ours) == upstream.format_list_devices(real)
    ov = next(d for d in real if d.registry == "OPENVINO")
    assert (ours[0].name, ours[0].description, ours[0].ggml_type) == (ov.name, ov.description, ov.type)
    assert (ours[0].total_bytes, ours[0].free_bytes) == (ov.memory_total, ov.memory_free)


# -- the fork's selection: abort, not fallback ---------------------------------------------------
@pytest.mark.parametrize("requested", ["GPU", "gpu.0", "AUTO", "NPU"])
def test_fork_aborts_on_an_unknown_device_naming_the_available_ones(requested: str) -> None:
    core = SimulatedCore("workstation")
    expected = (
        f"GGML OpenVINO Backend: GGML_OPENVINO_DEVICE={requested} is not available. "
        "Set it to one of the available OpenVINO devices:\n"
        "  BATCH: BATCH virtual device\n"
        "  CPU: Intel(R) Xeon(R) w5-3435X\n"
        "  GPU.0: Intel(R) UHD Graphics 770 (iGPU)\n"
        "  GPU.1: Intel(R) Arc(TM) A770 Graphics (dGPU)"
    )
    env = {"GGML_OPENVINO_DEVICE": requested}
    with pytest.raises(BackendAbort) as listed:
        list_devices("fork", env, core=core)
    with pytest.raises(BackendAbort) as resolved:
        resolve_device(env, layout="fork", log=False, core=core)
    assert str(listed.value) == str(resolved.value) == expected


def test_seed_and_master_fall_back_where_the_fork_aborts(caplog: pytest.LogCaptureFixture) -> None:
    core = SimulatedCore("workstation")
    env = {"GGML_OPENVINO_DEVICE": "GPU"}
    for layout in ("seed", "master"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ovkit"):
            sel = resolve_device(env, layout=layout, core=core)
        assert (sel.device, sel.fell_back, sel.layout) == ("CPU", True, layout)
        assert caplog.messages[0] == "GGML OpenVINO Backend: device GPU is not available, fallback to CPU"
    assert listing(core, "master", env) == WORKSTATION["master"]  # host RAM, whatever is selected
    assert [LAYOUTS[k].selection.on_unknown for k in LAYOUTS] == [
        OnUnknown.FALLBACK,
        OnUnknown.FALLBACK,
        OnUnknown.ABORT,
    ]


def test_fork_marks_the_selected_device_and_registers_the_others_for_discovery() -> None:
    core = SimulatedCore("workstation")
    devices = list_devices("fork", {"GGML_OPENVINO_DEVICE": "GPU.1"}, core=core)
    assert [(d.name, d.ov_id, d.ggml_type) for d in devices] == [
        ("OPENVINO0", "BATCH", "IGPU"),
        ("OPENVINO1", "CPU", "IGPU"),
        ("OPENVINO2", "GPU.0", "IGPU"),
        ("OPENVINO3", "GPU.1", "GPU"),
    ]
    assert (
        devices[3].description
        == "GGML_OPENVINO_DEVICE=GPU.1 (selected) - Intel(R) Arc(TM) A770 Graphics (dGPU)"
    )
    assert (
        resolve_device({"GGML_OPENVINO_DEVICE": "GPU.1"}, layout="fork", log=False, core=core).device
        == "GPU.1"
    )


def test_fork_without_a_cpu_selects_the_first_device_when_unset() -> None:
    gpu = PROFILES["laptop"].devices[4]
    core = SimulatedCore(
        Profile("gpu-only", "one GPU", (DeviceProfile("GPU", gpu.properties),), 8 << 30, 6 << 30)
    )
    assert resolve_device({}, layout="fork", log=False, core=core).device == "GPU"
    assert (
        resolve_device({}, layout="seed", log=False, core=core).device == "CPU"
    )  # upstream's "CPU", listed or not


def test_fork_reports_host_ram_where_the_seed_reports_zero() -> None:
    core = SimulatedCore("gpu-memory-error")
    seed = {d.ov_id: d for d in list_devices("seed", {}, core=core)}
    fork = {d.ov_id: d for d in list_devices("fork", {}, core=core)}
    assert (seed["GPU"].total_bytes, seed["GPU"].free_bytes) == (0, 0) and seed["GPU"].memory_error
    host = PROFILES["gpu-memory-error"]
    assert fork["GPU"].total_bytes == host.host_total_bytes
    assert fork["GPU"].free_bytes == host.host_available_bytes  # host RAM, capped: an iGPU
    assert fork["GPU"].memory_error is None


def test_fork_clamps_overcommitted_devices_without_host_usm() -> None:
    core = SimulatedCore("gpu-overcommit")
    fork = {d.ov_id: d for d in list_devices("fork", {}, core=core)}
    # cl_mem 2 GiB + usm_device 5 GiB (usm_host not counted) on an 8 GiB GPU: 1 GiB free
    assert (fork["GPU"].used_bytes, fork["GPU"].free_bytes) == (7 << 30, 1 << 30)
    assert (fork["NPU"].free_bytes, fork["NPU"].total_bytes) == (0, 4 << 30)


# -- where users see the layout ----------------------------------------------------------------
def test_cli_layout_flag_prints_each_layout_and_the_forks_abort(capsys: pytest.CaptureFixture[str]) -> None:
    for layout, lines in WORKSTATION.items():
        assert main(["list-devices", "--simulate", "workstation", "--layout", layout]) == 0
        assert capsys.readouterr().out.splitlines() == ["Available devices:", *lines]
    assert main(["list-devices", "--simulate", "workstation", "--layout", "fork", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["layout"] == "fork" and [d["ggml_type"] for d in payload["devices"]] == [
        "IGPU",
        "GPU",
        "IGPU",
        "IGPU",
    ]
    os.environ["GGML_OPENVINO_DEVICE"] = "GPU"  # the conftest fixture removes it again
    assert main(["list-devices", "--simulate", "workstation", "--layout", "fork"]) == 2
    err = capsys.readouterr().err
    assert "ovkit: error: GGML OpenVINO Backend: GGML_OPENVINO_DEVICE=GPU is not available." in err
    assert "\n  GPU.1: Intel(R) Arc(TM) A770 Graphics (dGPU)\n" in err


def test_upstream_and_layout_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-devices", "--upstream", "--layout", "fork"]) == 2
    assert "--upstream lists what the installed backend registers (its own layout, master)" in (
        capsys.readouterr().err
    )


def test_unknown_layout_is_named() -> None:
    with pytest.raises(
        UnknownLayoutError, match="unknown device layout 'forked'; expected one of seed, master, fork"
    ):
        list_devices("forked", core=SimulatedCore("laptop"))


def test_device_table_and_selector_say_which_layout_they_show() -> None:
    pytest.importorskip("pandas")
    core = SimulatedCore("laptop")
    html = device_table(layout="fork", core=core).to_html()
    assert "— layout: fork (Intel's fork: OPENVINO&lt;i&gt; per OpenVINO device" in html  # escaped as text
    assert "layout: seed (list-devices PRD" in device_table(core=core).to_html()
    raw = device_table(raw=True, layout="master", core=core)
    assert list(raw.index) == ["OPENVINO0"] and raw.loc["OPENVINO0", "layout"] == "master"
    from ovkit.widgets.selector import state_report

    text = str(state_report(resolve_device({}, log=False, layout="master", core=core)))
    assert "(master layout: an unknown device means fallback to CPU with a warning)" in text
