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
upstream_ops = ["ADD", "MUL_MAT", "SOFT_MAX", "ROPE"]  # ops run three ways (needs install-upstream)
catalogue_ops = ["ADD", "ARGSORT", "SOFT_MAX", "POOL_2D"]  # test-backend-ops ops run vs ggml here
catalogue_rows_per_op = 2  # rows of each of those ops (the whole list: benchmarks/bench_catalogue.py)

# %% tags=["setup"]
# %matplotlib inline
import pandas as pd
from IPython.display import display

import ovkit
from ovkit import notebook, notebook_log, oracle, testops
from ovkit.catalogue import curated
from ovkit.catalogue.result import Result
from ovkit.devices import device_class, physical_device_ids
from ovkit.ops import policy

notebook_log.install()  # ovkit's log lines as outputs of the cell, warnings marked

sim = ovkit.SimulatedCore(profile)
targets = {"CPU": (None, device)}  # device class -> (core, device id); GPU and NPU from the profile
for name in physical_device_ids(sim):
    targets.setdefault(str(device_class(name)), (sim, name))
for cls, (c, name) in targets.items():
    print(f"{cls} class: {name}", f"(simulated {profile}, computed on this CPU)" if c else "(this machine)")
uses_ggml = reference == "ggml" or (reference == "auto" and oracle.ggml_available())
print("reference:", "ggml (ggml-python)" if uses_ggml else "numpy")

# %% [markdown]
# ## 1. The op table and its gates
#
# One entry per ggml op, unary and GLU sub-op ovkit builds (`registered`: whether the backend
# registers it too), counted per op family first. The full table (click to open) gives each
# entry's builder, how ovkit translates it to OpenVINO, its support gates and upstream's notes
# (deviations and quirks), with every cell in full. Then the gates of the support policy: how
# many per device class, and (click to open) each rule, the device class it is limited to and
# whether it is an upstream quirk (applied only in upstream-exact mode).

# %% tags=["op-table"]
ops_table = ovkit.op_coverage_table()
ops_table["family"] = ops_table["op"].map(notebook.op_family)
kinds = ops_table["kind"].value_counts().to_dict()
print(
    f"{len(ops_table)} entries {kinds}: {int(ops_table['registered'].sum())} registered upstream, "
    f"{int(ops_table['translated'].sum())} translated by ovkit, {int(ops_table['reference'].sum())} with a numpy reference"
)
per_family = ops_table.groupby("family").agg(
    entries=("op", "size"),
    registered=("registered", "sum"),
    translated=("translated", "sum"),
    ops=("op", lambda o: ", ".join(str(getattr(x, "value", x)).rsplit(".", 1)[-1] for x in o)),
)
display(per_family.sort_values("entries", ascending=False).style.set_properties(
    subset=["ops"], **{"white-space": "normal", "text-align": "left", "max-width": "36em"}
))  # fmt: skip
full = ops_table.set_index("op")[
    ["family", "kind", "builders", "openvino (ovkit)", "gates", "upstream notes"]
]
cells = {"white-space": "pre-wrap", "text-align": "left", "vertical-align": "top", "max-width": "24em"}
display(
    notebook.Collapsed(
        f"the full op table: {len(full)} entries, every cell in full (click to open)",
        full.style.format(escape="html").set_properties(**cells),
    )
)

# %% tags=["gates"]
gates = policy.gates_frame()
print(f"{gates['gate'].nunique()} gates over {gates['op'].nunique() - 1} ops (+ global)")
unique = gates.drop_duplicates("gate")
display(
    unique.assign(**{"device class": unique["device class"].fillna("every class").replace("", "every class")})
    .groupby(["device class", "upstream quirk"])
    .size()
    .unstack(fill_value=0)
    .rename_axis(index="gates limited to", columns="upstream quirk")
)
display(
    notebook.Collapsed(
        f"every gate: {len(unique)} rules (click to open)",
        unique[["op", "gate", "rule", "device class", "upstream quirk"]]
        .style.format(escape="html")
        .set_properties(subset=["rule"], **cells),
    )
)

# %% [markdown]
# ## 2. `test-ops` on this machine
#
# Every case of the catalogue: the policy is asked first (a rejected case is *not supported*,
# with the reason), supported cases run on the device and are compared with the reference by
# NMSE against the op's threshold. The same lines `ovkit test-ops` prints:

# %% tags=["test-cpu"]
case_types = {c.name: curated.param(c, "type") for c in testops.build_catalogue()}
core0, dev0 = targets["CPU"]
results = {"CPU": testops.test_ops(ops=ops, device=dev0, core=core0, reference=reference, progress=False)}
cases = [Result(**r) for r in results["CPU"].to_dict("records")]
for case in cases[:12]:
    print(case.line())
print(f"  ... {len(cases)} cases")
print("\n".join(testops.summarize(cases, "test", dev0, reference).lines()))

# %% [markdown]
# ## 3. Coverage heatmap: op family × type × device class
#
# The same catalogue on the GPU and NPU classes of the simulated machine. Each cell sums up
# the cases of one op family and input type on one device class (every quantized weight type
# shares the `quant` column): all pass, some rejected by the policy, all rejected, or a
# failure (a wrong result; there should be none). The same per op opens below it.

# %% tags=["test-classes"]
for cls, (c, name) in targets.items():
    if cls not in results:
        results[cls] = testops.test_ops(ops=ops, device=name, core=c, reference=reference, progress=False)
every = notebook.coverage_frame(results, case_types)
every.groupby(["device_class", "status"]).size().unstack(fill_value=0)

# %% tags=["heatmap"]
display(notebook.coverage_heatmap(every, by="family"))
display(
    notebook.Collapsed(
        f"per op: {every['op'].nunique()} ops (click to open)", notebook.coverage_heatmap(every)
    )
)

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
perf_cases = notebook.perf_cases_within(
    testops.select(testops.build_perf_catalogue(), ops), perf_max_mib, perf_max_gflop
)
perf = notebook.perf_table(
    testops.perf_case(c, dev0, min_seconds=0.05, max_runs=50, core=core0) for c in perf_cases
)
perf.style.format({"µs/run": "{:,.1f}", "GFLOPS": "{:,.2f}", "GB/s": "{:,.2f}"}, na_rep="-", escape="html")

# %% tags=["perf-chart"]
notebook.perf_chart(perf, dev0)

# %% [markdown]
# ## 6. Three ways: ovkit, the real backend, ggml
#
# With `scripts/install-upstream`, llama.cpp's OpenVINO backend itself runs each case from the
# same program: `supports_op` on every tensor of its ggml graph, then
# `ggml_backend_graph_compute` on `OPENVINO0` (in a child process, so a crash there is reported
# as `CRASH`, never taking this kernel down). Each side's NMSE is against ggml's CPU backend on
# the same inputs; `agrees` says whether the real backend's verdict is what ovkit's policy
# predicts at the installed build's revision.

# %% tags=["upstream-three-way"]
from ovkit import upstream

if notebook.optional("backend", "the three-way run against the real backend"):
    picked = testops.select(upstream.cases.catalogue(), upstream_ops)
    three = upstream.three_way(picked, progress=False)
    cols = ["case", "upstream_status", "upstream_nmse", "ovkit_status", "ovkit_nmse", "ovkit_rule", "agrees"]
    display(
        three[cols].style.format(
            {"upstream_nmse": "{:.1e}", "ovkit_nmse": "{:.1e}"}, na_rep="–", escape="html"
        )
    )

# %% [markdown]
# The live agreement: the installed backend's `supports_op` on every test-backend-ops case of
# the shipped verdict file, against ovkit's policy at the installed revision (every difference
# would be listed with its rule).

# %% tags=["upstream-agreement"]
if notebook.optional("backend", "the live supports_op agreement"):
    live = upstream.agreement(catalogue=False, progress=False)
    print("\n".join(live.lines()))

# %% [markdown]
# ## 7. test-backend-ops' own catalogue
#
# The shipped half of llama.cpp's `test-backend-ops` list (9,747 rows, each an op and its
# parameters) is built case by case as test-backend-ops builds it: the same leaves, views,
# permutes and value ranges, and its error bound per op. Without running anything, each row is
# *upstream-accepted* (the backend's support policy accepts it and ovkit translates it),
# *ovkit-only* (refused by the backend, translated by ovkit), *not translatable* (ovkit has no
# builder, type or OpenVINO translation for it yet) or *no case* (no case builder, or the
# installed ggml cannot build it). Numbers in the cells are rows; the colour is the share of the
# family's rows (per op: click to open below the summary).

# %% tags=["catalogue-coverage"]
from ovkit.catalogue import run as catalogue
from ovkit.catalogue import view as catalogue_view

rows = catalogue.read_rows()
classified = catalogue.coverage_rows(rows, progress=False)
table = catalogue_view.coverage(classified)
totals = table.sum()
print(
    f"{len(rows)} rows: {totals['upstream-accepted']} upstream-accepted, {totals['ovkit-only']} ovkit-only, "
    f"{totals['not translatable']} not translatable, {totals['no case']} no case; "
    f"ovkit translates {100 * classified['translatable'].mean():.1f} % of the list, "
    f"the backend accepts {100 * classified['accepted'].mean():.1f} %"
)
families = table.groupby(table.index.map(notebook.op_family)).sum()
display(catalogue_view.coverage_figure(families.loc[families.sum(axis=1).sort_values(ascending=False).index]))
display(
    notebook.Collapsed(f"per op: {len(table)} ops (click to open)", catalogue_view.coverage_figure(table))
)

# %% [markdown]
# A few rows run for real: ovkit's graph on this CPU against ggml's CPU backend, in worker
# processes, printed as test-backend-ops prints them (`--policy none`: the backend's refusals
# run too, so *ovkit-only* rows are checked numerically). The whole list is
# `ovkit test-ops --catalogue test-backend-ops --policy none` or `benchmarks/bench_catalogue.py`.

# %% tags=["catalogue-run"]
picked = [r for op in catalogue_ops for r in [r for r in rows if r.op == op][:catalogue_rows_per_op]]
ran = catalogue.run(picked, policy="none", workers=2, progress=False)
for r in ran.itertuples():
    print(catalogue.Result(r.op, r.case, r.status, r.detail, r.err, r.max_err, r.device, r.accepted).line())
display(catalogue.per_op(ran))
three = pd.crosstab(
    ran["accepted"].map({True: "backend accepts", False: "backend refuses"}), ran["status"], margins=True
)
display(three.rename_axis(index="upstream (policy)", columns="ovkit vs ggml"))

# %% [markdown]
# ## 8. Result
#
# Totals per device class; no supported case may fail.

# %% tags=["result"]
for cls, df in results.items():
    ok, fail, unsup = ((df["status"] == s).sum() for s in ("OK", "FAIL", "not supported"))
    print(f"{cls}: {ok}/{ok + fail} supported cases pass, {unsup} not supported, {fail} FAIL")
timed = perf["status"].value_counts().to_dict()
print(f"perf on {dev0}: {len(perf)} cases timed, statuses {timed}")
