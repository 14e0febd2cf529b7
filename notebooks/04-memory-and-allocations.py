# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Memory and allocations
#
# Where do a model's bytes live? This notebook walks through ovkit's buffer types and
# buffers (as the backend's `<device>` / `<device>_HOST` buffer types), the allocation
# record every buffer leaves, a live allocation chart while graphs run on a device, and how
# much room quantized weights need on each device class.
#
# It runs on a **simulated** laptop by default (`profile`), whose GPU counts the constants of
# every model compiled for it as allocations, so the memory views move. With a real GPU:
# `papermill 04-memory-and-allocations.ipynb out.ipynb -p profile None -p device GPU`.

# %% tags=["parameters"]
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

# %% tags=["setup"]
# %matplotlib inline
import gc
import time

import numpy as np
import openvino as ov
from IPython.display import display

import ovkit
from ovkit import buffers, engine, notebook, notebook_log, quant
from ovkit.graph import Graph
from ovkit.memory import MIB

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
env = {"GGML_OPENVINO_DEVICE": device}
dev = ovkit.resolve_device(env=env, log=False, core=core).device
rng = np.random.default_rng(seed)
print("graphs run on", dev, f"of the simulated {profile}" if profile else "of this machine")

# %% [markdown]
# ## 1. Buffer types
#
# Each device has two buffer types: `<device>` (memory the device owns) and `<device>_HOST`
# (host memory it reads directly). The kind is stored in the type, never guessed from its
# name, and a registry says whether a buffer type is ovkit's at all: a look-alike with the
# same name is not.

# %% tags=["buffer-types"]
display(notebook.buffer_types_report(core))
look_alike = buffers.BufferType(dev, dev, buffers.BufferKind.DEVICE)  # same name, not registered
ours, kind = buffers.is_ovkit_buffer_type(look_alike), buffers.buffer_type_kind(look_alike)
print(f"look-alike {look_alike.name!r}: ovkit's = {ours}, kind = {kind}")

# %% [markdown]
# ## 2. Buffers, tensors and the allocation record
#
# A buffer owns exactly one storage (zero-filled host memory, or an OpenVINO remote tensor
# for a GPU-class KV cache; a *simulated* GPU uses host memory and says so). Tensors are
# placed at aligned offsets; a view shares its source's memory. Every allocation and
# release is recorded with its device, buffer type and usage.

# %% tags=["buffers"]
weights = buffers.alloc_buffer(dev, 3 * d * d * 4, "weights", core=core)
wq = weights.place("wq", (d, d))
weights.set_tensor(wq, rng.standard_normal((d, d)).astype(np.float32))
first_row = weights.view(wq, "wq.row0", shape=(d,))
print("wq at offset", wq.offset, "| view shares memory:", np.shares_memory(first_row.numpy(), wq.numpy()))
kv = buffers.alloc_buffer(dev, 2 * 256 * d * 4, "kv_cache", core=core)
compute = buffers.alloc_buffer(dev, d * d * 4, "compute", core=core, host=True)
display(
    buffers.current_allocations()[["buffer_id", "device", "buffer_type", "kind", "usage", "bytes", "storage"]]
)

# %% [markdown]
# ## 3. The live allocation charts while graphs run
#
# The charts below refresh on a background thread: used vs free per device, the GPU's
# `GPU_MEMORY_STATISTICS` by allocation type, ovkit's own buffers by usage, and the rolling
# time series of used memory. While they run, the next cell compiles and runs `n_layers`
# graphs, each with a new `d x d` weight: compiled models keep their weights on the device,
# so used memory climbs; clearing the compiled-graph cache returns it. (On the CPU the
# device figure never moves: the backend reports host RAM with free = total. The process's
# resident memory, in the last column, is where the CPU's share shows.)

# %% tags=["live-charts"]
from ovkit.widgets import AllocationCharts

charts = AllocationCharts(interval=live_interval_s, env=env, core=core)
display(charts)

# %% tags=["run-graphs"]
steps = notebook.MemorySteps(dev, core=core)  # device used memory and process RSS at each step
steps.record("start")
for layer in range(n_layers):
    g = Graph()
    x = g.input("x", (8, d))
    w = g.constant(rng.standard_normal((d, d)).astype(np.float32), name=f"blk.{layer}.w")
    g.compute(g.mul_mat(w, x), {"x": np.ones((8, d), np.float32)}, device=dev, core=core)
    charts.refresh()
    steps.record(f"layer {layer}")
    time.sleep(live_interval_s)

# %% [markdown]
# Then the compiled models go (the cache is cleared) and the buffers of section 2 are freed:

# %% tags=["clear"]
charts.refresher.stop()  # keep the picture, stop the thread (its own garbage collections
# would make the gc.collect() below return early: CPython runs one collection at a time)
engine.get_engine(core).clear()
gc.collect()
steps.record("cache cleared")
for buf in (weights, kv, compute):
    buf.free()
charts.refresh()
steps

# %% tags=["history-chart"]
steps.chart(buffers.allocation_history())

# %% [markdown]
# ## 4. Quantized weights
#
# ggml stores weights in blocks (e.g. Q4_0: 32 weights share one f16 scale). ovkit keeps them
# quantized on the device: the blocks become integer constants plus scales and an OpenVINO
# decompression subgraph, and `mul_mat` consumes them directly. Below, each type's size and
# the error of `x @ W.T` on the device against the dequantized weights (and against ggml's
# own quantized kernels when ggml-python is installed).

# %% tags=["quant"]
w = rng.standard_normal((quant_rows, quant_k)).astype(np.float32)
x = rng.standard_normal((4, quant_k)).astype(np.float32)
types = notebook.quantizable(quant.QUANT_TYPES, "those types' rows")
qtable = notebook.quantized_matmul_table(w, x, dev, types, core=core)
errors = [c for c in qtable.columns if "NMSE" in c or "error" in c]
qtable.style.format({c: "{:.2e}" for c in errors} | {"bits/weight": "{:.2f}"}, escape="html")

# %% [markdown]
# Not every type is kept as is: the backend's requantization policy turns some weights into
# another layout per device class (embeddings and the output head become per-row i8; the NPU
# takes 4-bit symmetric weights in groups of 128). The bytes a weight needs therefore depend
# on where it goes:

# %% tags=["requant"]
display(notebook.requant_chart("blk.0.ffn_up.weight", (quant_rows, quant_k)))
display(quant.requant_table())

# %% [markdown]
# ## 5. Weight release
#
# Once a device has compiled a model, the runtime holds its own copy of the weights, and the
# host copy in ggml's weight buffers is dead weight. With `GGML_OPENVINO_RELEASE_WEIGHTS=1`
# (or `GGML_OPENVINO_MEMORY_OPTIMIZE=1` on the GPU class) the backend gives those pages back
# to the OS on the **first cache hit** (`madvise(MADV_DONTNEED)`) and logs upstream's line.
# After that nothing new can be compiled from those weights: a recompile raises upstream's
# error instead of computing on zeros. Here on the CPU, whose plugin repacks matmul weights
# into its own copy, with `release_rows x release_k` f16 weights in an ovkit host buffer.

# %% tags=["release"]
release = notebook.weight_release_demo(release_rows, release_k, seed)
release

# %% [markdown]
# ## Result
#
# Used memory on the device rose with every compiled graph and fell back when the cache was
# cleared; every buffer allocated here was released; quantized weights match their
# dequantized values on the device; released host weights really left the process.

# %% tags=["result"]
rise = notebook.format_bytes(steps.used(f"layer {n_layers - 1}") - steps.used("start"))
back = notebook.format_bytes(steps.used("cache cleared"))
print(f"{dev} used memory: +{rise} after {n_layers} graphs, {back} after clearing the cache")
print("ovkit buffers still live:", len(buffers.current_allocations()))
worst = qtable["NMSE vs dequantized"].max()
print(f"quantized mul_mat on {dev}: worst NMSE vs dequantized weights {worst:.1e} over {len(qtable)} types")
print(
    f"weight release: {release.released_bytes // MIB} MiB released, RSS fell by {release.rss_drop // MIB} MiB"
)
