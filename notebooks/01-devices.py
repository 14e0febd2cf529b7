# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Devices: what OpenVINO sees on this machine
#
# llama.cpp's OpenVINO backend lists **one ggml device per physical OpenVINO device** and
# prints it with `--list-devices`. This notebook shows the same list, the memory figures
# behind each line and how each figure is computed, on this machine and on two simulated
# machines (a laptop with CPU + iGPU + NPU, a workstation with two GPUs).
#
# Change the parameters below (or run `papermill 01-devices.ipynb out.ipynb -p profile laptop`)
# to look at a simulated machine instead of this one.

# %% tags=["parameters"]
device = "CPU"  # GGML_OPENVINO_DEVICE on this machine, empty for unset
profile = None  # None for this machine, or a simulated profile such as laptop
compare_profiles = ["laptop", "workstation"]  # simulated machines shown side by side
live_refresh = True  # keep the live device table refreshing in the background
live_interval_s = 1.0  # seconds between refreshes

# %% tags=["setup"]
# %matplotlib inline
import os
import subprocess
import sys

import openvino as ov
from IPython.display import display

import ovkit
from ovkit import notebook, notebook_log
from ovkit.devices import physical_device_ids

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
print("OpenVINO", ov.get_version())
print("machine:", f"simulated {profile!r}" if profile else "this machine (real OpenVINO Core)")

# %% [markdown]
# ## 1. Raw ids and the physical list
#
# `core.available_devices` also names *virtual* devices (`AUTO`, `MULTI`, `HETERO`, `BATCH`)
# that route work to other devices. The backend drops them and sorts the rest; the name of
# each ggml device is the exact OpenVINO id (`GPU.1` stays `GPU.1`).

# %% tags=["raw-ids"]
print("available_devices:", core.available_devices)
print("listed (physical, sorted):", physical_device_ids(core))

# %% [markdown]
# ## 2. The device table
#
# `ovkit.device_table()`: one row per device, saying first whether the device set is
# simulated; its class (decided by the id's prefix), the description (`FULL_DEVICE_NAME`, plus
# the architecture for an NPU), the live total, used and free in MiB with a usage bar, and the
# rule behind them (on the CPU used = RAM − `MemAvailable`, although the list line says free =
# total as the backend does on Linux). `device_table(raw=True)` gives every byte column.

# %% tags=["device-table"]
devices = ovkit.list_devices(core=core)
selection = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": device}, log=False, core=core)
display(ovkit.device_table(devices, core=core))  # hover a rule or description for the full text
print("selected device:", selection.device)

# %% [markdown]
# ## 3. How each memory figure is computed
#
# The rule depends only on the device class (so `GPU.1` follows the GPU rule):

# %% tags=["memory-rules"]
notebook.memory_rules_report()

# %% [markdown]
# Each device's `--list-devices` total and free beside the *live* used and free, the figures
# the device table, the usage bars, the charts and the fit check all show (`Device.live`), with
# the rule behind them. On the CPU the list line says free = total (the backend's Linux rule);
# live, used is physical RAM − `MemAvailable`. For a GPU, used is the sum of every value of
# `GPU_MEMORY_STATISTICS` (this process's OpenVINO allocations, by type);
# `GPU_DEVICE_MAX_ALLOC_MEM_SIZE` (largest single allocation) is never used.


# %% tags=["memory-per-device"]
notebook.memory_report(devices)

# %% [markdown]
# ## 4. The same on simulated machines
#
# No GPU or NPU here? `ovkit.SimulatedCore` answers OpenVINO's own property names from a
# profile, so every rule above runs exactly as it would on the hardware. Models compiled for a
# simulated device really run on this CPU, and while they live their constants count as that
# device's allocations. Simulated rows say so (`simulated = True`).

# %% tags=["simulated-tables"]
machines = {"this machine" if not profile else f"simulated {profile}": devices}
for name in compare_profiles:
    sim = ovkit.SimulatedCore(name)
    machines[f"simulated {name}"] = ovkit.list_devices(core=sim)
    print(f"--- {name}: {sim.profile.summary}")
    print("available_devices:", sim.available_devices)
    display(ovkit.device_table(machines[f"simulated {name}"], core=sim))

# %% [markdown]
# The same live used and free per device, one panel per machine on one shared axis. The
# workstation's discrete GPU already holds 1.6 GiB (its `GPU_MEMORY_STATISTICS` is
# non-zero); on the laptop the iGPU and the NPU share host RAM.

# %% tags=["memory-chart"]
notebook.memory_chart(machines)

# %% [markdown]
# ## 5. When a property fails
#
# A required memory property that is missing or raises makes the list line print
# **0 MiB, 0 MiB free** for that device, as the backend does; ovkit's views say *unknown* with
# the reason instead, never 0 used. Allocations above the total clamp free to 0.

# %% tags=["error-profiles"]
for name in ["gpu-memory-error", "gpu-overcommit"]:
    sim = ovkit.SimulatedCore(name)
    sim_devices = ovkit.list_devices(core=sim)
    print(f"--- simulated {name}")
    print(ovkit.format_device_list(sim_devices))
    display(notebook.memory_report(sim_devices, title=f"memory on the simulated {name}"))

# %% [markdown]
# ## 6. The exact `--list-devices` text
#
# `ovkit.format_device_list` writes llama.cpp's format byte for byte:
# `Available devices:` then `  <name>: <description> (<total> MiB, <free> MiB free)`, or
# `  (none)`. The command line (`ovkit list-devices`, `ovkit --list-devices`) prints the same
# text; the selection lines go to stderr.

# %% tags=["cli-compare"]
cmd = [sys.executable, "-m", "ovkit", "list-devices"]
for sim in [profile, *compare_profiles]:
    args = cmd + (["--simulate", sim] if sim else [])
    env = {**os.environ, "GGML_OPENVINO_DEVICE": device}
    run = subprocess.run(args, capture_output=True, text=True, env=env)
    expected = ovkit.format_device_list(ovkit.list_devices(core=ovkit.SimulatedCore(sim) if sim else None))
    print(f"$ ovkit list-devices{' --simulate ' + sim if sim else ''}   (stderr: {run.stderr.strip()!r})")
    print(run.stdout, end="")
    print(f"identical to format_device_list: {run.stdout == expected + chr(10)}")

# %% [markdown]
# ## 7. Live view
#
# The same rows as a widget that refreshes on a background thread (the kernel stays free):
# the selected device is highlighted, simulated devices are labelled, a failing property
# shows its error inline. Pause it or change the interval with its controls; `live.close()`
# stops the thread.

# %% tags=["live-table"]
from ovkit.widgets import DeviceTable

live = DeviceTable(
    interval=live_interval_s,
    auto_refresh=live_refresh,
    env={"GGML_OPENVINO_DEVICE": device},
    core=core,
)
display(live)

# %% [markdown]
# ## 8. Dashboard: memory, how busy each device is, and the op explorer
#
# `ovkit.dashboard()` puts the device selector, the live panels (table, memory bars, allocations
# by type, the time series), how busy each device is and the op explorer on one refresh thread.
# The busy panel reads the counters the system exposes: for the CPU `/proc/stat` (all
# processes) and `/proc/self/stat` (this kernel); for an Intel GPU the engine time of its DRM
# clients (`/proc/*/fdinfo`, i915 or xe); for the NPU its sysfs busy time
# (`npu_busy_time_us`). A source that is absent says "not available here"; a simulated GPU or
# NPU says it is not measured (its graphs run on this machine's CPU).
# `ovkit.utilisation.UtilisationMeter` gives the same figures without the widget.

# %% tags=["dashboard"]
import time

dash = ovkit.dashboard(
    interval=live_interval_s,
    auto_refresh=live_refresh,
    env={"GGML_OPENVINO_DEVICE": device},
    core=core,
)
display(dash)

# %% tags=["busy"]
time.sleep(live_interval_s)  # one interval of counters to measure over
dash.refresh()
print(dash.busy_text())  # dash.busy_frame(): the same as a DataFrame (share 0..1)

# %% [markdown]
# ## 9. The real backend side by side
#
# With `scripts/install-upstream`, llama.cpp's OpenVINO backend itself is installed next to
# ovkit (ggml-python built with `-DGGML_OPENVINO=ON`). Its devices are read from
# `ggml_backend_dev_*` in a child process, and `format_list_devices` prints what
# `llama-bench --list-devices` prints with that build. The installed backend is the
# single-device state (one `OPENVINO0` device, host RAM for any OpenVINO device); ovkit's list
# is what the list-devices PRD asks for (one device per physical OpenVINO device, its own name
# and memory). The table names each difference and why.

# %% tags=["upstream-lists"]
from ovkit import upstream

if notebook.optional("backend", "the installed backend's own device list"):
    installed = upstream.list_devices()
    prd = ovkit.list_devices(core=ovkit.SimulatedCore(compare_profiles[0])) if compare_profiles else devices
    print("installed backend, as llama-bench --list-devices prints it:")
    print(upstream.format_list_devices(installed))
    print(
        f"\novkit (the PRD), simulated {compare_profiles[0]!r}:" if compare_profiles else "\novkit (the PRD):"
    )
    print(ovkit.format_device_list(prd))
    display(upstream.device_frame(installed))
    display(upstream.compare_lists(prd, installed))

# %% [markdown]
# ## Result
#
# The list llama.cpp's `--list-devices` prints for this notebook's machine:

# %% tags=["result"]
print(ovkit.format_device_list(devices))
