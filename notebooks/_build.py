"""Writes the walkthrough notebooks (``notebooks/0N-*.ipynb``) from the cell lists below.

The ``.ipynb`` files are what users open and what CI executes; this script is only the easiest
way to keep them consistent (no outputs, a ``parameters`` cell first, stable cell ids that the
tests look up).  ``python notebooks/_build.py`` rewrites them; ``--check`` exits 1 when a
committed notebook differs from what the script would write.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
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
        "running-md",
        """
        For running ops this means: a graph runs on the selected device. To try another device,
        switch the selection explicitly; `compute` without a `device` follows it, and the compiled
        graphs are cached per device.
        """,
    ),
    code(
        "running",
        """
        import numpy as np

        from ovkit import engine
        from ovkit.graph import Graph

        g = Graph()
        a = g.input("a", (2, 8))
        y = g.gelu(a)
        for name in gpu_ids or ["CPU"]:
            with ovkit.using_device(name, sim) as s:
                out = g.compute(y, {"a": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)}, core=sim)
                print(f"selected {s.device}: gelu ran, result {out.shape}")
        display(engine.get_engine(sim).table()[["device", "inputs", "runs"]])
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

# --------------------------------------------------------------------------------------------
# 03-compute-graphs
# --------------------------------------------------------------------------------------------
NB03 = [
    md(
        "title",
        """
        # 03 · Compute graphs: ggml's builder API on an OpenVINO device

        `ovkit.graph.Graph` mirrors ggml's builder functions one to one (`ggml_mul_mat(ctx, a, b)`
        is `g.mul_mat(a, b)`), with shapes in **numpy order** (numpy `(ne1, ne0)` is ggml
        `ne = [ne0, ne1]`). A graph runs on the selected device through OpenVINO, or in reference
        mode (numpy, ggml's semantics). This notebook builds graphs, checks them against the
        reference and against ggml itself, looks at per-node timings and the compiled-graph cache,
        and runs a small transformer block with a stateful KV cache.
        """,
    ),
    params(
        """
        device = ""  # empty for the device GGML_OPENVINO_DEVICE selects, or an id such as GPU
        profile = None  # None for this machine, or a simulated profile such as laptop
        n_tokens = 6  # prompt length of the transformer block
        d_model = 64
        n_heads = 4
        n_kv_heads = 2  # grouped-query attention: n_heads / n_kv_heads queries share one K/V head
        d_ff = 128
        n_ctx = 32  # KV cache rows
        n_decode = 4  # tokens decoded one at a time after the prompt
        seed = 0
        """
    ),
    code(
        "setup",
        """
        %matplotlib inline
        import time

        import matplotlib.pyplot as plt
        import numpy as np
        import openvino as ov
        import pandas as pd

        import ovkit
        from ovkit import engine, oracle
        from ovkit.graph import Graph, GraphError, UnsupportedOpError

        core = ovkit.SimulatedCore(profile) if profile else ov.Core()
        env = {"GGML_OPENVINO_DEVICE": device} if device else None
        dev = ovkit.resolve_device(core, env=env, log=False).device
        rng = np.random.default_rng(seed)
        print("running on", dev, f"(simulated {profile}, computed on this CPU)" if profile else "")
        """,
    ),
    md(
        "first-md",
        """
        ## 1. A first graph

        `g.mul_mat(a, b)` is ggml's matrix product: the result is `b @ a.T` (both operands share
        their innermost dimension `k`). Each result is a `Tensor` that knows its ggml op, its shape
        in both orders and its type; nothing runs until `compute`.
        """,
    ),
    code(
        "first-graph",
        """
        g = Graph()
        a = g.input("a", (4, 8))  # 4 rows of k=8: ggml ne [8, 4]
        b = g.input("b", (3, 8))
        bias = g.input("bias", (4,))
        y = g.add(g.mul_mat(a, b), bias)
        for t in (a, y.srcs[0], y):
            print(f"{t.op:8} shape {t.shape}  ne {t.ne}  {t.dtype}")

        inputs = {name: rng.standard_normal(t.shape).astype(np.float32) for name, t in
                  {"a": a, "b": b, "bias": bias}.items()}
        out = g.compute(y, inputs, device=dev, core=core)
        print(out)
        """,
    ),
    md(
        "check-md",
        """
        ## 2. Checking against the reference and against ggml

        Three answers for the same graph: OpenVINO on the device, ovkit's numpy reference of
        ggml's semantics (`mode="reference"`), and ggml's own CPU backend through ggml-python
        (when installed). The error measure is test-backend-ops' normalized mean squared error;
        its default threshold is 1e-7.
        """,
    ),
    code(
        "check",
        """
        expected = inputs["b"] @ inputs["a"].T + inputs["bias"]
        answers = {"numpy b @ a.T + bias": expected, "ovkit reference": g.compute(y, inputs, mode="reference")}
        if oracle.ggml_available():
            answers["ggml CPU backend"] = oracle.ggml_call("add", oracle.ggml_call("mul_mat", inputs["a"], inputs["b"]), inputs["bias"])
        check = pd.DataFrame(
            [{"compared with": k, "NMSE": oracle.nmse(out, v), "ok (< 1e-7)": oracle.nmse(out, v) < 1e-7}
             for k, v in answers.items()]
        ).set_index("compared with")
        display(check)
        """,
    ),
    md(
        "errors-md",
        """
        ## 3. Errors at build time, and ops the device rejects

        A shape or type ggml would reject raises `GraphError` when the node is built, naming the op,
        the operand and what was expected. An op the device's support policy rejects raises
        `UnsupportedOpError` with the policy's reason when it is run there; reference mode still
        computes it. Here: a per-channel division, which the backend keeps off the GPU class
        (a fused GEMM there yields inf).
        """,
    ),
    code(
        "errors",
        """
        try:
            g.mul_mat(a, g.input("wrong_k", (3, 7)))
        except GraphError as exc:
            print("GraphError:", exc)

        g2 = Graph()
        acts = g2.input("acts", (5, 10))
        per_channel = g2.input("per_channel", (10,))  # one divisor per column, broadcast over rows
        ratio = g2.div(acts, per_channel)
        feed = {"acts": rng.standard_normal((5, 10)).astype(np.float32), "per_channel": np.full(10, 2.0, np.float32)}
        laptop = ovkit.SimulatedCore("laptop")
        for where, c in [("CPU", core), ("GPU", laptop)]:
            try:
                got = g2.compute(ratio, feed, device=where, core=c)
                print(f"div on {where}: ok, shape {got.shape}")
            except UnsupportedOpError as exc:
                print(f"div on {where}: UnsupportedOpError: {exc}")
        print("reference mode:", g2.compute(ratio, feed, mode="reference").shape)
        """,
    ),
    md(
        "cache-md",
        """
        ## 4. The compiled-graph cache

        Compiling is the expensive step. The engine keys compiled models by graph *structure*
        (ops, shapes, types, parameters, device, compile configuration), so running the same
        structure again, even from a freshly built graph, is a cache hit that does not compile.
        """,
    ),
    code(
        "cache",
        """
        eng = engine.get_engine(core)
        eng.reset_stats()


        def run_once(n):
            gg = Graph()
            x = gg.input("x", (n, 64))
            w = gg.constant(np.ones((64, 64), np.float32))
            t0 = time.perf_counter()
            gg.compute(gg.mul_mat(w, x), {"x": np.ones((n, 64), np.float32)}, device=dev, core=core)
            return (time.perf_counter() - t0) * 1e3


        timings = {"first run (n=8)": run_once(8), "same structure, new graph": run_once(8), "new shape (n=16)": run_once(16)}
        for what, ms in timings.items():
            print(f"{what:28} {ms:8.2f} ms")
        stats = eng.stats()
        print(stats)
        display(eng.table())
        """,
    ),
    md(
        "profile-md",
        """
        ## 5. Per-node profiling

        With profiling on (OpenVINO's `PERF_COUNT`, upstream's `GGML_OPENVINO_PROFILING`), each run
        reports how long every node of the compiled model took. Profiling is part of the compile
        configuration, so it compiles a separate entry; with it off there are no numbers at all.
        """,
    ),
    code(
        "profile",
        """
        gp = Graph()
        xp = gp.input("x", (32, 256))
        wp = gp.constant(rng.standard_normal((256, 256)).astype(np.float32))
        yp = gp.soft_max(gp.mul_mat(wp, gp.rms_norm(xp, 1e-6)))
        profiled = engine.RunConfig(inference_precision="f32", profiling=True)
        engine.compute_graph(gp, [yp], {"x": rng.standard_normal((32, 256)).astype(np.float32)}, dev, core=core, config=profiled)
        prof = eng.last_profile()
        display(prof.head(12))
        """,
    ),
    code(
        "profile-chart",
        """
        time_col = next(c for c in prof.columns if "real" in c)
        top = prof[prof[time_col] > 0].sort_values(time_col).tail(10)
        label_col = next(c for c in ("node", "name", "node_name") if c in prof.columns)
        labels = top[label_col].astype(str) + (" (" + top["type"].astype(str) + ")" if "type" in top else "")
        fig, ax = plt.subplots(figsize=(6, 2.8))
        ax.barh(labels, top[time_col])
        ax.set_xlabel(time_col)
        ax.set_title(f"per-node time on {dev}")
        fig.tight_layout()
        plt.show()
        """,
    ),
    md(
        "block-md",
        """
        ## 6. A transformer block with a stateful KV cache

        One decoder layer as llama.cpp builds it: RMS norm, Q/K/V projections, ROPE (NEOX), the
        new K/V rows written into the cache with `set_rows`, flash attention over the whole cache
        with a causal mask (grouped-query: `n_heads` query heads share `n_kv_heads` K/V heads),
        the output projection, and a SwiGLU feed-forward, each with a residual add. K and V enter
        attention as `PERMUTE <- VIEW` of their base tensors, the pattern the backend's
        flash-attention gate requires.
        """,
    ),
    code(
        "block-build",
        """
        head_dim = d_model // n_heads
        kv_dim = n_kv_heads * head_dim
        shapes = {"wq": (d_model, d_model), "wk": (kv_dim, d_model), "wv": (kv_dim, d_model),
                  "wo": (d_model, d_model), "w_gate": (d_ff, d_model), "w_up": (d_ff, d_model),
                  "w_down": (d_model, d_ff)}
        weights = {n: (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for n, s in shapes.items()}
        weights |= {n: (1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32) for n in ("attn_norm", "ffn_norm")}
        ROPE = (head_dim, 2, n_ctx, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)  # n_dims, mode NEOX, n_ctx_orig, freq_base, ...


        def transformer_block(n):
            \"\"\"One layer for n new tokens: (graph, output, next K cache, next V cache).\"\"\"
            g = Graph()
            x = g.input("x", (n, d_model))
            pos = g.input("pos", (n,), "i32")  # token positions, for ROPE
            slot = g.input("slot", (n,), "i64")  # cache rows the new K/V go to
            mask = g.input("mask", (n, n_ctx), "f16")  # causal mask over the whole cache
            cache_k = g.input("cache_k", (n_ctx, kv_dim))
            cache_v = g.input("cache_v", (n_ctx, kv_dim))
            w = {name: g.constant(value, name=name) for name, value in weights.items()}

            h = g.mul(g.rms_norm(x, 1e-5), w["attn_norm"])
            q = g.rope_ext(g.reshape_3d(g.mul_mat(w["wq"], h), head_dim, n_heads, n), pos, None, *ROPE)
            k = g.rope_ext(g.reshape_3d(g.mul_mat(w["wk"], h), head_dim, n_kv_heads, n), pos, None, *ROPE)
            next_k = g.set_rows(cache_k, g.reshape_2d(k, kv_dim, n), slot)
            next_v = g.set_rows(cache_v, g.mul_mat(w["wv"], h), slot)

            def heads(t, n_head, rows):  # VIEW as [rows, n_head, head_dim], PERMUTE to [n_head, rows, head_dim]
                es = t.type_size
                return g.permute(g.view_3d(t, head_dim, n_head, rows, head_dim * es, head_dim * n_head * es, 0), 0, 2, 1, 3)

            att = g.flash_attn_ext(heads(q, n_heads, n), heads(next_k, n_kv_heads, n_ctx),
                                   heads(next_v, n_kv_heads, n_ctx), mask, 1 / np.sqrt(head_dim), 0.0, 0.0)
            x1 = g.add(x, g.mul_mat(w["wo"], g.reshape_2d(att, d_model, n)))
            h2 = g.mul(g.rms_norm(x1, 1e-5), w["ffn_norm"])
            ffn = g.mul_mat(w["w_down"], g.swiglu_split(g.mul_mat(w["w_gate"], h2), g.mul_mat(w["w_up"], h2)))
            return g, g.add(x1, ffn), next_k, next_v


        def positions(start, n):
            \"\"\"Inputs for tokens start..start+n-1: positions, cache rows and the causal mask.\"\"\"
            mask = np.full((n, n_ctx), -np.inf, np.float16)
            for i in range(n):
                mask[i, : start + i + 1] = 0
            return {"pos": np.arange(start, start + n, dtype=np.int32),
                    "slot": np.arange(start, start + n, dtype=np.int64), "mask": mask}


        n_total = n_tokens + n_decode
        tokens = rng.standard_normal((n_total, d_model)).astype(np.float32)
        empty = {"cache_k": np.zeros((n_ctx, kv_dim), np.float32), "cache_v": np.zeros((n_ctx, kv_dim), np.float32)}
        g_full, out_full, _, _ = transformer_block(n_total)
        print(f"{len(g_full.nodes)} nodes; ops:", sorted({t.op for t in g_full.nodes if not t.is_leaf}))
        """,
    ),
    code(
        "block-check",
        """
        # The whole sequence at once (no state): device vs ovkit's reference.
        full_inputs = {"x": tokens, **positions(0, n_total), **empty}
        full = g_full.compute(out_full, full_inputs, device=dev, core=core)
        full_ref = g_full.compute(out_full, full_inputs, mode="reference")
        block_nmse = oracle.nmse(full, full_ref)
        print(f"block output {full.shape}, NMSE vs reference {block_nmse:.2e}")
        """,
    ),
    md(
        "state-md",
        """
        Now the same tokens the way a llama.cpp server sees them: the prompt in one call, then one
        token per call. The K/V caches are *state*: with stateful execution they live inside the
        compiled model as OpenVINO variables (ReadValue/Assign) and grow across calls; only the new
        token goes in. The state can be read, set (the prompt's cache is handed to the decode
        graph) and reset. On the NPU class stateful execution is forced off, as upstream does.
        """,
    ),
    code(
        "block-stateful",
        """
        states = lambda k, v: {"cache_k": k, "cache_v": v}  # noqa: E731
        g_pre, out_pre, k_pre, v_pre = transformer_block(n_tokens)
        prefill = engine.graph_session(g_pre, out_pre, states(k_pre, v_pre), dev, core=core, stateful=True)
        g_dec, out_dec, k_dec, v_dec = transformer_block(1)
        decode = engine.graph_session(g_dec, out_dec, states(k_dec, v_dec), dev, core=core, stateful=True)
        print("stateful execution:", prefill.stateful)

        t0 = time.perf_counter()
        outputs = [prefill.compute({"x": tokens[:n_tokens], **positions(0, n_tokens)})[0]]
        t_prefill = time.perf_counter() - t0
        for name in ("cache_k", "cache_v"):
            decode.set_state(name, prefill.state(name))
        filled = [int((np.abs(decode.state("cache_k")).sum(axis=1) > 0).sum())]
        t0 = time.perf_counter()
        for i in range(n_tokens, n_total):
            outputs.append(decode.compute({"x": tokens[i : i + 1], **positions(i, 1)})[0])
            filled.append(int((np.abs(decode.state("cache_k")).sum(axis=1) > 0).sum()))
        t_decode = time.perf_counter() - t0
        stepwise = np.vstack(outputs)
        decode_nmse = oracle.nmse(stepwise, full)
        print("cache rows filled after prompt and each decoded token:", filled)
        print(f"prefill {n_tokens / t_prefill:,.0f} tokens/s, decode {n_decode / t_decode:,.0f} tokens/s")
        print(f"prompt + {n_decode} decoded tokens vs the whole sequence at once: NMSE {decode_nmse:.2e}")
        """,
    ),
    code(
        "cache-heatmap",
        """
        fig, ax = plt.subplots(figsize=(6, 2.6))
        ax.imshow(np.abs(decode.state("cache_k")).T, aspect="auto", cmap="viridis")
        ax.set_xlabel("KV cache row (token position)")
        ax.set_ylabel("K channel")
        ax.set_title(f"K cache after {n_total} tokens: rows {n_total}..{n_ctx - 1} still empty")
        fig.tight_layout()
        plt.show()
        decode.reset_state()
        print("after reset_state: cache_k all zero:", not decode.state("cache_k").any())
        """,
    ),
    md(
        "result-md",
        """
        ## Result

        Every check of this notebook in one table: the device agrees with the reference and with
        ggml, a second run of a structure is a cache hit, and decoding with the stateful KV cache
        reproduces the whole-sequence result.
        """,
    ),
    code(
        "result",
        """
        summary = pd.DataFrame(
            [
                {"check": "mul_mat + add vs numpy", "value": oracle.nmse(out, expected), "pass": oracle.nmse(out, expected) < 1e-7},
                {"check": "transformer block vs reference (NMSE)", "value": block_nmse, "pass": block_nmse < 1e-5},
                {"check": "stateful decode vs whole sequence (NMSE)", "value": decode_nmse, "pass": decode_nmse < 1e-5},
                {"check": "cache hits in section 4", "value": stats.hits, "pass": stats.hits >= 1},
            ]
        ).set_index("check")
        print(summary.to_string())
        print("all pass:", bool(summary["pass"].all()))
        """,
    ),
]

# --------------------------------------------------------------------------------------------
# 04-memory-and-allocations
# --------------------------------------------------------------------------------------------
NB04 = [
    md(
        "title",
        """
        # 04 · Memory and allocations

        Where do a model's bytes live? This notebook walks through ovkit's buffer types and
        buffers (as the backend's `<device>` / `<device>_HOST` buffer types), the allocation
        record every buffer leaves, a live allocation chart while graphs run on a device, and how
        much room quantized weights need on each device class.

        It runs on a **simulated** laptop by default (`profile`), whose GPU counts the constants of
        every model compiled for it as allocations, so the memory views move. With a real GPU:
        `papermill 04-memory-and-allocations.ipynb out.ipynb -p profile None -p device GPU`.
        """,
    ),
    params(
        """
        device = "GPU"  # where the graphs of section 3 run
        profile = "laptop"  # simulated machine, or None for this machine
        d = 1024  # weight matrices are d x d f32, 4 MiB each at 1024
        n_layers = 4  # graphs compiled one after another in section 3
        live_interval_s = 0.25  # refresh interval of the live charts
        quant_rows = 64  # quantized weights of section 4: quant_rows x quant_k
        quant_k = 512
        release_rows = 2048  # weight released in section 5: release_rows x release_k f16
        release_k = 4096
        seed = 0
        """
    ),
    code(
        "setup",
        """
        %matplotlib inline
        import gc
        import time

        import matplotlib.pyplot as plt
        import numpy as np
        import openvino as ov
        import pandas as pd
        import psutil

        import ovkit
        from ovkit import buffers, engine, oracle, quant
        from ovkit.graph import Graph
        from ovkit.memory import MIB

        core = ovkit.SimulatedCore(profile) if profile else ov.Core()
        env = {"GGML_OPENVINO_DEVICE": device}
        dev = ovkit.resolve_device(core, env=env, log=False).device
        rng = np.random.default_rng(seed)
        print("graphs run on", dev, f"of the simulated {profile}" if profile else "of this machine")
        """,
    ),
    md(
        "types-md",
        """
        ## 1. Buffer types

        Each device has two buffer types: `<device>` (memory the device owns) and `<device>_HOST`
        (host memory it reads directly). The kind is stored in the type, never guessed from its
        name, and a registry says whether a buffer type is ovkit's at all: a look-alike with the
        same name is not.
        """,
    ),
    code(
        "buffer-types",
        """
        rows = []
        for name in ovkit.devices.physical_device_ids(core):
            for bt in (buffers.buffer_type(name), buffers.host_buffer_type(name)):
                rows.append({"buffer type": bt.name, "device": bt.device, "kind": str(bt.kind),
                             "alignment": bt.alignment, "max size": bt.max_size,
                             "ovkit's": buffers.is_ovkit_buffer_type(bt)})
        display(pd.DataFrame(rows).set_index("buffer type"))
        look_alike = buffers.BufferType(dev, dev, buffers.BufferKind.DEVICE)
        print(f"look-alike {look_alike.name!r}: ovkit's = {buffers.is_ovkit_buffer_type(look_alike)}, "
              f"kind = {buffers.buffer_type_kind(look_alike)}")
        """,
    ),
    md(
        "buffers-md",
        """
        ## 2. Buffers, tensors and the allocation record

        A buffer owns exactly one storage (zero-filled host memory, or an OpenVINO remote tensor
        for a GPU-class KV cache; a *simulated* GPU uses host memory and says so). Tensors are
        placed at aligned offsets; a view shares its source's memory. Every allocation and
        release is recorded with its device, buffer type and usage.
        """,
    ),
    code(
        "buffers",
        """
        weights = buffers.alloc_buffer(dev, 3 * d * d * 4, "weights", core=core)
        wq = weights.place("wq", (d, d))
        weights.set_tensor(wq, rng.standard_normal((d, d)).astype(np.float32))
        first_row = weights.view(wq, "wq.row0", shape=(d,))
        print("wq at offset", wq.offset, "| view shares memory:", np.shares_memory(first_row.numpy(), wq.numpy()))
        kv = buffers.alloc_buffer(dev, 2 * 256 * d * 4, "kv_cache", core=core)
        compute = buffers.alloc_buffer(dev, d * d * 4, "compute", core=core, host=True)
        display(buffers.current_allocations()[["buffer_id", "device", "buffer_type", "kind", "usage", "bytes", "storage"]])
        """,
    ),
    md(
        "live-md",
        """
        ## 3. The live allocation charts while graphs run

        The charts below refresh on a background thread: used vs free per device, the GPU's
        `GPU_MEMORY_STATISTICS` by allocation type, ovkit's own buffers by usage, and the rolling
        time series of used memory. While they run, the next cell compiles and runs `n_layers`
        graphs, each with a new `d x d` weight: compiled models keep their weights on the device,
        so used memory climbs; clearing the compiled-graph cache returns it. (On the CPU the
        device figure never moves: the backend reports host RAM with free = total. The process's
        resident memory, in the last column, is where the CPU's share shows.)
        """,
    ),
    code(
        "live-charts",
        """
        from ovkit.widgets import AllocationCharts

        charts = AllocationCharts(core, interval=live_interval_s, env=env)
        display(charts)
        """,
    ),
    code(
        "run-graphs",
        """
        eng = engine.get_engine(core)
        used = []  # (step, device used MiB, process resident MiB)


        def device_used_mib():
            return next(x.used_bytes for x in ovkit.list_devices(core) if x.name == dev) / MIB


        def rss_mib():
            return psutil.Process().memory_info().rss / MIB


        used.append(("start", device_used_mib(), rss_mib()))
        for layer in range(n_layers):
            g = Graph()
            x = g.input("x", (8, d))
            w = g.constant(rng.standard_normal((d, d)).astype(np.float32), name=f"blk.{layer}.w")
            g.compute(g.mul_mat(w, x), {"x": np.ones((8, d), np.float32)}, device=dev, core=core)
            charts.refresh()
            used.append((f"layer {layer}", device_used_mib(), rss_mib()))
            time.sleep(live_interval_s)
        charts.refresher.stop()  # keep the picture, stop the thread (its own garbage collections
        # would make the gc.collect() below return early: CPython runs one collection at a time)
        eng.clear()
        gc.collect()
        charts.refresh()
        used.append(("cache cleared", device_used_mib(), rss_mib()))
        weights.free()
        kv.free()
        compute.free()
        charts.refresh()
        steps = pd.DataFrame(used, columns=["step", f"{dev} used MiB", "process RSS MiB"]).set_index("step")
        print(steps.to_string())
        """,
    ),
    code(
        "history-chart",
        """
        history = buffers.allocation_history()
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 2.8))
        steps.iloc[:, :1].plot(ax=ax1, marker="o", legend=False)
        ax1.set_title(f"{dev}: used memory (device's own figure)")
        ax1.set_ylabel("MiB")
        ax1.tick_params(axis="x", labelrotation=30)
        for name, part in history.groupby("device"):
            ax2.step(part["time"] - history["time"].min(), part["live_bytes"] / MIB, where="post", label=name)
        ax2.set_title("ovkit buffers: live bytes (allocation record)")
        ax2.set_xlabel("s")
        ax2.legend()
        fig.tight_layout()
        plt.show()
        """,
    ),
    md(
        "quant-md",
        """
        ## 4. Quantized weights

        ggml stores weights in blocks (e.g. Q4_0: 32 weights share one f16 scale). ovkit keeps them
        quantized on the device: the blocks become integer constants plus scales and an OpenVINO
        decompression subgraph, and `mul_mat` consumes them directly. Below, each type's size and
        the error of `x @ W.T` on the device against the dequantized weights (and against ggml's
        own quantized kernels when ggml-python is installed).
        """,
    ),
    code(
        "quant",
        """
        w = rng.standard_normal((quant_rows, quant_k)).astype(np.float32)
        x = rng.standard_normal((4, quant_k)).astype(np.float32)
        rows = []
        for qtype in quant.QUANT_TYPES:
            qw = quant.quantize(qtype, w)
            g = Graph()
            xin = g.input("x", x.shape)
            got = g.compute(g.mul_mat(g.constant(qw), xin), {"x": x}, device=dev, core=core)
            row = {"type": qtype, "bytes": qw.nbytes, "bits/weight": 8 * qw.nbytes / w.size,
                   "NMSE vs dequantized": oracle.nmse(got, x @ qw.dequantize().T),
                   "quantization error": oracle.nmse(qw.dequantize(), w)}
            if oracle.ggml_available():
                row["NMSE vs ggml"] = oracle.nmse(got, oracle.ggml_mul_mat_quant(qtype, w, x))
            rows.append(row)
        qtable = pd.DataFrame(rows).set_index("type")
        with pd.option_context("display.float_format", "{:.3g}".format):
            display(qtable)
        """,
    ),
    md(
        "requant-md",
        """
        Not every type is kept as is: the backend's requantization policy turns some weights into
        another layout per device class (embeddings and the output head become per-row i8; the NPU
        takes 4-bit symmetric weights in groups of 128). The bytes a weight needs therefore depend
        on where it goes:
        """,
    ),
    code(
        "requant",
        """
        fit = []
        for qtype in quant.QUANT_TYPES:
            for cls in ("CPU", "GPU", "NPU"):
                target = quant.requant_type("blk.0.ffn_up.weight", cls, qtype)
                fit.append({"type": qtype, "device class": cls, "becomes": str(target),
                            "bytes": quant.requant_bytes(target, qtype, (quant_rows, quant_k))})
        fit = pd.DataFrame(fit).pivot(index="type", columns="device class", values="bytes")
        fig, ax = plt.subplots(figsize=(7, 2.8))
        fit.plot.bar(ax=ax)
        ax.axhline(w.nbytes, color="gray", ls="--", label="f32")
        ax.set_ylabel(f"bytes for {quant_rows}x{quant_k}")
        ax.set_title("a blk.0.ffn_up.weight after the requantization policy")
        ax.legend()
        fig.tight_layout()
        plt.show()
        display(quant.requant_table())
        """,
    ),
    md(
        "release-md",
        """
        ## 5. Weight release

        Once a device has compiled a model, the runtime holds its own copy of the weights, and the
        host copy in ggml's weight buffers is dead weight. With `GGML_OPENVINO_RELEASE_WEIGHTS=1`
        (or `GGML_OPENVINO_MEMORY_OPTIMIZE=1` on the GPU class) the backend gives those pages back
        to the OS on the **first cache hit** (`madvise(MADV_DONTNEED)`) and logs upstream's line.
        After that nothing new can be compiled from those weights: a recompile raises upstream's
        error instead of computing on zeros. Here on the CPU, whose plugin repacks matmul weights
        into its own copy, with `release_rows x release_k` f16 weights in an ovkit host buffer.
        """,
    ),
    code(
        "release",
        """
        import openvino.opset13 as ops

        from ovkit import weight_release
        from ovkit.runtime import default_core

        weight_release.reset()
        m, k = release_rows, release_k
        wbuf = buffers.alloc_buffer("CPU", m * k * 2, "weights", host=True)
        wt = wbuf.place("blk.0.ffn_up.weight", (m, k), "f16")
        wbuf.set_weight(wt, (rng.standard_normal((m, k)) * 0.05).astype(np.float16))  # registers the buffer
        print(f"registered: {weight_release.REGISTRY.count} buffer, {weight_release.REGISTRY.registered_bytes / MIB:.0f} MiB")
        xin = ops.parameter([1, k], ov.Type.f32, name="x")
        weight = ops.convert(ops.constant(wt.numpy(), shared_memory=True), "f32")  # zero-copy, as upstream
        compiled = default_core().compile_model(ov.Model([ops.matmul(xin, weight, False, True)], [xin]), "CPU")
        request = compiled.create_infer_request()
        xr = rng.standard_normal((1, k)).astype(np.float32)
        before = np.array(request.infer({0: xr})[0])

        config = ovkit.read_config({"GGML_OPENVINO_RELEASE_WEIGHTS": "1"})
        rss_before = rss_mib()
        released = weight_release.on_cache_hit("CPU", config)  # what the engine does on the first cache hit
        rss_after = rss_mib()
        print(released.message)
        print(f"resident memory {rss_before:.0f} -> {rss_after:.0f} MiB: {rss_before - rss_after:.0f} MiB back to the OS")
        print("host copy reads as zeros now:", not wbuf.data.any())
        print("results unchanged:", np.array_equal(np.array(request.infer({0: xr})[0]), before))
        try:
            weight_release.before_compile("CPU")
        except weight_release.WeightsReleasedError as exc:
            print("recompile refused:", exc)
        wbuf.free()
        weight_release.reset()  # notebook only: a real backend process has no way back
        """,
    ),
    md(
        "result-md",
        """
        ## Result

        Used memory on the device rose with every compiled graph and fell back when the cache was
        cleared; every buffer allocated here was released; quantized weights match their
        dequantized values on the device; released host weights really left the process.
        """,
    ),
    code(
        "result",
        """
        rise = steps.iloc[n_layers, 0] - steps.iloc[0, 0]
        print(f"{dev} used memory: +{rise:.1f} MiB after {n_layers} graphs, back to {steps.iloc[-1, 0]:.1f} MiB after clearing")
        print("ovkit buffers still live:", len(buffers.current_allocations()))
        worst = qtable["NMSE vs dequantized"].max()
        print(f"quantized mul_mat on {dev}: worst NMSE vs dequantized weights {worst:.1e} over {len(qtable)} types")
        print(f"weight release: {released.released_bytes / MIB:.0f} MiB released, RSS fell by {rss_before - rss_after:.0f} MiB")
        """,
    ),
]

# --------------------------------------------------------------------------------------------
# 05-op-coverage
# --------------------------------------------------------------------------------------------
NB05 = [
    md(
        "title",
        """
        # 05 · Op coverage: what runs where, how exactly, how fast

        The backend registers a fixed set of ggml ops, and its support policy rejects some cases
        per type, shape or device class. This notebook shows the op table, then runs `test-ops`
        (ovkit's `test-backend-ops`) on this machine's device and on the GPU and NPU classes of a
        simulated machine, draws the result as a heatmap op × type × device class, lists every
        rejection with its reason, and measures time per op.

        On simulated devices the policy is the real one for their class; the arithmetic runs on
        this CPU.
        """,
    ),
    params(
        """
        device = "CPU"  # this machine's device to test
        profile = "laptop"  # simulated machine providing the GPU and NPU classes
        ops = None  # None for every op, or a list such as ["ADD", "MUL_MAT"]
        reference = "auto"  # ggml when ggml-python is installed, else numpy
        perf_max_mib = 80  # perf cases with at most this many MiB of inputs
        perf_max_gflop = 2.0  # and at most this much work
        """
    ),
    code(
        "setup",
        """
        %matplotlib inline
        import matplotlib.pyplot as plt
        import numpy as np
        import pandas as pd
        from matplotlib.colors import ListedColormap
        from matplotlib.patches import Patch

        import ovkit
        from ovkit import oracle, testops
        from ovkit.devices import device_class, physical_device_ids
        from ovkit.ops import policy

        sim = ovkit.SimulatedCore(profile)
        targets = {"CPU": (None, device)}  # device class -> (core, device id)
        for name in physical_device_ids(sim):
            cls = str(device_class(name))
            if cls in ("GPU", "NPU") and cls not in targets:
                targets[cls] = (sim, name)
        print({cls: f"{name} ({'simulated ' + profile if c is not None else 'this machine'})" for cls, (c, name) in targets.items()})
        print("reference:", "ggml (ggml-python)" if reference == "ggml" or (reference == "auto" and oracle.ggml_available()) else "numpy")
        """,
    ),
    md(
        "table-md",
        """
        ## 1. The op table and its gates

        One entry per ggml op, unary and GLU sub-op the backend registers: the builder, how ovkit
        translates it to OpenVINO, how upstream does, its support gates and upstream's notes
        (deviations and quirks). Then every gate of the support policy as data: the rule, the
        device class it is limited to, and whether it is an upstream quirk (applied only in
        upstream-exact mode).
        """,
    ),
    code(
        "op-table",
        """
        ops_table = ovkit.op_coverage_table()
        kinds = ops_table["kind"].value_counts().to_dict()
        print(f"{len(ops_table)} entries {kinds}: {int(ops_table['registered'].sum())} registered upstream, "
              f"{int(ops_table['translated'].sum())} translated by ovkit, {int(ops_table['reference'].sum())} with a numpy reference")
        with pd.option_context("display.max_rows", 60, "display.max_colwidth", 60):
            display(ops_table.set_index("op")[["kind", "builders", "openvino (ovkit)", "gates", "upstream notes"]])
        """,
    ),
    code(
        "gates",
        """
        gates = policy.gates_frame()
        print(f"{gates['gate'].nunique()} gates over {gates['op'].nunique() - 1} ops (+ global)")
        with pd.option_context("display.max_rows", 20, "display.max_colwidth", 70):
            display(gates[["op", "gate", "rule", "device class", "upstream quirk"]].drop_duplicates("gate"))
        """,
    ),
    md(
        "test-md",
        """
        ## 2. `test-ops` on this machine

        Every case of the catalogue: the policy is asked first (a rejected case is *not supported*,
        with the reason), supported cases run on the device and are compared with the reference by
        NMSE against the op's threshold. The same lines `ovkit test-ops` prints:
        """,
    ),
    code(
        "test-cpu",
        """
        cat = testops.build_catalogue()
        def type_bucket(label):  # a case's input types ("f32/q4_K", "f16/f32", ...) as one column
            parts = label.split("/")
            if any(p.startswith("q") or p == "mxfp4" for p in parts):
                return "quant"
            low = [p for p in parts if p in ("bf16", "f16")]
            return "/".join(low) if low else ("f32" if "f32" in parts else parts[0])


        dtype_of = {c.name: type_bucket(dict(c.params)["type"]) for c in cat}
        results = {}
        core0, dev0 = targets["CPU"]
        results["CPU"] = testops.test_ops(ops=ops, device=dev0, core=core0, reference=reference, progress=False)
        cpu = results["CPU"]
        for line in [testops.CaseResult(**r).line() for r in cpu.to_dict("records")][:12]:
            print(line)
        print(f"  ... {len(cpu)} cases")
        summary = testops.summarize([testops.CaseResult(**r) for r in cpu.to_dict("records")], "test", dev0, reference)
        print("\\n".join(summary.lines()))
        """,
    ),
    md(
        "heatmap-md",
        """
        ## 3. Coverage heatmap: op × type × device class

        The same catalogue on the GPU and NPU classes of the simulated machine. Each cell sums up
        the cases of one op and input type on one device class (every quantized weight type
        shares the `quant` column): all pass, some rejected by the policy, all rejected, or a
        failure (a wrong result; there should be none).
        """,
    ),
    code(
        "test-classes",
        """
        for cls, (c, name) in targets.items():
            if cls not in results:
                results[cls] = testops.test_ops(ops=ops, device=name, core=c, reference=reference, progress=False)
        every = pd.concat([df.assign(device_class=cls) for cls, df in results.items()], ignore_index=True)
        every["dtype"] = every["case"].map(dtype_of)
        every["op"] = every["op"].str.replace("UNARY:", "").str.replace("GLU:", "")
        counts = every.groupby(["device_class", "status"]).size().unstack(fill_value=0)
        display(counts)
        """,
    ),
    code(
        "heatmap",
        """
        CATEGORIES = ["all rejected", "some rejected", "all pass", "FAIL"]


        def cell(statuses):
            s = set(statuses)
            if "FAIL" in s:
                return 3
            if s == {"OK"}:
                return 2
            return 1 if "OK" in s else 0


        grid = every.groupby(["op", "device_class", "dtype"])["status"].agg(cell).unstack(["device_class", "dtype"])
        grid = grid.reindex(columns=sorted(grid.columns, key=lambda k: (list(targets).index(k[0]), k[1])))
        fig, ax = plt.subplots(figsize=(1.0 + 0.55 * grid.shape[1], 0.8 + 0.26 * grid.shape[0]))
        cmap = ListedColormap(["#bbbbbb", "#f0c419", "#4caf50", "#d62728"])
        ax.imshow(np.ma.masked_invalid(grid.to_numpy(dtype=float)), cmap=cmap, vmin=0, vmax=3, aspect="auto")
        ax.set_yticks(range(len(grid.index)), grid.index, fontsize=8)
        ax.set_xticks(range(grid.shape[1]), [f"{c}\\n{t}" for c, t in grid.columns], fontsize=8)
        ax.xaxis.tick_top()
        classes = [c for c, _ in grid.columns]
        for i in range(1, len(classes)):
            if classes[i] != classes[i - 1]:
                ax.axvline(i - 0.5, color="black", lw=1.5)
        ax.legend(handles=[Patch(color=cmap(i), label=n) for i, n in enumerate(CATEGORIES)],
                  loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
        ax.set_title("test-ops: op × input type × device class (white: no case)", fontsize=9, pad=28)
        fig.tight_layout()
        plt.show()
        """,
    ),
    md(
        "reasons-md",
        """
        ## 4. Why a case is not supported

        Every rejection carries the policy's reason and the key of the gate that made it, so a
        rejected case can be traced to one rule. Grouped by gate and device class:
        """,
    ),
    code(
        "reasons",
        """
        rejected = every[every["status"] == "not supported"].copy()
        rejected["gate"] = rejected["detail"].str.extract(r"\\[([^\\]]+)\\]\\s*$")[0]
        by_gate = rejected.groupby(["gate", "device_class"]).size().unstack(fill_value=0)
        display(by_gate)
        for cls in targets:
            only = rejected[rejected["device_class"] == cls]
            print(f"{cls}: {len(only)} cases rejected, e.g.")
            for _, r in only.drop_duplicates("gate").head(3).iterrows():
                print(f"   {r['case']}: {r['detail']}")
        """,
    ),
    md(
        "perf-md",
        """
        ## 5. Performance per op

        `test-ops` in perf mode: median time per steady-state run (compile excluded), and GFLOPS
        for matrix/attention ops or GB/s moved for memory-bound ones. Only cases under the size
        limits of the parameters run here, so the notebook stays quick.
        """,
    ),
    code(
        "perf",
        """
        def small(c):
            mib = sum(np.prod(i.shape) * np.dtype(testops.NUMPY_OF[i.dtype]).itemsize for i in c.inputs) / 2**20
            return mib <= perf_max_mib and c.flops <= perf_max_gflop * 1e9


        perf_cases = [c for c in testops.select(testops.build_perf_catalogue(), ops) if small(c)]
        rows = [testops.perf_case(c, dev0, core0, min_seconds=0.05, max_runs=50) for c in perf_cases]
        perf = pd.DataFrame([{"op": r.op, "case": r.case, "status": r.status, "us/run": r.us_per_run,
                              "GFLOPS": r.gflops, "GB/s": r.gbps} for r in rows])
        with pd.option_context("display.max_colwidth", 80, "display.float_format", "{:,.2f}".format):
            display(perf)
        """,
    ),
    code(
        "perf-chart",
        """
        ok = perf[perf["status"] == "OK"]
        fig, ax = plt.subplots(figsize=(7, 0.5 + 0.3 * len(ok)))
        colors = ["tab:blue" if pd.notna(g) else "tab:orange" for g in ok["GFLOPS"]]
        ax.barh(ok["case"].str.slice(0, 60), ok["us/run"], color=colors)
        ax.set_xscale("log")
        ax.set_xlabel("µs per run (log)")
        ax.invert_yaxis()
        for y, (us, gflops, gbps) in enumerate(zip(ok["us/run"], ok["GFLOPS"], ok["GB/s"], strict=True)):
            rate = f"{gflops:,.1f} GFLOPS" if pd.notna(gflops) else f"{gbps:,.1f} GB/s"
            ax.text(us * 1.08, y, rate, va="center", fontsize=7)
        ax.set_xlim(right=ok["us/run"].max() * 12)
        ax.set_title(f"time per op on {dev0} (blue: compute-bound, orange: memory-bound)", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        plt.show()
        """,
    ),
    md(
        "result-md",
        """
        ## Result

        Totals per device class; no supported case may fail.
        """,
    ),
    code(
        "result",
        """
        for cls, df in results.items():
            ok, fail, unsup = ((df["status"] == s).sum() for s in ("OK", "FAIL", "not supported"))
            print(f"{cls}: {ok}/{ok + fail} supported cases pass, {unsup} not supported, {fail} FAIL")
        timed = perf["status"].value_counts().to_dict()
        print(f"perf on {dev0}: {len(perf)} cases timed, statuses {timed}")
        """,
    ),
]

# --------------------------------------------------------------------------------------------
# 06-gguf
# --------------------------------------------------------------------------------------------
NB06 = [
    md(
        "title",
        """
        # 06 · GGUF: inspect a model file, check it fits, run a layer from it

        llama.cpp loads models from GGUF files: metadata plus tensors, most of them quantized.
        This notebook writes a small llama-style GGUF with the `gguf` package (no download),
        reads it back as ovkit sees it, checks per device whether its weights fit (after the
        backend's requantization policy), and runs one layer's matmuls straight from its quantized
        blocks on the device, compared with the dequantized weights and with ggml.
        """,
    ),
    params(
        """
        device = "CPU"  # where the layer runs
        profile = None  # None for this machine, or a simulated profile such as laptop
        fit_profiles = ["laptop", "workstation", "gpu-overcommit"]  # simulated machines for the fit check
        n_layers = 2
        n_embd = 256  # a multiple of 256, the K-quant block
        n_ff = 512
        n_vocab = 512
        qtype = "q4_0"  # type of the attention and FFN weights
        down_qtype = "q6_K"  # ffn_down and the output head, as llama.cpp's mixed quantizations do
        n_tokens = 4
        seed = 0
        """
    ),
    code(
        "setup",
        """
        %matplotlib inline
        import tempfile
        from pathlib import Path

        import matplotlib.pyplot as plt
        import numpy as np
        import openvino as ov
        import pandas as pd

        import ovkit
        from ovkit import gguf as ovgguf
        from ovkit import oracle, quant
        from ovkit.graph import Graph

        core = ovkit.SimulatedCore(profile) if profile else ov.Core()
        dev = ovkit.resolve_device(core, env={"GGML_OPENVINO_DEVICE": device}, log=False).device
        rng = np.random.default_rng(seed)
        workdir = Path(tempfile.mkdtemp(prefix="ovkit-gguf-"))
        print("layer runs on", dev, "| files in", workdir)
        """,
    ),
    md(
        "write-md",
        """
        ## 1. Write a small GGUF

        Random weights with llama's tensor names and shapes; the matrices are quantized with
        ggml's own quantizer (ggml-python) or the `gguf` package's, norms stay f32.
        """,
    ),
    code(
        "write",
        """
        def weight(rows, cols, qt, name):
            w = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
            return quant.quantize(qt, w, name=name)


        tensors = {"token_embd.weight": weight(n_vocab, n_embd, qtype, "token_embd.weight")}
        for i in range(n_layers):
            b = f"blk.{i}."
            tensors[b + "attn_norm.weight"] = np.ones(n_embd, np.float32)
            for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
                tensors[b + part + ".weight"] = weight(n_embd, n_embd, qtype, b + part + ".weight")
            tensors[b + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
            tensors[b + "ffn_gate.weight"] = weight(n_ff, n_embd, qtype, b + "ffn_gate.weight")
            tensors[b + "ffn_up.weight"] = weight(n_ff, n_embd, qtype, b + "ffn_up.weight")
            tensors[b + "ffn_down.weight"] = weight(n_embd, n_ff, down_qtype, b + "ffn_down.weight")
        tensors["output_norm.weight"] = np.ones(n_embd, np.float32)
        tensors["output.weight"] = weight(n_vocab, n_embd, down_qtype, "output.weight")
        meta = {
            "general.name": "ovkit-tiny",
            "llama.block_count": n_layers,
            "llama.embedding_length": n_embd,
            "llama.feed_forward_length": n_ff,
            "llama.attention.head_count": 4,
            "llama.context_length": 128,
        }
        path = ovgguf.write_gguf(workdir / "tiny.gguf", tensors, arch="llama", metadata=meta)
        print(f"wrote {path.name}: {path.stat().st_size:,} bytes, {len(tensors)} tensors")
        """,
    ),
    md(
        "inspect-md",
        """
        ## 2. Inspect it

        The metadata and one row per tensor: type, shape in numpy order (`(rows, k)`), bytes and
        offset in the file, and whether the backend accepts the type as a weight.
        """,
    ),
    code(
        "inspect",
        """
        model = ovgguf.read_gguf(path)
        print("architecture:", model.architecture, "| tensor bytes:", f"{model.total_bytes:,}")
        display(model.metadata_table())
        table = model.tensor_table()
        display(table)
        """,
    ),
    code(
        "bytes-chart",
        """
        by_type = table.groupby("type")["bytes"].sum().sort_values()
        fig, ax = plt.subplots(figsize=(6, 2.4))
        ax.barh(by_type.index, by_type.to_numpy() / 1024)
        ax.set_xlabel("KiB in the file")
        ax.set_title(f"{path.name}: bytes per tensor type")
        fig.tight_layout()
        plt.show()
        """,
    ),
    md(
        "corrupt-md",
        """
        Broken files give a clear error naming the file and the problem, never a crash:
        """,
    ),
    code(
        "corrupt",
        """
        blob = path.read_bytes()
        for name, data in [("truncated.gguf", blob[: len(blob) // 2]), ("header-only.gguf", blob[:40])]:
            bad = workdir / name
            bad.write_bytes(data)
            try:
                ovgguf.read_gguf(bad)
            except ovgguf.GGUFError as exc:
                print(f"{name}: GGUFError: {str(exc).replace(str(workdir) + '/', '')}")
        """,
    ),
    md(
        "fit-md",
        """
        ## 3. Does it fit?

        For each device, the bytes the weights need *after the requantization policy of its
        class* (the output head and embeddings become per-row i8, the NPU takes 4-bit groups of
        128, ...) against the device's free memory (for the CPU, the host's available memory).
        Here on this machine and on the simulated machines; `gpu-overcommit` has a GPU with no
        free memory left.
        """,
    ),
    code(
        "fit",
        """
        machines = {"this machine": None} | {f"simulated {p}": ovkit.SimulatedCore(p) for p in fit_profiles}
        fit = pd.concat([model.fit_check(c).assign(machine=m) for m, c in machines.items()], ignore_index=True)
        fit["weight_MiB"] = fit["weight_bytes"] / 2**20
        fit["free_MiB"] = fit["free_bytes"] / 2**20
        with pd.option_context("display.float_format", "{:,.2f}".format):
            display(fit[["machine", "device", "class", "weight_MiB", "free_MiB", "fits"]])
        for cls in ("CPU", "GPU", "NPU"):
            print(f"{cls} class needs {model.weight_bytes(cls):,} bytes (file: {model.total_bytes:,})")
        """,
    ),
    md(
        "layer-md",
        """
        ## 4. One layer's matmuls from the quantized blocks

        The seven matrices of `blk.0` become graph constants that stay quantized (integer weights,
        scales and a decompression subgraph). The graph runs the layer's projections and its
        SwiGLU feed-forward on the device; each output is compared with the same product over the
        dequantized weights, and with ggml's own quantized kernels when ggml-python is installed.
        Look at the two error columns: the device agrees with ggml far more closely than with the
        exact f32 product, because both round the activations to 8 bits inside the quantized dot
        product (ggml by design, OpenVINO's CPU plugin by its dynamic quantization).
        """,
    ),
    code(
        "layer",
        """
        w = {n.split(".")[2]: model.constant(n) for n in model.tensors if n.startswith("blk.0.") and "norm" not in n}
        print({k: f"{v.dtype} {v.shape}" for k, v in w.items()})
        x = rng.standard_normal((n_tokens, n_embd)).astype(np.float32)

        g = Graph()
        xin = g.input("x", x.shape)
        c = {k: g.constant(v) for k, v in w.items()}
        outs = {k: g.mul_mat(c[k], xin) for k in ("attn_q", "attn_k", "attn_v", "attn_output")}
        outs["ffn_gate"] = g.mul_mat(c["ffn_gate"], xin)
        outs["ffn_up"] = g.mul_mat(c["ffn_up"], xin)
        outs["ffn_down"] = g.mul_mat(c["ffn_down"], g.swiglu_split(outs["ffn_gate"], outs["ffn_up"]))
        got = dict(zip(outs, g.compute(list(outs.values()), {"x": x}, device=dev, core=core), strict=True))

        deq = {k: v.dequantize() for k, v in w.items()}
        silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
        expected = {k: x @ deq[k].T for k in outs if k != "ffn_down"}
        expected["ffn_down"] = (silu(expected["ffn_gate"]) * expected["ffn_up"]) @ deq["ffn_down"].T
        act = silu(got["ffn_gate"]) * got["ffn_up"]  # ffn_down's input, as the device computed it
        rows = []
        for k in outs:
            row = {"matmul": k, "type": w[k].dtype, "shape": w[k].shape, "NMSE vs dequantized": oracle.nmse(got[k], expected[k])}
            if oracle.ggml_available():
                blocks = oracle.QuantArray(w[k].dtype, w[k].shape, w[k].raw)
                row["NMSE vs ggml"] = oracle.nmse(got[k], oracle.ggml_call("mul_mat", blocks, act if k == "ffn_down" else x))
            rows.append(row)
        layer = pd.DataFrame(rows).set_index("matmul")
        with pd.option_context("display.float_format", "{:.2e}".format):
            display(layer)
        """,
    ),
    md(
        "result-md",
        """
        ## Result

        The file round-trips, the fit check answers per device, and every matmul of the layer
        agrees with its dequantized weights (test-backend-ops' threshold for quantized `mul_mat`
        is 5e-4).
        """,
    ),
    code(
        "result",
        """
        print(f"{path.name}: {len(model.tensors)} tensors, {model.total_bytes:,} bytes of weights")
        print("fits on:", ", ".join(f"{r.machine}/{r.device}" for r in fit.itertuples() if r.fits))
        print("does not fit on:", ", ".join(f"{r.machine}/{r.device}" for r in fit.itertuples() if not r.fits) or "-")
        worst = layer["NMSE vs dequantized"].max()
        print(f"blk.0 on {dev}: {len(layer)} quantized matmuls, worst NMSE vs dequantized {worst:.1e}")
        if "NMSE vs ggml" in layer:
            print(f"blk.0 on {dev}: worst NMSE vs ggml {layer['NMSE vs ggml'].max():.1e}")
        """,
    ),
]

NOTEBOOKS: dict[str, list[Cell]] = {
    "01-devices": NB01,
    "02-selecting-a-device": NB02,
    "03-compute-graphs": NB03,
    "04-memory-and-allocations": NB04,
    "05-op-coverage": NB05,
    "06-gguf": NB06,
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


def render_all(directory: Path) -> list[Path]:
    """Write every notebook into ``directory`` and format its code cells with ruff (as CI lints)."""
    paths = []
    for name, cells in NOTEBOOKS.items():
        path = directory / f"{name}.ipynb"
        path.write_text(nbformat.writes(build(cells)) + "\n", encoding="utf-8")
        paths.append(path)
    config = HERE.parent / "pyproject.toml"
    subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--quiet", "--config", str(config), *map(str, paths)],
        check=True,
    )
    return paths


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        for rendered in render_all(Path(tmp)):
            path = HERE / rendered.name
            text = rendered.read_text(encoding="utf-8")
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
