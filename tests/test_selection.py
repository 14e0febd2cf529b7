from __future__ import annotations

import logging
import os

import pytest

from ovkit.devices import DeviceClass
from ovkit.selection import Backend, resolve_device, using_device
from ovkit.simulate import SimulatedCore


def resolve(profile: str, value: str | None, caplog: pytest.LogCaptureFixture):
    env = {} if value is None else {"GGML_OPENVINO_DEVICE": value}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ovkit"):
        sel = resolve_device(env, core=SimulatedCore(profile))
    return sel, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_selects_cpu(value: str | None, caplog: pytest.LogCaptureFixture) -> None:
    sel, lines = resolve("laptop", value, caplog)
    assert (sel.device, sel.fell_back, sel.hint) == ("CPU", False, None)
    assert lines == ["OpenVINO: using device CPU"]


@pytest.mark.parametrize("value", ["GPU", "NPU", "CPU"])
def test_exact_member_is_selected(value: str, caplog: pytest.LogCaptureFixture) -> None:
    sel, lines = resolve("laptop", value, caplog)
    assert sel.device == value and not sel.fell_back
    assert lines == [f"OpenVINO: using device {value}"]


@pytest.mark.parametrize(
    ("profile", "value", "hint"),
    [
        ("laptop", "gpu", "device ids are case-sensitive: use 'GPU'"),
        ("laptop", "Npu", "device ids are case-sensitive: use 'NPU'"),
        ("laptop", " GPU", "remove the surrounding white space: use 'GPU'"),
        ("workstation", "GPU", "this machine lists numbered devices: use 'GPU.0' or 'GPU.1'"),
        ("workstation", "gpu", "this machine lists numbered devices: use 'GPU.0' or 'GPU.1'"),
        ("laptop", "AUTO", "virtual devices are not accepted by the backend: use one of 'CPU', 'GPU', 'NPU'"),
        (
            "laptop",
            "HETERO:GPU,CPU",
            "virtual devices are not accepted by the backend: use one of 'CPU', 'GPU', 'NPU'",
        ),
        ("laptop", "TPU", None),
        ("workstation", "NPU", None),
    ],
)
def test_a_miss_falls_back_to_cpu_with_upstreams_warning(
    profile: str, value: str, hint: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    sel, lines = resolve(profile, value, caplog)
    assert (sel.device, sel.fell_back, sel.requested, sel.hint) == ("CPU", True, value, hint)
    warning = f"GGML OpenVINO Backend: device {value} is not available, fallback to CPU"
    assert lines[0] == warning and lines[-1] == "OpenVINO: using device CPU"
    assert sel.messages == [warning, "OpenVINO: using device CPU"]


def test_numbered_gpu_is_selected_and_classed_as_gpu(caplog: pytest.LogCaptureFixture) -> None:
    sel, _ = resolve("workstation", "GPU.1", caplog)
    assert sel.device == "GPU.1" and sel.device_class is DeviceClass.GPU


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_OPENVINO_DEVICE", "NPU")
    assert resolve_device(core=SimulatedCore("laptop")).device == "NPU"


def test_using_device_selects_for_a_block_and_leaves_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block gets its selection; the process (other threads) keeps its own variable."""
    monkeypatch.setenv("GGML_OPENVINO_DEVICE", "NPU")
    monkeypatch.setenv("GGML_OPENVINO_LOG_UNSUPPORTED_OPS", "1")
    core = SimulatedCore("laptop")
    with using_device("GPU", core=core) as sel:
        assert sel.device == "GPU" and sel.config.log_unsupported_ops  # the other settings kept
        assert os.environ["GGML_OPENVINO_DEVICE"] == "NPU"
        assert resolve_device(core=core).device == "NPU"
        with using_device("gpu", core=core) as inner:
            assert inner.device == "CPU" and inner.fell_back and inner.hint
    assert os.environ["GGML_OPENVINO_DEVICE"] == "NPU"


def test_backend_supports_no_op_on_a_device_that_is_not_selected() -> None:
    core = SimulatedCore("laptop")
    backend = Backend(resolve_device({"GGML_OPENVINO_DEVICE": "GPU"}, core=core))
    for other in ("CPU", "NPU"):
        decision = backend.supports_op(other, object())
        assert not decision
        assert decision.reason == f"device {other} is not the selected device GPU"


def test_real_runtime_selects_cpu_by_default() -> None:
    sel = resolve_device(env={})
    assert sel.device == "CPU" and "CPU" in sel.available
