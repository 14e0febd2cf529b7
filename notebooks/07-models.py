# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Models: a GGUF model on a device, as llama.cpp's OpenVINO backend would run it
#
# The questions users bring: does my model fit this device, which nodes fall back to the CPU,
# how fast does it run, and are the numbers right? This notebook writes a small random-weight
# model (no download), checks the fit per device, shows the placement of every node of its
# prefill and decode graphs on a simulated laptop's CPU, GPU and NPU, runs it on this
# machine's CPU, compares the logits with llama.cpp itself and profiles the time per ggml op.

# %% tags=["parameters"]
profile = "laptop"  # simulated machine for the fit check and the placement
arch = "qwen3"  # llama, qwen2 or qwen3
weight_type = "q8_0"  # f32, f16 or a ggml quantized type
n_embd = 128
n_layer = 2
n_ctx = 256
n_prompt = 16
n_predict = 16
seed = 0
real_model = ""  # path of a real GGUF model (e.g. SmolLM2-135M Q4_1) for section 5; "" skips it

# %% tags=["setup"]
# %matplotlib inline
import tempfile
from pathlib import Path

import pandas as pd
from IPython.display import display

import ovkit
from ovkit import notebook, notebook_log
from ovkit.model import Model, footprint, placement, synthetic
from ovkit.model import profile as op_profile
from ovkit.model.cli import compare
from ovkit.model.reference import run_reference

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

sim = ovkit.SimulatedCore(profile)
workdir = Path(tempfile.mkdtemp(prefix="ovkit-models-"))
path = synthetic(
    arch,
    workdir / f"{arch}-{weight_type}.gguf",
    n_embd=n_embd,
    n_layer=n_layer,
    n_ff=2 * n_embd,
    weight_type=weight_type,
    seed=seed,
)
model = Model(path, n_ctx=n_ctx, profiling=True)
model

# %% [markdown]
# ## 1. Does it fit?
#
# Weights as each device class's requantization policy stores them (the NPU turns Q8_0 into
# 4-bit), the KV cache at `n_ctx` (f16) and the compute buffer, against each device's free
# memory. The simulated laptop's devices are labelled SIMULATED.

# %% tags=["fit"]
footprint.fit(model, core=sim)  # .frame (or raw=True) holds the bytes

# %% [markdown]
# ## 2. Placement: what runs on each device, what falls back
#
# Every node of the prefill and decode graphs (the ops, order and names llama.cpp gives them)
# against the backend's support policy for each device class. This model places everything;
# the second one (n_embd 256 in Q4_K) hits the backend's gate on 256-wide Q4_K GET_ROWS, so
# its token embedding falls back. Falling back is what the real backend does (ggml's scheduler
# runs that node on ggml's CPU backend); ovkit runs a graph whole on one device and has no such
# fallback, so `ovkit_runs` is False there and `Model` refuses that device, naming the node.

# %% tags=["placement"]
devices = placement.targets(sim)
nodes = placement.node_table(model, devices, n_prompt=n_prompt)
display(placement.summary(nodes), placement.fallbacks(nodes))
print(f"{len(nodes)} rows: nodes × devices; the first decode nodes on the GPU:")
display(
    nodes[(nodes.graph == "decode") & (nodes["class"] == "GPU")].head(8)[
        ["node", "op", "type", "ne", "on_device"]
    ]
)

# %% tags=["placement-rejected"]
if notebook.quantizable(["q4_K"], "the Q4_K model whose token embedding falls back"):
    k_path = synthetic("llama", workdir / "llama-q4_K-256.gguf", n_embd=256, n_ff=256, weight_type="q4_K")
    k_nodes = placement.node_table(Model(k_path, n_ctx=n_ctx), devices, n_prompt=n_prompt)
    rejected = k_nodes[~k_nodes.on_device].drop_duplicates(["graph", "device", "node"])
    display(placement.summary(k_nodes), placement.fallbacks(rejected))

# %% [markdown]
# With the real backend installed (`scripts/install-upstream`), the same graph built by ggml in
# an isolated child gets the backend's own `supports_op` per node, next to ovkit's verdict for
# this machine's CPU. Rows where they differ are listed.

# %% tags=["placement-live"]
if notebook.optional("backend", "the real backend's own supports_op per node"):
    cpu = [d for d in placement.targets() if d.device_class == "CPU"]
    live = placement.node_table(model, cpu, n_prompt=n_prompt, live=placement.live_support(path))
    print(f"live supports_op agrees with ovkit's policy on {live.agree.sum()}/{len(live)} nodes")
    display(live.loc[~live.agree, ["graph", "node", "op", "ne", "on_device", "live_supports_op"]])

# %% [markdown]
# ## 3. Run it, and compare with llama.cpp
#
# Prefill `n_prompt` tokens, then greedy decode; the KV cache stays on the device between
# calls (OpenVINO state). llama.cpp's CPU backend (llama-cpp-python, in a subprocess) is fed
# the very same tokens, so the logits compare position by position. The model runs as the
# backend would run it on a CPU: its policy requantizes `token_embd` and `output` to per-row
# int8 (Q8_0_C), so its logits sit a little further from llama.cpp's than the kernels alone
# would (`Model(..., no_requant=True)` keeps the GGUF's blocks as they are).

# %% [markdown]
# The live allocation view (this process's OpenVINO allocations and RSS, per device) follows the
# run: it refreshes on its own thread while the next cells compile and run the model.

# %% tags=["live-memory"]
from ovkit.widgets import AllocationCharts

charts = AllocationCharts(interval=0.5)
display(charts)

# %% tags=["run"]
prompt = [1 + (i * 37) % (model.hp.n_vocab - 1) for i in range(n_prompt)]
gen = model.generate(prompt, n_predict, all_logits=True)  # every prompt position, for the comparison
charts.refresh()
gen  # times and tok/s; gen.prefill_s, gen.decode_s, gen.compile_s keep the seconds

# %% tags=["compare"]
if notebook.optional("llama.cpp", "the logits against llama.cpp"):
    c = compare(gen, run_reference(path, prompt, gen.tokens, n_ctx=n_ctx))
    per_pos = pd.Series(c["nmse_per_position"], name="logit NMSE vs llama.cpp")
    ax = per_pos.plot(logy=True, marker=".", figsize=(7, 2.5), title="ovkit vs llama.cpp, per position")
    ax.axvline(n_prompt - 0.5, color="grey", ls=":")
    ax.set_xlabel("position (prompt | decode)")
    print(f"greedy tokens agree on {c['greedy_agree']}/{c['greedy_total']}; max NMSE {c['max_nmse']:.1e}")

# %% [markdown]
# ## 4. Where the time goes
#
# OpenVINO's per-node counters of the last prefill and decode run, summed per ggml op.

# %% tags=["profile"]
times = op_profile.op_times(model)
op_profile.op_time_chart(times)
display(times.head(8).style.format({"time_us": "{:,.0f}", "share": "{:.1%}"}, escape="html"))

# %% tags=["live-memory-after"]
charts.refresher.stop()  # the picture stays; its thread stops
allocs = charts.frames()["breakdown"]
display(
    allocs.assign(MiB=allocs["bytes"] / 2**20)
    .drop(columns="bytes")
    .style.format({"MiB": "{:,.1f}"}, escape="html")
)

# %% [markdown]
# ## 5. A real model
#
# The same questions for a real GGUF file (`real_model` in the parameters cell, or
# `papermill -p real_model PATH`): its shape and sizes, the fit per device and a short run on
# this machine's CPU. Without a file the cell says so and the notebook ends here.

# %% tags=["real-model"]
if notebook.optional("model", "a real model's fit and run", real_model):
    real = Model(real_model, n_ctx=n_ctx)
    display(real, footprint.fit(real, core=sim), real.generate(prompt[:8], 8))
