"""The real llama.cpp OpenVINO backend (ggml-openvino) side by side with ovkit, in the same session.

``scripts/install-upstream`` builds it into the environment (ggml-python and llama-cpp-python
with ``-DGGML_OPENVINO=ON``); without it ovkit works as before and these functions raise
:class:`UpstreamUnavailableError` naming the script.  Every native call runs in a child process
(:mod:`ovkit.upstream.isolate`): a crash inside the backend is reported as ``CRASH`` with its
signal, never taking the caller down.

- :func:`detect`: which build is installed (versions, flavour, features, policy revision);
- :func:`list_devices` / :func:`device_frame` / :func:`format_list_devices`: the backend's devices
  as ``ggml_backend_dev_*`` reports them, and the ``llama-bench --list-devices`` text;
- :func:`three_way` / :func:`iter_three_way`: each catalogue case on ovkit, the real backend and
  ggml's CPU backend, with verdicts and NMSEs;
- :func:`agreement`: the backend's live ``supports_op`` against ``ovkit.ops.policy``.
"""

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
    "INSTALL_SCRIPT",
    "Agreement",
    "Difference",
    "Isolated",
    "LibraryBuild",
    "Outcome",
    "ThreeWay",
    "UpstreamBuild",
    "UpstreamCallError",
    "UpstreamDevice",
    "UpstreamUnavailableError",
    "agreement",
    "cases",
    "compare_lists",
    "detect",
    "device_frame",
    "format_list_devices",
    "iter_three_way",
    "list_devices",
    "llama_openvino_env",
    "three_way",
]
