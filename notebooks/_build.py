"""Writes the walkthrough notebooks (``notebooks/0N-*.ipynb``) from the cell lists below.

The ``.ipynb`` files are what users open and what CI executes; this script is only the easiest
way to keep them consistent (no outputs, a ``parameters`` cell first, stable cell ids that the
tests look up).  ``python notebooks/_build.py`` rewrites them; ``--check`` exits 1 when a
committed notebook differs from what the script would write.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell: markdown or code, with a stable id (the tests find outputs by it)."""

    kind: str
    source: str
    id: str
    tags: tuple[str, ...] = ()


def md(id: str, text: str) -> Cell:  # noqa: A002
    return Cell("markdown", dedent(text).strip("\n"), id)


def code(id: str, text: str, *tags: str) -> Cell:  # noqa: A002
    return Cell("code", dedent(text).strip("\n"), id, tags)


def params(text: str) -> Cell:
    return code("parameters", text, "parameters")


# --------------------------------------------------------------------------------------------
# 01-devices
# --------------------------------------------------------------------------------------------
NB01 = [
    md(
        "title",
        """
        # 01 · Devices: what OpenVINO sees on this machine

        llama.cpp's OpenVINO backend lists **one ggml device per physical OpenVINO device** and
        prints it with `--list-devices`. This notebook shows the same list, the memory figures
        behind each line and how each figure is computed, on this machine and on two simulated
        machines (a laptop with CPU + iGPU + NPU, a workstation with two GPUs).

        Change the parameters below (or run `papermill 01-devices.ipynb out.ipynb -p profile laptop`)
        to look at a simulated machine instead of this one.
        """,
    ),
    params(
        """
        device = "CPU"  # GGML_OPENVINO_DEVICE on this machine, empty for unset
        profile = None  # None for this machine, or a simulated profile such as laptop
        compare_profiles = ["laptop", "workstation"]  # simulated machines shown side by side
        live_refresh = True  # keep the live device table refreshing in the background
        live_interval_s = 1.0  # seconds between refreshes
        """
    ),
    code(
        "setup",
        """
        %matplotlib inline
        import os
        import subprocess
        import sys

        import matplotlib.pyplot as plt
        import openvino as ov
        import pandas as pd

        import ovkit
        from ovkit.devices import physical_device_ids
        from ovkit.memory import MEMORY_RULES, MIB

        core = ovkit.SimulatedCore(profile) if profile else ov.Core()
        print("OpenVINO", ov.get_version())
        print("machine:", f"simulated {profile!r}" if profile else "this machine (real OpenVINO Core)")
        """,
    ),
    md(
        "raw-ids-md",
        """
        ## 1. Raw ids and the physical list

        `core.available_devices` also names *virtual* devices (`AUTO`, `MULTI`, `HETERO`, `BATCH`)
        that route work to other devices. The backend drops them and sorts the rest; the name of
        each ggml device is the exact OpenVINO id (`GPU.1` stays `GPU.1`).
        """,
    ),
    code(
        "raw-ids",
        """
        print("available_devices:", core.available_devices)
        print("listed (physical, sorted):", physical_device_ids(core))
        """,
    ),
    md(
        "table-md",
        """
        ## 2. The device table

        One row per device: its class (decided by the id's prefix), the description (`FULL_DEVICE_NAME`,
        plus the architecture for an NPU), and memory in MiB. `memory_error` explains a 0/0 line;
        `host_available_mib` is the OS's `MemAvailable`, shown for the CPU although the list line
        reports free = total as the backend does on Linux.
        """,
    ),
    code(
        "device-table",
        """
        devices = ovkit.list_devices(core)
        selection = ovkit.resolve_device(core, env={"GGML_OPENVINO_DEVICE": device}, log=False)
        table = ovkit.device_table(devices=devices)
        table.insert(0, "selected", [name == selection.device for name in table.index])
        columns = ["selected", "class", "description", "total_mib", "used_mib", "free_mib"]
        display(table[columns + ["host_available_mib", "memory_error", "simulated"]])
        print("selected device:", selection.device)
        """,
    ),
    md(
        "memory-md",
        """
        ## 3. How each memory figure is computed

        The rule depends only on the device class (so `GPU.1` follows the GPU rule):
        """,
    ),
    code(
        "memory-rules",
        """
        rules = pd.DataFrame(
            [
                {
                    "class": cls,
                    "total from": r.total_property or "host RAM (sysconf)",
                    "used from": r.used_property or "-",
                    "formula": r.formula,
                }
                for cls, r in MEMORY_RULES.items()
            ]
        ).set_index("class")
        display(rules)
        """,
    ),
    md(
        "memory-per-device-md",
        """
        Each device's figures with the formula that produced them. For a GPU, *used* is the sum of
        every value of `GPU_MEMORY_STATISTICS` (bytes this process's OpenVINO engine allocated, by
        allocation type); `GPU_DEVICE_MAX_ALLOC_MEM_SIZE` (largest single allocation) is never used.
        """,
    ),
    code(
        "memory-per-device",
        """
        def explain(d):
            print(f"{d.name} ({d.device_class} class): {d.memory_formula}")
            print(f"    total {d.total_bytes:>15,} B = {d.total_mib} MiB")
            breakdown = f"  breakdown {dict(d.memory_breakdown)}" if d.memory_breakdown else ""
            print(f"    used  {d.used_bytes:>15,} B{breakdown}")
            clamped = "  (clamped: used > total)" if d.memory_clamped else ""
            print(f"    free  {d.free_bytes:>15,} B = {d.free_mib} MiB{clamped}")
            if d.host_available_bytes is not None:
                print(f"    host MemAvailable {d.host_available_bytes // MIB} MiB (live views only)")
            if d.memory_error:
                print(f"    memory_error: {d.memory_error}")


        for d in devices:
            explain(d)
        """,
    ),
    md(
        "simulated-md",
        """
        ## 4. The same on simulated machines

        No GPU or NPU here? `ovkit.SimulatedCore` answers OpenVINO's own property names from a
        profile, so every rule above runs exactly as it would on the hardware. Models compiled for a
        simulated device really run on this CPU, and while they live their constants count as that
        device's allocations. Simulated rows say so (`simulated = True`).
        """,
    ),
    code(
        "simulated-tables",
        """
        machines = {"this machine" if not profile else f"simulated {profile}": devices}
        for name in compare_profiles:
            sim = ovkit.SimulatedCore(name)
            machines[f"simulated {name}"] = ovkit.list_devices(sim)
            print(f"--- {name}: {sim.profile.summary}")
            print("available_devices:", sim.available_devices)
            sim_table = ovkit.device_table(devices=machines[f"simulated {name}"])
            display(sim_table[["class", "description", "total_mib", "used_mib", "free_mib", "memory_formula"]])
        """,
    ),
    md(
        "chart-md",
        """
        Used and free memory per device, one panel per machine. The workstation's discrete GPU
        already holds 1.6 GiB (its `GPU_MEMORY_STATISTICS` is non-zero); on the laptop the iGPU
        and the NPU share host RAM.
        """,
    ),
    code(
        "memory-chart",
        """
        fig, axes = plt.subplots(1, len(machines), figsize=(4.2 * len(machines), 2.8), squeeze=False)
        for ax, (title, devs) in zip(axes[0], machines.items(), strict=True):
            names = [d.name for d in devs]
            used = [d.used_bytes / 2**30 for d in devs]
            free = [d.free_bytes / 2**30 for d in devs]
            ax.barh(names, used, color="tab:red", label="used")
            ax.barh(names, free, left=used, color="tab:green", alpha=0.6, label="free")
            ax.set_title(title)
            ax.set_xlabel("GiB")
            ax.invert_yaxis()
        axes[0][0].legend(loc="lower right")
        fig.tight_layout()
        plt.show()
        """,
    ),
    md(
        "errors-md",
        """
        ## 5. When a property fails

        A required memory property that is missing or raises gives **0 MiB, 0 MiB free** for that
        device and keeps the reason in `memory_error` (tables show it, the list line does not).
        Allocations above the total clamp free to 0.
        """,
    ),
    code(
        "error-profiles",
        """
        for name in ["gpu-memory-error", "gpu-overcommit"]:
            sim_devices = ovkit.list_devices(ovkit.SimulatedCore(name))
            print(f"--- simulated {name}")
            print(ovkit.format_device_list(sim_devices))
            with pd.option_context("display.max_colwidth", None):
                display(ovkit.device_table(devices=sim_devices)[["used_mib", "free_mib", "clamped", "memory_error"]])
        """,
    ),
    md(
        "list-md",
        """
        ## 6. The exact `--list-devices` text

        `ovkit.format_device_list` writes llama.cpp's format byte for byte:
        `Available devices:` then `  <name>: <description> (<total> MiB, <free> MiB free)`, or
        `  (none)`. The command line (`ovkit list-devices`, `ovkit --list-devices`) prints the same
        text; the selection lines go to stderr.
        """,
    ),
    code(
        "cli-compare",
        """
        cmd = [sys.executable, "-m", "ovkit", "list-devices"]
        for sim in [profile, *compare_profiles]:
            args = cmd + (["--simulate", sim] if sim else [])
            env = {**os.environ, "GGML_OPENVINO_DEVICE": device}
            run = subprocess.run(args, capture_output=True, text=True, env=env)
            expected = ovkit.format_device_list(ovkit.list_devices(ovkit.SimulatedCore(sim) if sim else None))
            print(f"$ ovkit list-devices{' --simulate ' + sim if sim else ''}   (stderr: {run.stderr.strip()!r})")
            print(run.stdout, end="")
            print(f"identical to format_device_list: {run.stdout == expected + chr(10)}")
        """,
    ),
    md(
        "live-md",
        """
        ## 7. Live view

        The same rows as a widget that refreshes on a background thread (the kernel stays free):
        the selected device is highlighted, simulated devices are labelled, a failing property
        shows its error inline. Pause it or change the interval with its controls; `live.close()`
        stops the thread.
        """,
    ),
    code(
        "live-table",
        """
        from ovkit.widgets import DeviceTable

        live = DeviceTable(
            core,
            interval=live_interval_s,
            auto_refresh=live_refresh,
            env={"GGML_OPENVINO_DEVICE": device},
        )
        display(live)
        """,
    ),
    md(
        "result-md",
        """
        ## Result

        The list llama.cpp's `--list-devices` prints for this notebook's machine:
        """,
    ),
    code(
        "result",
        """
        print(ovkit.format_device_list(devices))
        """,
    ),
]


# --------------------------------------------------------------------------------------------
# 02-selecting-a-device
# --------------------------------------------------------------------------------------------
NB02 = [
    md(
        "title",
        """
        # 02 · Selecting a device with `GGML_OPENVINO_DEVICE`

        The backend lists every device but **runs on one**: the device named by
        `GGML_OPENVINO_DEVICE`. The rule is strict: unset or empty means `CPU`; any other value must
        be an exact, case-sensitive OpenVINO id, otherwise the backend logs
        `GGML OpenVINO Backend: device <X> is not available, fallback to CPU` and uses the CPU.
        ovkit resolves the variable the same way and adds a *hint* for near misses, without ever
        changing the outcome.

        Parameters: `device` is what this machine's variable is set to (`papermill -p device GPU`);
        `profile` is the simulated machine used for the near-miss examples.
        """,
    ),
    params(
        """
        device = "CPU"  # GGML_OPENVINO_DEVICE to resolve on this machine, empty for unset
        profile = "workstation"  # simulated machine for the near-miss table (GPU.0 + GPU.1, no NPU)
        tries = ["", "CPU", "GPU", "gpu", "GPU.0", "GPU.1", "GPU.1 ", "AUTO", "NPU"]
        """
    ),
    code(
        "setup",
        """
        import logging
        import os
        import sys

        import pandas as pd

        import ovkit

        # Show the backend's own log lines (logger "ovkit") in the notebook, as stderr shows them.
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log = logging.getLogger("ovkit")
        log.handlers[:] = [handler]
        log.setLevel(logging.INFO)
        log.propagate = False
        sim = ovkit.SimulatedCore(profile)
        print("this machine:", ovkit.resolve_device(env={}, log=False).available)
        print(f"simulated {profile}:", sim.available_devices)
        """,
    ),
    md(
        "default-md",
        """
        ## 1. Default and this machine's setting

        With the variable unset the backend picks `CPU`. Then the value of the `device` parameter is
        resolved on this machine: the log lines below are exactly what llama.cpp writes to stderr.
        """,
    ),
    code(
        "default",
        """
        unset = ovkit.resolve_device(env={})
        print("unset ->", unset.device, "| fell back:", unset.fell_back)
        chosen = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": device})
        print(f"GGML_OPENVINO_DEVICE={device!r} -> {chosen.device}", end=" | ")
        print(f"fell back: {chosen.fell_back} | hint: {chosen.hint}")
        """,
    ),
    md(
        "fallback-md",
        """
        ## 2. Exact match, fallback and near misses

        Every value in `tries`, resolved on the simulated machine and on the laptop profile
        (`CPU`, `GPU`, `NPU`). Look at the `GPU` row: on the workstation, where only `GPU.0` and
        `GPU.1` exist, it falls back to the CPU (no alias; with an iGPU and a dGPU, `GPU.0` is often
        the wrong one); on the laptop it is exact. `gpu` is never accepted: ids are case-sensitive.
        """,
    ),
    code(
        "near-misses",
        """
        laptop = ovkit.SimulatedCore("laptop")
        rows = []
        for value in tries:
            row = {"GGML_OPENVINO_DEVICE": repr(value)}
            for machine, c in [(profile, sim), ("laptop", laptop)]:
                s = ovkit.resolve_device(c, env={"GGML_OPENVINO_DEVICE": value}, log=False)
                row[f"{machine}: selected"] = s.device + (" (fallback)" if s.fell_back else "")
                row[f"{machine}: hint"] = s.hint or ""
            rows.append(row)
        near = pd.DataFrame(rows).set_index("GGML_OPENVINO_DEVICE")
        with pd.option_context("display.max_colwidth", 80):
            display(near)
        """,
    ),
    code(
        "gpu-on-workstation",
        """
        # The warning line as the backend logs it, then the hint ovkit adds (INFO level):
        s = ovkit.resolve_device(sim, env={"GGML_OPENVINO_DEVICE": "GPU"})
        print("messages:", s.messages)
        print("hint:", s.hint)
        """,
    ),
    md(
        "context-md",
        """
        ## 3. Switching explicitly

        Exploring several devices means switching the selection on purpose:
        `ovkit.using_device(name)` sets `GGML_OPENVINO_DEVICE` for a block and re-resolves; the
        variable is restored afterwards.
        """,
    ),
    code(
        "using-device",
        """
        before = os.environ.get("GGML_OPENVINO_DEVICE")
        for name in ovkit.devices.physical_device_ids(sim):
            with ovkit.using_device(name, sim) as s:
                print(f"{name:8} -> selected {s.device:6} class {s.device_class}")
        print("restored:", os.environ.get("GGML_OPENVINO_DEVICE") == before)
        """,
    ),
    md(
        "selector-md",
        """
        ## 4. The selector widget

        Choosing in the dropdown (or typing any value, e.g. `gpu`) sets `GGML_OPENVINO_DEVICE` in
        this kernel's environment and re-resolves at once: the status line shows the resolved
        device, the fallback warning and the hint, and the device table below highlights the
        selected row. Below, the same is done from code: first the near miss `GPU`, then `GPU.1`.
        """,
    ),
    code(
        "selector",
        """
        from ovkit.widgets import DeviceSelector, DeviceTable

        saved = os.environ.get("GGML_OPENVINO_DEVICE")
        sim_table = DeviceTable(sim, auto_refresh=False)
        selector = DeviceSelector(sim, on_change=lambda state: sim_table.refresh())
        display(selector, sim_table)
        """,
    ),
    code(
        "selector-steps",
        """
        gpu_ids = [n for n in ovkit.devices.physical_device_ids(sim) if n.startswith("GPU")]
        for value in ["GPU", gpu_ids[-1] if gpu_ids else "CPU"]:
            selector.select(value)
            print(selector)
            print("  os.environ:", os.environ.get("GGML_OPENVINO_DEVICE"), "| highlighted:", sim_table.selected)
        """,
    ),
    md(
        "supports-md",
        """
        ## 5. `supports_op` is False on every non-selected device

        All devices are listed, but only the selected one runs ops: the backend object answers
        `supports_op(device, op)` with False, and a reason, for every other device, so ggml's
        scheduler never places work there. On the selected device the op-support policy decides,
        by device *class*. The op below is a `GET_ROWS` from a bf16 table (an embedding lookup):
        the policy accepts it on the CPU class and rejects it on the GPU class.
        """,
    ),
    code(
        "supports-op",
        """
        from ovkit.ops.policy import OpInfo

        table = OpInfo.leaf("bf16", (64, 32), name="token_embd")  # ggml ne order: 32 rows of 64
        rows = OpInfo.leaf("i32", (4,), name="inp_tokens")
        get_rows = OpInfo("GET_ROWS", "f32", (64, 4), srcs=(table, rows))

        physical = ovkit.devices.physical_device_ids(sim)
        matrix, reasons = {}, {}
        for selected in physical:
            selection = ovkit.resolve_device(sim, env={"GGML_OPENVINO_DEVICE": selected}, log=False)
            backend = ovkit.Backend(selection, sim)
            decisions = {name: backend.supports_op(name, get_rows) for name in physical}
            matrix[f"selected {selected}"] = {n: "yes" if d else "no" for n, d in decisions.items()}
            reasons[selected] = decisions
        display(pd.DataFrame(matrix).T.rename_axis(columns="supports_op(device, GET_ROWS bf16)"))
        gpu = next((n for n in reversed(physical) if n.startswith("GPU")), physical[-1])
        for name, decision in reasons[gpu].items():
            print(f"selected {gpu}, asked {name:6} -> {decision.supported}: {decision.reason}")
        """,
    ),
    md(
        "result-md",
        """
        ## Result

        What each value of `GGML_OPENVINO_DEVICE` selects on the simulated machine:
        """,
    ),
    code(
        "result",
        """
        for value in tries:
            s = ovkit.resolve_device(sim, env={"GGML_OPENVINO_DEVICE": value}, log=False)
            print(f"{value!r:10} -> {s.device}" + (" (fallback)" if s.fell_back else ""))
        # The selector changed this kernel's environment; put it back as it was.
        ovkit.widgets.selector.set_device_env(saved)
        """,
    ),
]

NOTEBOOKS: dict[str, list[Cell]] = {
    "01-devices": NB01,
    "02-selecting-a-device": NB02,
}


def build(cells: list[Cell]) -> nbformat.NotebookNode:
    """A notebook without outputs from ``cells``."""
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for c in cells:
        cell = new_markdown_cell(c.source) if c.kind == "markdown" else new_code_cell(c.source)
        cell.id = c.id
        if c.tags:
            cell.metadata["tags"] = list(c.tags)
        nb.cells.append(cell)
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate cell ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    nbformat.validate(nb)
    return nb


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = HERE / f"{name}.ipynb"
        text = nbformat.writes(build(cells)) + "\n"
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print("wrote", path.relative_to(HERE.parent))
    if stale:
        print("out of date (run python notebooks/_build.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
