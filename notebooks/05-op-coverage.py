# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Op coverage: what runs where, how exactly, how fast
#
# The backend registers a fixed set of ggml ops, and its support policy rejects some cases
# per type, shape or device class. This notebook shows the op table, then runs `test-ops`
# (ovkit's `test-backend-ops`) on this machine's device and on the GPU and NPU classes of a
# simulated machine, draws the result as a heatmap op × type × device class, lists every
# rejection with its reason, and measures time per op.
#
# On simulated devices the policy is the real one for their class; the arithmetic runs on
# this CPU.

# %% tags=["parameters"]
device = "CPU"  # this machine's device to test
profile = "laptop"  # simulated machine providing the GPU and NPU classes
ops = None  # None for every op, or a list such as ["ADD", "MUL_MAT"]
reference = "auto"  # ggml when ggml-python is installed, else numpy
perf_max_mib = 80  # perf cases with at most this many MiB of inputs
perf_max_gflop = 2.0  # and at most this much work

# %% tags=["setup"]
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

import ovkit
from ovkit import oracle, testops
from ovkit.devices import device_class, physical_device_ids
from ovkit.ops import policy

sim = ovkit.SimulatedCore(profile)
targets = {"CPU": (None, device)}  # device class -> (core, device id)
for name in physical_device_ids(sim):
    cls = str(device_class(name))
    if cls in ("GPU", "NPU") and cls not in targets:
        targets[cls] = (sim, name)
print(
    {
        cls: f"{name} ({'simulated ' + profile if c is not None else 'this machine'})"
        for cls, (c, name) in targets.items()
    }
)
print(
    "reference:",
    "ggml (ggml-python)"
    if reference == "ggml" or (reference == "auto" and oracle.ggml_available())
    else "numpy",
)

# %% [markdown]
# ## 1. The op table and its gates
#
# One entry per ggml op, unary and GLU sub-op the backend registers: the builder, how ovkit
# translates it to OpenVINO, how upstream does, its support gates and upstream's notes
# (deviations and quirks). Then every gate of the support policy as data: the rule, the
# device class it is limited to, and whether it is an upstream quirk (applied only in
# upstream-exact mode).

# %% tags=["op-table"]
ops_table = ovkit.op_coverage_table()
kinds = ops_table["kind"].value_counts().to_dict()
print(
    f"{len(ops_table)} entries {kinds}: {int(ops_table['registered'].sum())} registered upstream, "
    f"{int(ops_table['translated'].sum())} translated by ovkit, {int(ops_table['reference'].sum())} with a numpy reference"
)
with pd.option_context("display.max_rows", 60, "display.max_colwidth", 60):
    display(ops_table.set_index("op")[["kind", "builders", "openvino (ovkit)", "gates", "upstream notes"]])

# %% tags=["gates"]
gates = policy.gates_frame()
print(f"{gates['gate'].nunique()} gates over {gates['op'].nunique() - 1} ops (+ global)")
with pd.option_context("display.max_rows", 20, "display.max_colwidth", 70):
    display(gates[["op", "gate", "rule", "device class", "upstream quirk"]].drop_duplicates("gate"))

# %% [markdown]
# ## 2. `test-ops` on this machine
#
# Every case of the catalogue: the policy is asked first (a rejected case is *not supported*,
# with the reason), supported cases run on the device and are compared with the reference by
# NMSE against the op's threshold. The same lines `ovkit test-ops` prints:

# %% tags=["test-cpu"]
cat = testops.build_catalogue()


def type_bucket(label):  # a case's input types ("f32/q4_K", "f16/f32", ...) as one column
    parts = label.split("/")
    if any(p.startswith("q") or p == "mxfp4" for p in parts):
        return "quant"
    low = [p for p in parts if p in ("bf16", "f16")]
    return "/".join(low) if low else ("f32" if "f32" in parts else parts[0])


dtype_of = {c.name: type_bucket(dict(c.params)["type"]) for c in cat}
results = {}
core0, dev0 = targets["CPU"]
results["CPU"] = testops.test_ops(ops=ops, device=dev0, core=core0, reference=reference, progress=False)
cpu = results["CPU"]
for line in [testops.CaseResult(**r).line() for r in cpu.to_dict("records")][:12]:
    print(line)
print(f"  ... {len(cpu)} cases")
summary = testops.summarize(
    [testops.CaseResult(**r) for r in cpu.to_dict("records")], "test", dev0, reference
)
print("\n".join(summary.lines()))

# %% [markdown]
# ## 3. Coverage heatmap: op × type × device class
#
# The same catalogue on the GPU and NPU classes of the simulated machine. Each cell sums up
# the cases of one op and input type on one device class (every quantized weight type
# shares the `quant` column): all pass, some rejected by the policy, all rejected, or a
# failure (a wrong result; there should be none).

# %% tags=["test-classes"]
for cls, (c, name) in targets.items():
    if cls not in results:
        results[cls] = testops.test_ops(ops=ops, device=name, core=c, reference=reference, progress=False)
every = pd.concat([df.assign(device_class=cls) for cls, df in results.items()], ignore_index=True)
every["dtype"] = every["case"].map(dtype_of)
every["op"] = every["op"].str.replace("UNARY:", "").str.replace("GLU:", "")
counts = every.groupby(["device_class", "status"]).size().unstack(fill_value=0)
display(counts)

# %% tags=["heatmap"]
CATEGORIES = ["all rejected", "some rejected", "all pass", "FAIL"]


def cell(statuses):
    s = set(statuses)
    if "FAIL" in s:
        return 3
    if s == {"OK"}:
        return 2
    return 1 if "OK" in s else 0


grid = every.groupby(["op", "device_class", "dtype"])["status"].agg(cell).unstack(["device_class", "dtype"])
grid = grid.reindex(columns=sorted(grid.columns, key=lambda k: (list(targets).index(k[0]), k[1])))
fig, ax = plt.subplots(figsize=(1.0 + 0.55 * grid.shape[1], 0.8 + 0.26 * grid.shape[0]))
cmap = ListedColormap(["#bbbbbb", "#f0c419", "#4caf50", "#d62728"])
ax.imshow(np.ma.masked_invalid(grid.to_numpy(dtype=float)), cmap=cmap, vmin=0, vmax=3, aspect="auto")
ax.set_yticks(range(len(grid.index)), grid.index, fontsize=8)
ax.set_xticks(range(grid.shape[1]), [f"{c}\n{t}" for c, t in grid.columns], fontsize=8)
ax.xaxis.tick_top()
classes = [c for c, _ in grid.columns]
for i in range(1, len(classes)):
    if classes[i] != classes[i - 1]:
        ax.axvline(i - 0.5, color="black", lw=1.5)
ax.legend(
    handles=[Patch(color=cmap(i), label=n) for i, n in enumerate(CATEGORIES)],
    loc="upper left",
    bbox_to_anchor=(1.01, 1),
    fontsize=8,
)
ax.set_title("test-ops: op × input type × device class (white: no case)", fontsize=9, pad=28)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Why a case is not supported
#
# Every rejection carries the policy's reason and the key of the gate that made it, so a
# rejected case can be traced to one rule. Grouped by gate and device class:

# %% tags=["reasons"]
rejected = every[every["status"] == "not supported"].copy()
rejected["gate"] = rejected["detail"].str.extract(r"\[([^\]]+)\]\s*$")[0]
by_gate = rejected.groupby(["gate", "device_class"]).size().unstack(fill_value=0)
display(by_gate)
for cls in targets:
    only = rejected[rejected["device_class"] == cls]
    print(f"{cls}: {len(only)} cases rejected, e.g.")
    for _, r in only.drop_duplicates("gate").head(3).iterrows():
        print(f"   {r['case']}: {r['detail']}")


# %% [markdown]
# ## 5. Performance per op
#
# `test-ops` in perf mode: median time per steady-state run (compile excluded), and GFLOPS
# for matrix/attention ops or GB/s moved for memory-bound ones. Only cases under the size
# limits of the parameters run here, so the notebook stays quick.


# %% tags=["perf"]
def small(c):
    mib = sum(np.prod(i.shape) * np.dtype(testops.NUMPY_OF[i.dtype]).itemsize for i in c.inputs) / 2**20
    return mib <= perf_max_mib and c.flops <= perf_max_gflop * 1e9


perf_cases = [c for c in testops.select(testops.build_perf_catalogue(), ops) if small(c)]
rows = [testops.perf_case(c, dev0, core0, min_seconds=0.05, max_runs=50) for c in perf_cases]
perf = pd.DataFrame(
    [
        {
            "op": r.op,
            "case": r.case,
            "status": r.status,
            "us/run": r.us_per_run,
            "GFLOPS": r.gflops,
            "GB/s": r.gbps,
        }
        for r in rows
    ]
)
with pd.option_context("display.max_colwidth", 80, "display.float_format", "{:,.2f}".format):
    display(perf)

# %% tags=["perf-chart"]
ok = perf[perf["status"] == "OK"]
fig, ax = plt.subplots(figsize=(7, 0.5 + 0.3 * len(ok)))
colors = ["tab:blue" if pd.notna(g) else "tab:orange" for g in ok["GFLOPS"]]
ax.barh(ok["case"].str.slice(0, 60), ok["us/run"], color=colors)
ax.set_xscale("log")
ax.set_xlabel("µs per run (log)")
ax.invert_yaxis()
for y, (us, gflops, gbps) in enumerate(zip(ok["us/run"], ok["GFLOPS"], ok["GB/s"], strict=True)):
    rate = f"{gflops:,.1f} GFLOPS" if pd.notna(gflops) else f"{gbps:,.1f} GB/s"
    ax.text(us * 1.08, y, rate, va="center", fontsize=7)
ax.set_xlim(right=ok["us/run"].max() * 12)
ax.set_title(f"time per op on {dev0} (blue: compute-bound, orange: memory-bound)", fontsize=9)
ax.tick_params(axis="y", labelsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Result
#
# Totals per device class; no supported case may fail.

# %% tags=["result"]
for cls, df in results.items():
    ok, fail, unsup = ((df["status"] == s).sum() for s in ("OK", "FAIL", "not supported"))
    print(f"{cls}: {ok}/{ok + fail} supported cases pass, {unsup} not supported, {fail} FAIL")
timed = perf["status"].value_counts().to_dict()
print(f"perf on {dev0}: {len(perf)} cases timed, statuses {timed}")
