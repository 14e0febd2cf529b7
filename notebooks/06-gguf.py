# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · GGUF: inspect a model file, check it fits, run a layer from it
#
# llama.cpp loads models from GGUF files: metadata plus tensors, most of them quantized.
# This notebook writes a small llama-style GGUF with the `gguf` package (no download),
# reads it back as ovkit sees it, checks per device whether its weights fit (after the
# backend's requantization policy), and runs one layer's matmuls straight from its quantized
# blocks on the device, compared with the dequantized weights and with ggml.

# %% tags=["parameters"]
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

# %% tags=["setup"]
# %matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import openvino as ov
import pandas as pd
from IPython.display import display

import ovkit
from ovkit import gguf as ovgguf
from ovkit import oracle, quant
from ovkit.graph import Graph

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
dev = ovkit.resolve_device(core, env={"GGML_OPENVINO_DEVICE": device}, log=False).device
rng = np.random.default_rng(seed)
workdir = Path(tempfile.mkdtemp(prefix="ovkit-gguf-"))
print("layer runs on", dev, "| files in", workdir)


# %% [markdown]
# ## 1. Write a small GGUF
#
# Random weights with llama's tensor names and shapes; the matrices are quantized with
# ggml's own quantizer (ggml-python) or the `gguf` package's, norms stay f32.


# %% tags=["write"]
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

# %% [markdown]
# ## 2. Inspect it
#
# The metadata and one row per tensor: type, shape in numpy order (`(rows, k)`), bytes and
# offset in the file, and whether the backend accepts the type as a weight.

# %% tags=["inspect"]
model = ovgguf.read_gguf(path)
print("architecture:", model.architecture, "| tensor bytes:", f"{model.total_bytes:,}")
display(model.metadata_table())
table = model.tensor_table()
display(table)

# %% tags=["bytes-chart"]
by_type = table.groupby("type")["bytes"].sum().sort_values()
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.barh(by_type.index, by_type.to_numpy() / 1024)
ax.set_xlabel("KiB in the file")
ax.set_title(f"{path.name}: bytes per tensor type")
fig.tight_layout()
plt.show()

# %% [markdown]
# Broken files give a clear error naming the file and the problem, never a crash:

# %% tags=["corrupt"]
blob = path.read_bytes()
for name, data in [("truncated.gguf", blob[: len(blob) // 2]), ("header-only.gguf", blob[:40])]:
    bad = workdir / name
    bad.write_bytes(data)
    try:
        ovgguf.read_gguf(bad)
    except ovgguf.GGUFError as exc:
        print(f"{name}: GGUFError: {str(exc).replace(str(workdir) + '/', '')}")

# %% [markdown]
# ## 3. Does it fit?
#
# For each device, the bytes the weights need *after the requantization policy of its
# class* (the output head and embeddings become per-row i8, the NPU takes 4-bit groups of
# 128, ...) against the device's free memory (for the CPU, the host's available memory).
# Here on this machine and on the simulated machines; `gpu-overcommit` has a GPU with no
# free memory left.

# %% tags=["fit"]
machines = {"this machine": None} | {f"simulated {p}": ovkit.SimulatedCore(p) for p in fit_profiles}
fit = pd.concat([model.fit_check(c).assign(machine=m) for m, c in machines.items()], ignore_index=True)
fit["weight_MiB"] = fit["weight_bytes"] / 2**20
fit["free_MiB"] = fit["free_bytes"] / 2**20
with pd.option_context("display.float_format", "{:,.2f}".format):
    display(fit[["machine", "device", "class", "weight_MiB", "free_MiB", "fits"]])
for cls in ("CPU", "GPU", "NPU"):
    print(f"{cls} class needs {model.weight_bytes(cls):,} bytes (file: {model.total_bytes:,})")

# %% [markdown]
# ## 4. One layer's matmuls from the quantized blocks
#
# The seven matrices of `blk.0` become graph constants that stay quantized (integer weights,
# scales and a decompression subgraph). The graph runs the layer's projections and its
# SwiGLU feed-forward on the device; each output is compared with the same product over the
# dequantized weights, and with ggml's own quantized kernels when ggml-python is installed.
# Look at the two error columns: the device agrees with ggml far more closely than with the
# exact f32 product, because both round the activations to 8 bits inside the quantized dot
# product (ggml by design, OpenVINO's CPU plugin by its dynamic quantization).

# %% tags=["layer"]
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
    row = {
        "matmul": k,
        "type": w[k].dtype,
        "shape": w[k].shape,
        "NMSE vs dequantized": oracle.nmse(got[k], expected[k]),
    }
    if oracle.ggml_available():
        blocks = oracle.QuantArray(w[k].dtype, w[k].shape, w[k].raw)
        row["NMSE vs ggml"] = oracle.nmse(
            got[k], oracle.ggml_call("mul_mat", blocks, act if k == "ffn_down" else x)
        )
    rows.append(row)
layer = pd.DataFrame(rows).set_index("matmul")
with pd.option_context("display.float_format", "{:.2e}".format):
    display(layer)

# %% [markdown]
# ## Result
#
# The file round-trips, the fit check answers per device, and every matmul of the layer
# agrees with its dequantized weights (test-backend-ops' threshold for quantized `mul_mat`
# is 5e-4).

# %% tags=["result"]
print(f"{path.name}: {len(model.tensors)} tensors, {model.total_bytes:,} bytes of weights")
print("fits on:", ", ".join(f"{r.machine}/{r.device}" for r in fit.itertuples() if r.fits))
print("does not fit on:", ", ".join(f"{r.machine}/{r.device}" for r in fit.itertuples() if not r.fits) or "-")
worst = layer["NMSE vs dequantized"].max()
print(f"blk.0 on {dev}: {len(layer)} quantized matmuls, worst NMSE vs dequantized {worst:.1e}")
if "NMSE vs ggml" in layer:
    print(f"blk.0 on {dev}: worst NMSE vs ggml {layer['NMSE vs ggml'].max():.1e}")
