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
check_profile = "laptop"  # the simulated machine ovkit check answers for
check_ctx = 65536  # -c for the Llama-3.2-3B-shaped header (its KV cache: 112 KiB per cell)

# %% tags=["setup"]
# %matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import openvino as ov
from IPython.display import display

import ovkit
from ovkit import gguf as ovgguf
from ovkit import notebook, notebook_log

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

core = ovkit.SimulatedCore(profile) if profile else ov.Core()
dev = ovkit.resolve_device(env={"GGML_OPENVINO_DEVICE": device}, log=False, core=core).device
rng = np.random.default_rng(seed)
workdir = Path(tempfile.mkdtemp(prefix="ovkit-gguf-"))
print("layer runs on", dev, "| files in", workdir)


# %% [markdown]
# ## 1. Write a small GGUF
#
# Random weights with llama's tensor names and shapes; the matrices are quantized with
# ggml's own quantizer (ggml-python) or the `gguf` package's, norms stay f32.


# %% tags=["write"]
if not notebook.quantizable([down_qtype], f"{down_qtype} for ffn_down and the output head; {qtype} here"):
    down_qtype = qtype
tensors = notebook.tiny_llama_tensors(n_layers, n_embd, n_ff, n_vocab, qtype, down_qtype, seed)
meta = {
    "general.name": "ovkit-tiny",
    "llama.block_count": n_layers,
    "llama.embedding_length": n_embd,
    "llama.feed_forward_length": n_ff,
    "llama.attention.head_count": 4,
    "llama.context_length": 128,
}
path = ovgguf.write_gguf(workdir / "tiny.gguf", tensors, arch="llama", metadata=meta)
print(f"wrote {path.name}: {notebook.format_bytes(path.stat().st_size)}, {len(tensors)} tensors")

# %% [markdown]
# ## 2. Inspect it
#
# The metadata and one row per tensor: type, shape in numpy order (`(rows, k)`), bytes and
# offset in the file, and whether the backend accepts the type as a weight.

# %% tags=["inspect"]
model = ovgguf.read_gguf(path)
print("architecture:", model.architecture, "| tensor bytes:", notebook.format_bytes(model.total_bytes))
display(model.metadata_table())
table = model.tensor_table()
display(table)

# %% tags=["bytes-chart"]
by_type = table.groupby("type")["bytes"].sum().sort_values()
unit, size = notebook.byte_scale(by_type.max())
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.barh(by_type.index, by_type.to_numpy() / size)
ax.set_xlabel(f"{unit} in the file")
ax.set_title(f"{path.name}: bytes per tensor type", fontsize=10)
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
fit = notebook.fit_table(model, machines)
display(fit)
for cls in ("CPU", "GPU", "NPU"):
    need, file = notebook.format_bytes(model.weight_bytes(cls)), notebook.format_bytes(model.total_bytes)
    print(f"{cls} class needs {need} (file: {file})")

# %% [markdown]
# ## 4. One layer's matmuls from the quantized blocks
#
# The seven matrices of `blk.0` become graph constants that stay quantized (integer weights,
# scales and a decompression subgraph). The graph runs the layer's projections and its
# SwiGLU feed-forward on the device; each output (from the same input, for `ffn_down` the
# SwiGLU the device computed) is compared with the product over the dequantized weights, and
# with ggml's own quantized kernels when ggml-python is installed. The two error columns
# differ: at f32 inference precision the device computes the dequantized product almost
# exactly, while ggml rounds the activations to 8 bits inside its quantized dot product
# (by design), still well inside test-backend-ops' threshold.

# %% tags=["layer"]
x = rng.standard_normal((n_tokens, n_embd)).astype(np.float32)
layer = notebook.layer_matmul_table(model, 0, x, dev, core=core)
# the row names come from the GGUF file: escaped, like every string cell
layer.style.format(escape="html").format_index(escape="html").format(
    "{:.2e}", subset=[c for c in layer.columns if c.startswith("NMSE")]
)

# %% [markdown]
# ## 5. Will it run, and what will it take? (`ovkit check`)
#
# `ovkit.check` (the command line: `ovkit check FILE -c N [--device D | --simulate P]`) answers
# from the header and tensor table alone, as the real backend would run the file: per device a
# verdict (runs / runs with nodes left to ggml's CPU / fails, when and why, the upstream issue it
# matches), the memory by part (host RAM and device memory apart, the KV cache sized as llama.cpp
# pads it), and the largest single buffer against the GPU's `GPU_DEVICE_MAX_ALLOC_MEM_SIZE`.
# The file here has Llama-3.2-3B's tensor table and no weights (a sparse file: the header is
# all the check reads), checked on a simulated laptop whose iGPU allocates at most 4 GiB at once.

# %% tags=["check"]
from ovkit.model.synthetic import synthetic

shape_3b = dict(
    n_embd=3072, n_layer=28, n_head=24, n_head_kv=8, n_ff=8192, n_vocab=128256, n_ctx_train=131072
)
big = synthetic("llama", workdir / "llama-3b-shape.gguf", weight_type="q4_0", tied_output=True,
                header_only=True, **shape_3b)  # fmt: skip
checked = ovkit.check(big, check_ctx, simulate=check_profile)
display(checked)
checked.plot()

# %% [markdown]
# The same file at a context whose KV cache fits one buffer, and the GPU's verdict at each:

# %% tags=["check-fits"]
for n_ctx in (check_ctx, 16384):
    gpu = ovkit.check(big, n_ctx, simulate=check_profile, device="GPU").device("GPU")
    print(f"-c {n_ctx}: GPU {gpu.summary()}")

# %% [markdown]
# ## Result
#
# The file round-trips, the fit check answers per device, and every matmul of the layer
# agrees with its dequantized weights (test-backend-ops' threshold for quantized `mul_mat`
# is 5e-4).

# %% tags=["result"]
verdicts = list(zip(fit.column("machine"), fit.column("device"), fit.column("fits"), strict=True))
print(f"{path.name}: {len(model.tensors)} tensors, {notebook.format_bytes(model.total_bytes)} of weights")
print("fits on:", ", ".join(f"{m}/{d}" for m, d, ok in verdicts if ok == "yes"))
print("does not fit on:", ", ".join(f"{m}/{d}" for m, d, ok in verdicts if ok != "yes") or "-")
worst = layer["NMSE vs dequantized"].max()
print(f"blk.0 on {dev}: {len(layer)} quantized matmuls, worst NMSE vs dequantized {worst:.1e}")
if notebook.optional("ggml", "the comparison with ggml's quantized kernels"):
    print(f"blk.0 on {dev}: worst NMSE vs ggml {layer['NMSE vs ggml'].max():.1e}")
