"""Shared helpers for the widget tests: simulated cores with scripted failures, polling waits."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ovkit.memory import MIB
from ovkit.simulate import DeviceProfile, Failure, Profile, SimulatedCore

GIB = 1024 * MIB


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll until ``predicate()`` holds (a wait for an event, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def made_and_closed(cls: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """Body of a fixture that yields ``make(core, **kw)`` and closes every widget it made."""
    made: list[Any] = []

    def make(core: Any, **kw: Any) -> Any:
        made.append(cls(core=core, **kw))
        return made[-1]

    yield make
    for widget in made:
        widget.close()


def thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()}


class FlakyCore(SimulatedCore):
    """A simulated core whose device query can be switched to fail (like a lost driver)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_with: BaseException | None = None

    @property
    def available_devices(self) -> list[str]:
        if self.fail_with is not None:
            raise self.fail_with
        return super().available_devices


HOSTILE = "<script>alert('x')</script> & \"Co\""

HOSTILE_PROFILE = Profile(
    "hostile",
    "devices whose runtime strings contain HTML",
    (
        DeviceProfile("CPU", {"FULL_DEVICE_NAME": HOSTILE}),
        DeviceProfile(
            "GPU",
            {
                "FULL_DEVICE_NAME": "iGPU <b>bold</b>",
                "GPU_DEVICE_TOTAL_MEM_SIZE": Failure("driver said <img src=x onerror=alert(1)>"),
                "GPU_MEMORY_STATISTICS": {},
            },
        ),
    ),
    host_total_bytes=16 * GIB,
    host_available_bytes=8 * GIB,
)

FOUR_DEVICES = Profile(
    "four",
    "CPU, two GPUs and an NPU",
    (
        DeviceProfile("CPU", {"FULL_DEVICE_NAME": "Intel(R) Xeon(R)"}),
        DeviceProfile(
            "GPU.0",
            {"FULL_DEVICE_NAME": "iGPU", "GPU_DEVICE_TOTAL_MEM_SIZE": 8 * GIB, "GPU_MEMORY_STATISTICS": {}},
        ),
        DeviceProfile(
            "GPU.1",
            {
                "FULL_DEVICE_NAME": "dGPU",
                "GPU_DEVICE_TOTAL_MEM_SIZE": 16 * GIB,
                "GPU_MEMORY_STATISTICS": {"usm_device": GIB, "usm_host": 64 * MIB},
            },
        ),
        DeviceProfile(
            "NPU",
            {
                "FULL_DEVICE_NAME": "AI Boost",
                "DEVICE_ARCHITECTURE": "4000",
                "NPU_DEVICE_TOTAL_MEM_SIZE": 8 * GIB,
                "NPU_DEVICE_ALLOC_MEM_SIZE": 0,
            },
        ),
    ),
    host_total_bytes=32 * GIB,
    host_available_bytes=20 * GIB,
)


def run_in_kernel(cells: list[str]) -> Any:
    """``cells`` run in a fresh kernel (no GGML_OPENVINO_* variables), saved as JupyterLab saves by
    default: outputs kept, no widget state.  Returns the executed notebook."""
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_OPENVINO_")}
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=False)
    client.km = client.create_kernel_manager()
    client.start_new_kernel(env=env)
    try:
        client.start_new_kernel_client()
        client.execute(cleanup_kc=False)
    finally:
        client._cleanup_kernel()
    return nb
