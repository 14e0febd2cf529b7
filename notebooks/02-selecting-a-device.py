# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Selecting a device with `GGML_OPENVINO_DEVICE`
#
# The backend lists every device but **runs on one**: the device named by
# `GGML_OPENVINO_DEVICE`. The rule is strict: unset or empty means `CPU`; any other value must
# be an exact, case-sensitive OpenVINO id, otherwise the backend logs
# `GGML OpenVINO Backend: device <X> is not available, fallback to CPU` and uses the CPU.
# ovkit resolves the variable the same way and adds a *hint* for near misses, without ever
# changing the outcome.
#
# Parameters: `device` is what this machine's variable is set to (`papermill -p device GPU`);
# `profile` is the simulated machine used for the near-miss examples.

# %% tags=["parameters"]
device = "CPU"  # GGML_OPENVINO_DEVICE to resolve on this machine, empty for unset
profile = "workstation"  # simulated machine for the near-miss table (GPU.0 + GPU.1, no NPU)
tries = ["", "CPU", "GPU", "gpu", "GPU.0", "GPU.1", "GPU.1 ", "AUTO", "NPU"]

# %% tags=["setup"]
import os

import pandas as pd
from IPython.display import display

import ovkit
from ovkit import notebook, notebook_log

# Asked once, ovkit shows its log lines (upstream's own wording) as outputs of the cell:
# routine lines quiet, the fallback warning and hints standing out.
notebook_log.install()
sim = ovkit.SimulatedCore(profile)
print("this machine:", ovkit.resolve_device(env={}, log=False).available)
print(f"simulated {profile}:", sim.available_devices)

# %% [markdown]
# ## 1. Default and this machine's setting
#
# With the variable unset the backend picks `CPU`. Then the value of the `device` parameter is
# resolved on this machine: the log lines below carry the words llama.cpp writes to stderr.

# %% tags=["default"]
unset = ovkit.resolve_device(env={})
print("unset ->", unset.device, "| fell back:", unset.fell_back)
chosen = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": device})
print(f"GGML_OPENVINO_DEVICE={device!r} -> {chosen.device}", end=" | ")
print(f"fell back: {chosen.fell_back} | hint: {chosen.hint}")

# %% [markdown]
# ## 2. Exact match, fallback and near misses
#
# Every value in `tries`, resolved on the simulated machine and on the laptop profile
# (`CPU`, `GPU`, `NPU`). Look at the `GPU` row: on the workstation, where only `GPU.0` and
# `GPU.1` exist, it falls back to the CPU (no alias; with an iGPU and a dGPU, `GPU.0` is often
# the wrong one); on the laptop it is exact. `gpu` is never accepted: ids are case-sensitive.

# %% tags=["near-misses"]
laptop = ovkit.SimulatedCore("laptop")
rows = []
for value in tries:
    row = {"GGML_OPENVINO_DEVICE": repr(value)}
    for machine, c in [(profile, sim), ("laptop", laptop)]:
        s = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": value}, log=False, core=c)
        row[f"{machine}: selected"] = s.device + (" (fallback)" if s.fell_back else "")
        row[f"{machine}: hint"] = s.hint or ""
    rows.append(row)
near = pd.DataFrame(rows).set_index("GGML_OPENVINO_DEVICE")
with pd.option_context("display.max_colwidth", 80):
    display(near)

# %% tags=["gpu-on-workstation"]
# The warning line as the backend logs it, then the hint ovkit adds (INFO level):
s = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": "GPU"}, core=sim)
print("messages:", s.messages)
print("hint:", s.hint)

# %% [markdown]
# ## 3. Switching explicitly
#
# Exploring several devices means switching the selection on purpose:
# `ovkit.using_device(name)` gives a block the selection `GGML_OPENVINO_DEVICE=name` makes;
# what runs in the block takes its `device`. The process environment is left alone, so the
# dashboard's refresh (another thread) keeps showing the variable's own device.

# %% tags=["using-device"]
before = os.environ.get("GGML_OPENVINO_DEVICE")
for name in ovkit.devices.physical_device_ids(sim):
    with ovkit.using_device(name, core=sim) as s:
        print(f"{name:8} -> selected {s.device:6} class {s.device_class}")
print("environment unchanged:", os.environ.get("GGML_OPENVINO_DEVICE") == before)

# %% [markdown]
# ## 4. The selector widget
#
# Choosing in the dropdown (or typing any value, e.g. `gpu`) sets `GGML_OPENVINO_DEVICE` in
# this kernel's environment and re-resolves at once: the status line shows the resolved
# device, the fallback warning and the hint, and the device table below highlights the
# selected row. Below, the same is done from code: first the near miss `GPU`, then `GPU.1`.

# %% tags=["selector"]
from ovkit.widgets import DeviceSelector, DeviceTable

saved = os.environ.get("GGML_OPENVINO_DEVICE")
sim_table = DeviceTable(auto_refresh=False, core=sim)
selector = DeviceSelector(on_change=lambda state: sim_table.refresh(), core=sim)
display(selector, sim_table)

# %% tags=["selector-steps"]
gpu_ids = [n for n in ovkit.devices.physical_device_ids(sim) if n.startswith("GPU")]
for value in ["GPU", gpu_ids[-1] if gpu_ids else "CPU"]:
    selector.select(value)
    print(selector)
    print("  os.environ:", os.environ.get("GGML_OPENVINO_DEVICE"), "| highlighted:", sim_table.selected)

# %% [markdown]
# ## 5. `supports_op` is False on every non-selected device
#
# All devices are listed, but only the selected one runs ops: the backend object answers
# `supports_op(device, op)` with False, and a reason, for every other device, so ggml's
# scheduler never places work there. On the selected device the op-support policy decides,
# by device *class*. The op below is a `GET_ROWS` from a bf16 table (an embedding lookup):
# the policy accepts it on the CPU class and rejects it on the GPU class.

# %% tags=["supports-op"]
from ovkit.ops.policy import OpInfo

table = OpInfo.leaf("bf16", (64, 32), name="token_embd")  # ggml ne order: 32 rows of 64
rows = OpInfo.leaf("i32", (4,), name="inp_tokens")
get_rows = OpInfo("GET_ROWS", "f32", (64, 4), srcs=(table, rows))
matrix, decisions = notebook.supports_op_matrix(get_rows, core=sim)
display(matrix)
gpu = next((n for n in reversed(matrix.columns) if n.startswith("GPU")), matrix.columns[-1])
for name, decision in decisions[gpu].items():
    print(f"selected {gpu}, asked {name:6} -> {decision.supported}: {decision.reason}")

# %% [markdown]
# For running ops this means: a graph runs on the selected device (`compute` without a
# `device`). To try another device, take the selection `using_device` makes and pass its device
# on; the compiled graphs are cached per device.

# %% tags=["running"]
import numpy as np

from ovkit import engine
from ovkit.graph import Graph

g = Graph()
a = g.input("a", (2, 8))
y = g.gelu(a)
for name in gpu_ids or ["CPU"]:
    with ovkit.using_device(name, core=sim) as s:
        feed = {"a": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)}
        out = g.compute(y, feed, device=s.device, core=sim)
        print(f"selected {s.device}: gelu ran, result {out.shape}")
display(engine.get_engine(sim).table()[["device", "inputs", "runs"]])

# %% [markdown]
# ## Result
#
# What each value of `GGML_OPENVINO_DEVICE` selects on the simulated machine:

# %% tags=["result"]
for value in tries:
    s = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": value}, log=False, core=sim)
    print(f"{value!r:10} -> {s.device}" + (" (fallback)" if s.fell_back else ""))
# The selector changed this kernel's environment; put it back as it was.
ovkit.widgets.selector.set_device_env(saved)
