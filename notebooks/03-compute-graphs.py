# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Compute graphs: ggml's builder API on an OpenVINO device
#
# `ovkit.graph.Graph` mirrors ggml's builder functions one to one (`ggml_mul_mat(ctx, a, b)`
# is `g.mul_mat(a, b)`), with shapes in **numpy order** (numpy `(ne1, ne0)` is ggml
# `ne = [ne0, ne1]`). A graph runs on the selected device through OpenVINO, or in reference
# mode (numpy, ggml's semantics). This notebook builds graphs, checks them against the
# reference and against ggml itself, looks at per-node timings and the compiled-graph cache,
# and runs a small transformer block with a stateful KV cache.

# %% tags=["parameters"]
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

# %% tags=["setup"]
# %matplotlib inline
import time

import matplotlib.pyplot as plt
import numpy as np
import openvino as ov
import pandas as pd
from IPython.display import display

import ovkit
from ovkit import engine, notebook, notebook_log, oracle
from ovkit.decoder_layer import CACHE_NAMES, BlockConfig, block_inputs, block_weights, transformer_block
from ovkit.graph import Graph, GraphError, UnsupportedOpError

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
env = {"GGML_OPENVINO_DEVICE": device} if device else None
dev = ovkit.resolve_device(env=env, log=False, core=core).device
rng = np.random.default_rng(seed)
print("running on", dev, f"(simulated {profile}, computed on this CPU)" if profile else "")

# %% [markdown]
# ## 1. A first graph
#
# `g.mul_mat(a, b)` is ggml's matrix product: the result is `b @ a.T` (both operands share
# their innermost dimension `k`). Each result is a `Tensor` that knows its ggml op, its shape
# in both orders and its type; nothing runs until `compute`.

# %% tags=["first-graph"]
g = Graph()
a = g.input("a", (4, 8))  # 4 rows of k=8: ggml ne [8, 4]
b = g.input("b", (3, 8))
bias = g.input("bias", (4,))
y = g.add(g.mul_mat(a, b), bias)
for t in (a, y.srcs[0], y):
    print(f"{t.op:8} shape {t.shape}  ne {t.ne}  {t.dtype}")

inputs = {
    name: rng.standard_normal(t.shape).astype(np.float32)
    for name, t in {"a": a, "b": b, "bias": bias}.items()
}
out = g.compute(y, inputs, device=dev, core=core)
print(out)

# %% [markdown]
# ## 2. Checking against the reference and against ggml
#
# Three answers for the same graph: OpenVINO on the device, ovkit's numpy reference of
# ggml's semantics (`mode="reference"`), and ggml's own CPU backend through ggml-python
# (when installed). The error measure is test-backend-ops' normalized mean squared error;
# its default threshold is 1e-7.

# %% tags=["check"]
expected = inputs["b"] @ inputs["a"].T + inputs["bias"]
answers = {"numpy b @ a.T + bias": expected, "ovkit reference": g.compute(y, inputs, mode="reference")}
if notebook.optional("ggml", "the answer of ggml's own CPU backend"):
    answers["ggml CPU backend"] = oracle.ggml_call(
        "add", oracle.ggml_call("mul_mat", inputs["a"], inputs["b"]), inputs["bias"]
    )
check = pd.DataFrame(
    [
        {"compared with": k, "NMSE": oracle.nmse(out, v), "ok (< 1e-7)": oracle.nmse(out, v) < 1e-7}
        for k, v in answers.items()
    ]
).set_index("compared with")
display(check)

# %% [markdown]
# ## 3. Errors at build time, and ops the device rejects
#
# A shape or type ggml would reject raises `GraphError` when the node is built, naming the op,
# the operand and what was expected. An op the device's support policy rejects raises
# `UnsupportedOpError` with the policy's reason when it is run there; reference mode still
# computes it. Here: a per-channel division, which the backend keeps off the GPU class
# (a fused GEMM there yields inf).

# %% tags=["build-error"]
try:
    g.mul_mat(a, g.input("wrong_k", (3, 7)))
except GraphError as exc:
    print("GraphError:", exc)

# %% tags=["errors"]
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

# %% [markdown]
# ## 4. The compiled-graph cache
#
# Compiling is the expensive step. The engine keys compiled models by graph *structure*
# (ops, shapes, types, parameters, device, compile configuration), so running the same
# structure again, even from a freshly built graph, is a cache hit that does not compile.

# %% tags=["cache"]
eng = engine.get_engine(core)
eng.reset_stats()
runs = [("first run (n=8)", 8), ("same structure, new graph", 8), ("new shape (n=16)", 16)]
for what, n in runs:
    gg = Graph()
    x = gg.input("x", (n, 64))
    w = gg.constant(np.ones((64, 64), np.float32))
    t0 = time.perf_counter()
    gg.compute(gg.mul_mat(w, x), {"x": np.ones((n, 64), np.float32)}, device=dev, core=core)
    print(f"{what:28} {notebook.format_duration(time.perf_counter() - t0):>10}")
stats = eng.stats()
print(stats)

# %% [markdown]
# ## 5. Per-node profiling
#
# With profiling on (OpenVINO's `PERF_COUNT`, upstream's `GGML_OPENVINO_PROFILING`), each run
# reports how long every layer of the compiled model took. ovkit names the OpenVINO layers
# after the ggml node they were built for (`MUL_MAT #3`), so the timings group by ggml node;
# the OpenVINO layer types (`FullyConnected`, `RMS`, ...) show what the plugin fused them into.
# Profiling is part of the compile configuration, so it compiles a separate entry.

# %% tags=["profile"]
gp = Graph()
xp = gp.input("x", (32, 256))
wp = gp.constant(rng.standard_normal((256, 256)).astype(np.float32), name="w")
yp = gp.soft_max(gp.mul_mat(wp, gp.rms_norm(xp, 1e-6)))
feed = {"x": rng.standard_normal((32, 256)).astype(np.float32)}
profiled = engine.RunConfig(inference_precision="f32", profiling=True)
engine.compute_graph(gp, [yp], feed, dev, core=core, config=profiled)
prof = notebook.NodeProfile.from_frame(eng.last_profile(), dev)
prof

# %% tags=["profile-chart"]
prof.chart()

# %% [markdown]
# ## 6. A transformer block with a stateful KV cache
#
# `ovkit.decoder_layer.transformer_block` builds one decoder layer as llama.cpp does: RMS norm,
# Q/K/V projections, ROPE (NEOX), the new K/V rows written into an f16 cache with `set_rows`,
# flash attention over the whole cache with a causal mask (grouped-query: `n_heads` query
# heads share `n_kv_heads` K/V heads), the output projection, and a SwiGLU feed-forward, each
# with a residual add. K and V enter attention as `PERMUTE <- VIEW` of the cache, the pattern
# the backend's flash-attention gate requires.

# %% tags=["block-build"]
cfg = BlockConfig(
    d=d_model, heads=n_heads, kv_heads=n_kv_heads, head_dim=d_model // n_heads, ff=d_ff, ctx=n_ctx
)
weights = block_weights(cfg, seed)
n_total = n_tokens + n_decode
tokens = rng.standard_normal((n_total, d_model)).astype(np.float32)
empty = {name: np.zeros((n_ctx, cfg.kv_dim), np.float16) for name in CACHE_NAMES}
cache_k = CACHE_NAMES[0]  # layer 0's K cache, as llama.cpp names it
g_full, out_full, _ = transformer_block(cfg, n_total, weights)
print(
    f"{len(g_full.nodes)} nodes; ops:", ", ".join(sorted({str(t.op) for t in g_full.nodes if not t.is_leaf}))
)

# %% tags=["block-check"]
# The whole sequence at once (no state): device vs ovkit's reference.
full_inputs = {**block_inputs(cfg, tokens, 0), **empty}
full = g_full.compute(out_full, full_inputs, device=dev, core=core)
full_ref = g_full.compute(out_full, full_inputs, mode="reference")
block_nmse = oracle.nmse(full, full_ref)
print(f"block output {full.shape}, NMSE vs reference {block_nmse:.2e}")

# %% [markdown]
# Now the same tokens the way a llama.cpp server sees them: the prompt in one call, then one
# token per call. The K/V caches are *state*: with stateful execution they live inside the
# compiled model as OpenVINO variables (ReadValue/Assign) and grow across calls; only the new
# token goes in. The state can be read, set (the prompt's cache is handed to the decode
# graph) and reset. On the NPU class stateful execution is forced off, as upstream does.

# %% tags=["block-stateful"]
g_pre, out_pre, next_pre = transformer_block(cfg, n_tokens, weights)
prefill = engine.graph_session(g_pre, out_pre, next_pre, dev, core=core, stateful=True)
g_dec, out_dec, next_dec = transformer_block(cfg, 1, weights)
decode = engine.graph_session(g_dec, out_dec, next_dec, dev, core=core, stateful=True)
print("stateful execution:", prefill.stateful)

# %% tags=["block-decode"]
outputs = [prefill.compute(block_inputs(cfg, tokens[:n_tokens], 0))[0]]
for name in CACHE_NAMES:  # the prompt's cache becomes the decode graph's state
    decode.set_state(name, prefill.state(name))
filled = [int(decode.state(cache_k).any(axis=1).sum())]
for i in range(n_tokens, n_total):
    outputs.append(decode.compute(block_inputs(cfg, tokens[i : i + 1], i))[0])
    filled.append(int(decode.state(cache_k).any(axis=1).sum()))
decode_nmse = oracle.nmse(np.vstack(outputs), full)
print("cache rows filled after prompt and each decoded token:", filled)
print(f"prompt + {n_decode} decoded tokens vs the whole sequence at once: NMSE {decode_nmse:.2e}")

# %% tags=["cache-heatmap"]
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.imshow(np.abs(decode.state(cache_k).astype(np.float32)).T, aspect="auto", cmap="viridis")
ax.set_xlabel("KV cache row (token position)")
ax.set_ylabel("K channel")
ax.set_title(f"K cache after {n_total} tokens: rows {n_total}..{n_ctx - 1} still empty", fontsize=10)
plt.show()
decode.reset_state()
print("after reset_state: cache_k all zero:", not decode.state(cache_k).any())

# %% [markdown]
# ## Result
#
# Every check of this notebook in one table: the device agrees with the reference and with
# ggml, a second run of a structure is a cache hit, and decoding with the stateful KV cache
# reproduces the whole-sequence result.

# %% tags=["result"]
checks = {
    "mul_mat + add vs numpy (NMSE < 1e-7)": oracle.nmse(out, expected) < 1e-7,
    f"transformer block vs reference (NMSE {block_nmse:.1e} < 1e-5)": block_nmse < 1e-5,
    f"stateful decode vs whole sequence (NMSE {decode_nmse:.1e} < 1e-5)": decode_nmse < 1e-5,
    f"cache hits in section 4 ({stats.hits} >= 1)": stats.hits >= 1,
}
for what, ok in checks.items():
    print(f"{'pass' if ok else 'FAIL'}  {what}")
print("all pass:", all(checks.values()))
