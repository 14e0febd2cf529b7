"""The device selector, headless: it sets GGML_OPENVINO_DEVICE, re-resolves, warns and hints."""

from __future__ import annotations

import os

import pytest

from ovkit.engine import get_engine
from ovkit.selection import ENV_DEVICE
from ovkit.simulate import SimulatedCore
from ovkit.widgets import DeviceSelector
from ovkit.widgets.selector import UNSET


@pytest.fixture
def restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the variable with monkeypatch so whatever the selector writes is undone."""
    monkeypatch.setenv(ENV_DEVICE, "placeholder")
    monkeypatch.delenv(ENV_DEVICE)


def test_lists_physical_devices_and_shows_the_default(restore_env) -> None:
    s = DeviceSelector(core=SimulatedCore("laptop"))
    assert list(s.dropdown.get_state()["_options_labels"]) == [UNSET, "CPU", "GPU", "NPU"]
    assert s.state.device == "CPU" and s.state.requested is None
    assert "GGML_OPENVINO_DEVICE = (unset) -&gt; CPU</b>" in s.status.value
    s.close()


def test_choosing_a_device_sets_the_variable_for_the_kernel(restore_env) -> None:
    seen = []
    core = SimulatedCore("laptop")
    s = DeviceSelector(on_change=seen.append, core=core)
    assert get_engine(core).selected_device() == "CPU"
    s.dropdown.value = "GPU"  # as the user picks it
    assert os.environ[ENV_DEVICE] == "GPU"
    assert get_engine(core).selected_device() == "GPU"  # what Graph.compute runs on from now
    assert s.state.device == "GPU" and not s.state.fell_back
    assert seen[-1].device == "GPU"
    s.dropdown.value = UNSET
    assert ENV_DEVICE not in os.environ
    assert s.state.device == "CPU"
    s.close()


def test_typed_near_miss_falls_back_with_warning_and_hint(restore_env) -> None:
    s = DeviceSelector(core=SimulatedCore("workstation"))
    s.text.value = "gpu"
    assert os.environ[ENV_DEVICE] == "gpu"
    assert s.state.device == "CPU" and s.state.fell_back
    html = s.status.get_state()["value"]
    assert "GGML OpenVINO Backend: device gpu is not available, fallback to CPU" in html
    assert "hint: this machine lists numbered devices: use 'GPU.0' or 'GPU.1'" in html
    assert s.dropdown.value is None  # no list entry matches a typed value
    text = str(s)
    assert text.startswith("GGML_OPENVINO_DEVICE = 'gpu' -> CPU") and "hint:" in text
    s.close()


def test_follows_a_variable_set_elsewhere(restore_env) -> None:
    s = DeviceSelector(core=SimulatedCore("laptop"))
    os.environ[ENV_DEVICE] = "NPU"
    s.sync()
    assert s.dropdown.value == "NPU" and s.state.device == "NPU"
    s.close()


def test_private_environment_mapping_leaves_the_process_alone(restore_env) -> None:
    env: dict[str, str] = {}
    s = DeviceSelector(env=env, core=SimulatedCore("laptop"))
    s.select("NPU")
    assert env == {ENV_DEVICE: "NPU"} and ENV_DEVICE not in os.environ
    assert s.state.device == "NPU"
    s.close()


def test_fallbacks_without_a_widget_front_end(restore_env) -> None:
    s = DeviceSelector(core=SimulatedCore("laptop"))
    s.select("<GPU>")
    bundle = s._repr_mimebundle_()
    assert "&lt;GPU&gt;" in bundle["text/html"] and "<GPU>" not in bundle["text/html"]
    assert "fallback to CPU" in bundle["text/plain"]
    s.close()
