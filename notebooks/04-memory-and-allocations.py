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

import matplotlib.pyplot as plt
import numpy as np
import openvino as ov
import pandas as pd
import psutil
from IPython.display import display

import ovkit
from ovkit import buffers, engine, oracle, quant
from ovkit.graph import Graph
from ovkit.memory import MIB

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
env = {"GGML_OPENVINO_DEVICE": device}
dev = ovkit.resolve_device(core, env=env, log=False).device
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
rows = []
for name in ovkit.devices.physical_device_ids(core):
    for bt in (buffers.buffer_type(name), buffers.host_buffer_type(name)):
        rows.append(
            {
                "buffer type": bt.name,
                "device": bt.device,
                "kind": str(bt.kind),
                "alignment": bt.alignment,
                "max size": bt.max_size,
                "ovkit's": buffers.is_ovkit_buffer_type(bt),
            }
        )
display(pd.DataFrame(rows).set_index("buffer type"))
look_alike = buffers.BufferType(dev, dev, buffers.BufferKind.DEVICE)
print(
    f"look-alike {look_alike.name!r}: ovkit's = {buffers.is_ovkit_buffer_type(look_alike)}, "
    f"kind = {buffers.buffer_type_kind(look_alike)}"
)

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

charts = AllocationCharts(core, interval=live_interval_s, env=env)
display(charts)

# %% tags=["run-graphs"]
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

# %% tags=["history-chart"]
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
rows = []
for qtype in quant.QUANT_TYPES:
    qw = quant.quantize(qtype, w)
    g = Graph()
    xin = g.input("x", x.shape)
    got = g.compute(g.mul_mat(g.constant(qw), xin), {"x": x}, device=dev, core=core)
    row = {
        "type": qtype,
        "bytes": qw.nbytes,
        "bits/weight": 8 * qw.nbytes / w.size,
        "NMSE vs dequantized": oracle.nmse(got, x @ qw.dequantize().T),
        "quantization error": oracle.nmse(qw.dequantize(), w),
    }
    if oracle.ggml_available():
        row["NMSE vs ggml"] = oracle.nmse(got, oracle.ggml_mul_mat_quant(qtype, w, x))
    rows.append(row)
qtable = pd.DataFrame(rows).set_index("type")
with pd.option_context("display.float_format", "{:.3g}".format):
    display(qtable)

# %% [markdown]
# Not every type is kept as is: the backend's requantization policy turns some weights into
# another layout per device class (embeddings and the output head become per-row i8; the NPU
# takes 4-bit symmetric weights in groups of 128). The bytes a weight needs therefore depend
# on where it goes:

# %% tags=["requant"]
fit = []
for qtype in quant.QUANT_TYPES:
    for cls in ("CPU", "GPU", "NPU"):
        target = quant.requant_type("blk.0.ffn_up.weight", cls, qtype)
        fit.append(
            {
                "type": qtype,
                "device class": cls,
                "becomes": str(target),
                "bytes": quant.requant_bytes(target, qtype, (quant_rows, quant_k)),
            }
        )
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
import openvino.opset13 as ops

from ovkit import weight_release
from ovkit.runtime import default_core

weight_release.reset()
m, k = release_rows, release_k
wbuf = buffers.alloc_buffer("CPU", m * k * 2, "weights", host=True)
wt = wbuf.place("blk.0.ffn_up.weight", (m, k), "f16")
wbuf.set_weight(wt, (rng.standard_normal((m, k)) * 0.05).astype(np.float16))  # registers the buffer
print(
    f"registered: {weight_release.REGISTRY.count} buffer, {weight_release.REGISTRY.registered_bytes / MIB:.0f} MiB"
)
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
print(
    f"resident memory {rss_before:.0f} -> {rss_after:.0f} MiB: {rss_before - rss_after:.0f} MiB back to the OS"
)
print("host copy reads as zeros now:", not wbuf.data.any())
print("results unchanged:", np.array_equal(np.array(request.infer({0: xr})[0]), before))
try:
    weight_release.before_compile("CPU")
except weight_release.WeightsReleasedError as exc:
    print("recompile refused:", exc)
wbuf.free()
weight_release.reset()  # notebook only: a real backend process has no way back

# %% [markdown]
# ## Result
#
# Used memory on the device rose with every compiled graph and fell back when the cache was
# cleared; every buffer allocated here was released; quantized weights match their
# dequantized values on the device; released host weights really left the process.

# %% tags=["result"]
rise = steps.iloc[n_layers, 0] - steps.iloc[0, 0]
print(
    f"{dev} used memory: +{rise:.1f} MiB after {n_layers} graphs, back to {steps.iloc[-1, 0]:.1f} MiB after clearing"
)
print("ovkit buffers still live:", len(buffers.current_allocations()))
worst = qtable["NMSE vs dequantized"].max()
print(f"quantized mul_mat on {dev}: worst NMSE vs dequantized weights {worst:.1e} over {len(qtable)} types")
print(
    f"weight release: {released.released_bytes / MIB:.0f} MiB released, RSS fell by {rss_before - rss_after:.0f} MiB"
)
