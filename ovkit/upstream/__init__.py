"""The real llama.cpp OpenVINO backend side by side with ovkit: its build, devices, each catalogue
case three ways and its live ``supports_op`` against ovkit's policy, every native call in a child."""

from __future__ import annotations

from ovkit.upstream import cases
from ovkit.upstream.agreement import Agreement, Difference, agreement
from ovkit.upstream.build import (
    INSTALL_SCRIPT,
    LibraryBuild,
    UpstreamBuild,
    UpstreamUnavailableError,
    detect,
    llama_openvino_env,
)
from ovkit.upstream.devices import (
    UpstreamCallError,
    UpstreamDevice,
    compare_lists,
    device_frame,
    format_list_devices,
    list_devices,
)
from ovkit.upstream.isolate import Isolated, Outcome
from ovkit.upstream.ops import ThreeWay, iter_three_way, three_way

__all__ = [
    "INSTALL_SCRIPT", "Agreement", "Difference", "Isolated", "LibraryBuild", "Outcome", "ThreeWay",
    "UpstreamBuild", "UpstreamCallError", "UpstreamDevice", "UpstreamUnavailableError", "agreement",
    "cases", "compare_lists", "detect", "device_frame", "format_list_devices", "iter_three_way",
    "list_devices", "llama_openvino_env", "three_way"
]  # fmt: skip
