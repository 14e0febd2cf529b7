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
from ovkit import engine, oracle
from ovkit.graph import Graph, GraphError, UnsupportedOpError

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
env = {"GGML_OPENVINO_DEVICE": device} if device else None
dev = ovkit.resolve_device(core, env=env, log=False).device
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
if oracle.ggml_available():
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

# %% tags=["errors"]
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

# %% [markdown]
# ## 4. The compiled-graph cache
#
# Compiling is the expensive step. The engine keys compiled models by graph *structure*
# (ops, shapes, types, parameters, device, compile configuration), so running the same
# structure again, even from a freshly built graph, is a cache hit that does not compile.

# %% tags=["cache"]
eng = engine.get_engine(core)
eng.reset_stats()


def run_once(n):
    gg = Graph()
    x = gg.input("x", (n, 64))
    w = gg.constant(np.ones((64, 64), np.float32))
    t0 = time.perf_counter()
    gg.compute(gg.mul_mat(w, x), {"x": np.ones((n, 64), np.float32)}, device=dev, core=core)
    return (time.perf_counter() - t0) * 1e3


timings = {
    "first run (n=8)": run_once(8),
    "same structure, new graph": run_once(8),
    "new shape (n=16)": run_once(16),
}
for what, ms in timings.items():
    print(f"{what:28} {ms:8.2f} ms")
stats = eng.stats()
print(stats)
display(eng.table())

# %% [markdown]
# ## 5. Per-node profiling
#
# With profiling on (OpenVINO's `PERF_COUNT`, upstream's `GGML_OPENVINO_PROFILING`), each run
# reports how long every node of the compiled model took. Profiling is part of the compile
# configuration, so it compiles a separate entry; with it off there are no numbers at all.

# %% tags=["profile"]
gp = Graph()
xp = gp.input("x", (32, 256))
wp = gp.constant(rng.standard_normal((256, 256)).astype(np.float32))
yp = gp.soft_max(gp.mul_mat(wp, gp.rms_norm(xp, 1e-6)))
profiled = engine.RunConfig(inference_precision="f32", profiling=True)
engine.compute_graph(
    gp, [yp], {"x": rng.standard_normal((32, 256)).astype(np.float32)}, dev, core=core, config=profiled
)
prof = eng.last_profile()
display(prof.head(12))

# %% tags=["profile-chart"]
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

# %% [markdown]
# ## 6. A transformer block with a stateful KV cache
#
# One decoder layer as llama.cpp builds it: RMS norm, Q/K/V projections, ROPE (NEOX), the
# new K/V rows written into the cache with `set_rows`, flash attention over the whole cache
# with a causal mask (grouped-query: `n_heads` query heads share `n_kv_heads` K/V heads),
# the output projection, and a SwiGLU feed-forward, each with a residual add. K and V enter
# attention as `PERMUTE <- VIEW` of their base tensors, the pattern the backend's
# flash-attention gate requires.

# %% tags=["block-build"]
head_dim = d_model // n_heads
kv_dim = n_kv_heads * head_dim
shapes = {
    "wq": (d_model, d_model),
    "wk": (kv_dim, d_model),
    "wv": (kv_dim, d_model),
    "wo": (d_model, d_model),
    "w_gate": (d_ff, d_model),
    "w_up": (d_ff, d_model),
    "w_down": (d_model, d_ff),
}
weights = {n: (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for n, s in shapes.items()}
weights |= {n: (1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32) for n in ("attn_norm", "ffn_norm")}
ROPE = (
    head_dim,
    2,
    n_ctx,
    10000.0,
    1.0,
    0.0,
    1.0,
    32.0,
    1.0,
)  # n_dims, mode NEOX, n_ctx_orig, freq_base, ...


def transformer_block(n):
    """One layer for n new tokens: (graph, output, next K cache, next V cache)."""
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
        return g.permute(
            g.view_3d(t, head_dim, n_head, rows, head_dim * es, head_dim * n_head * es, 0), 0, 2, 1, 3
        )

    att = g.flash_attn_ext(
        heads(q, n_heads, n),
        heads(next_k, n_kv_heads, n_ctx),
        heads(next_v, n_kv_heads, n_ctx),
        mask,
        1 / np.sqrt(head_dim),
        0.0,
        0.0,
    )
    x1 = g.add(x, g.mul_mat(w["wo"], g.reshape_2d(att, d_model, n)))
    h2 = g.mul(g.rms_norm(x1, 1e-5), w["ffn_norm"])
    ffn = g.mul_mat(w["w_down"], g.swiglu_split(g.mul_mat(w["w_gate"], h2), g.mul_mat(w["w_up"], h2)))
    return g, g.add(x1, ffn), next_k, next_v


def positions(start, n):
    """Inputs for tokens start..start+n-1: positions, cache rows and the causal mask."""
    mask = np.full((n, n_ctx), -np.inf, np.float16)
    for i in range(n):
        mask[i, : start + i + 1] = 0
    return {
        "pos": np.arange(start, start + n, dtype=np.int32),
        "slot": np.arange(start, start + n, dtype=np.int64),
        "mask": mask,
    }


n_total = n_tokens + n_decode
tokens = rng.standard_normal((n_total, d_model)).astype(np.float32)
empty = {"cache_k": np.zeros((n_ctx, kv_dim), np.float32), "cache_v": np.zeros((n_ctx, kv_dim), np.float32)}
g_full, out_full, _, _ = transformer_block(n_total)
print(f"{len(g_full.nodes)} nodes; ops:", sorted({t.op for t in g_full.nodes if not t.is_leaf}))

# %% tags=["block-check"]
# The whole sequence at once (no state): device vs ovkit's reference.
full_inputs = {"x": tokens, **positions(0, n_total), **empty}
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

# %% tags=["cache-heatmap"]
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.imshow(np.abs(decode.state("cache_k")).T, aspect="auto", cmap="viridis")
ax.set_xlabel("KV cache row (token position)")
ax.set_ylabel("K channel")
ax.set_title(f"K cache after {n_total} tokens: rows {n_total}..{n_ctx - 1} still empty")
fig.tight_layout()
plt.show()
decode.reset_state()
print("after reset_state: cache_k all zero:", not decode.state("cache_k").any())

# %% [markdown]
# ## Result
#
# Every check of this notebook in one table: the device agrees with the reference and with
# ggml, a second run of a structure is a cache hit, and decoding with the stateful KV cache
# reproduces the whole-sequence result.

# %% tags=["result"]
summary = pd.DataFrame(
    [
        {
            "check": "mul_mat + add vs numpy",
            "value": oracle.nmse(out, expected),
            "pass": oracle.nmse(out, expected) < 1e-7,
        },
        {"check": "transformer block vs reference (NMSE)", "value": block_nmse, "pass": block_nmse < 1e-5},
        {
            "check": "stateful decode vs whole sequence (NMSE)",
            "value": decode_nmse,
            "pass": decode_nmse < 1e-5,
        },
        {"check": "cache hits in section 4", "value": stats.hits, "pass": stats.hits >= 1},
    ]
).set_index("check")
print(summary.to_string())
print("all pass:", bool(summary["pass"].all()))
