from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ovkit.cli import main
from ovkit.devices import format_device_list, list_devices
from ovkit.usage import SIMULATED_NOTICE

LAPTOP = """Available devices:
  CPU: Intel(R) Core(TM) Ultra 7 258V (31623 MiB, 31623 MiB free)
  GPU: Intel(R) Arc(TM) Graphics (iGPU) (29276 MiB, 29276 MiB free)
  NPU: Intel(R) AI Boost (NPU 4000) (31623 MiB, 31623 MiB free)
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GGML_OPENVINO_")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "ovkit", *args], capture_output=True, text=True, env=full, timeout=120
    )


def test_list_devices_on_the_simulated_laptop_matches_the_seed_byte_for_byte() -> None:
    r = run("list-devices", "--simulate", "laptop")
    assert r.returncode == 0
    assert r.stdout == LAPTOP  # the backend's bytes: the simulation is not named on stdout
    assert r.stderr == SIMULATED_NOTICE.format("laptop") + "\nOpenVINO: using device CPU\n"
    assert "SIMULATED device set 'laptop'" in r.stderr.splitlines()[0]


def test_list_devices_alias_and_fallback_lines_on_stderr() -> None:
    r = run("--list-devices", "--simulate", "laptop", env={"GGML_OPENVINO_DEVICE": "GPU.0"})
    assert r.returncode == 0 and r.stdout == LAPTOP
    assert r.stderr.splitlines()[1:] == [
        "GGML OpenVINO Backend: device GPU.0 is not available, fallback to CPU",
        "OpenVINO: using device CPU",
    ]


def test_near_miss_hint_follows_the_warning() -> None:
    r = run("list-devices", "--simulate", "workstation", env={"GGML_OPENVINO_DEVICE": "GPU"})
    assert r.stderr.splitlines() == [
        SIMULATED_NOTICE.format("workstation"),
        "GGML OpenVINO Backend: device GPU is not available, fallback to CPU",
        "hint: this machine lists numbered devices: use 'GPU.0' or 'GPU.1'",
        "OpenVINO: using device CPU",
    ]


def test_real_runtime_prints_what_list_devices_returns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-devices"]) == 0
    out = capsys.readouterr().out
    assert out == format_device_list(list_devices()) + "\n"
    assert out.startswith("Available devices:\n  CPU: ")


def test_json_output_carries_the_same_data() -> None:
    r = run("list-devices", "--simulate", "laptop", "--json", env={"GGML_OPENVINO_DEVICE": "NPU"})
    data = json.loads(r.stdout)
    assert data["selected"] == "NPU" and data["simulated"] is True
    assert [(d["name"], d["total_mib"], d["free_mib"]) for d in data["devices"]] == [
        ("CPU", 31623, 31623),
        ("GPU", 29276, 29276),
        ("NPU", 31623, 31623),
    ]
    assert data["devices"][2]["description"] == "Intel(R) AI Boost (NPU 4000)"


def test_bad_simulation_profile_is_one_line_and_exit_2() -> None:
    r = run("list-devices", "--simulate", "moon-base")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "ovkit: error: unknown simulation profile 'moon-base' (expected one of: "
        "gpu-memory-error, gpu-overcommit, laptop, npu-name-error, workstation)"
    ]


def test_broken_runtime_is_one_line_and_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "openvino"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        "raise ImportError('libopenvino.so.2641: cannot open shared object file')\n"
    )
    r = run("list-devices", env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2 and r.stdout == ""
    assert (
        r.stderr.strip()
        == "ovkit: error: cannot import openvino: libopenvino.so.2641: cannot open shared object file"
    )


def test_malformed_environment_value_warns_on_stderr_and_still_lists() -> None:
    r = run("list-devices", "--simulate", "laptop", env={"GGML_OPENVINO_STATEFUL_EXECUTION": "yes"})
    assert r.returncode == 0 and r.stdout == LAPTOP
    assert (
        "ovkit: warning: GGML_OPENVINO_STATEFUL_EXECUTION='yes' is read as 0 (off): not a clean integer"
        in r.stderr
    )


def test_cli_path_imports_no_pandas_matplotlib_or_ipywidgets() -> None:
    code = (
        "import sys, ovkit.cli; ovkit.cli.main(['list-devices', '--simulate', 'laptop']);"
        "print(sorted(m for m in ('pandas', 'matplotlib', 'ipywidgets') if m in sys.modules), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stderr.strip().splitlines()[-1] == "[]"


def test_config_command_shows_parsed_values() -> None:
    r = run("config", "--json", env={"GGML_OPENVINO_PREFILL_CHUNK_SIZE": "-4"})
    rows = {row["variable"]: row for row in json.loads(r.stdout)["variables"]}
    assert rows["GGML_OPENVINO_PREFILL_CHUNK_SIZE"]["value"] == 256
    assert rows["GGML_OPENVINO_PREFILL_CHUNK_SIZE"]["raw"] == "-4"


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).with_name("ovkit")
    r = subprocess.run(
        [str(exe), "list-devices", "--simulate", "laptop"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout == LAPTOP
