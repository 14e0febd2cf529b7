"""Node by node: ovkit, llama.cpp's CPU build and the real backend on the same fed tokens.

:func:`compare_model` evaluates one batch (the prompt, plus ``n`` greedy continuations of
llama.cpp's CPU build) from an empty cache on every side and captures each named node's output.
llama.cpp's sides run in a child process (:mod:`ovkit.child`) whose ``cb_eval`` scheduler callback
asks for the wanted nodes and reads them with ``ggml_backend_tensor_get``; a node is asked for
only when the node after it is not a view (the real backend cannot start a graph piece at a
reshape of the previous piece's output).  ovkit runs its graph once with every named node as an
extra output.  Nodes are matched by (name, occurrence) among computed f32 nodes and compared flat
in ggml's memory order.  When the real backend fails, :class:`BackendFailure` rebuilds the node
that throws as a single-op case for ``ovkit test-ops --upstream --cases FILE``.

``python -m ovkit.model.compare REQUEST.json`` is the child side.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ovkit.dtypes import NUMPY_DTYPE
from ovkit.errors import OvkitError
from ovkit.report import Report, Reported
from ovkit.runtime import Core

#: Sides a comparison can run against llama.cpp's CPU build (the CLI's ``--against``).
AGAINST: dict[str, tuple[str, ...]] = {
    "llama.cpp": ("ovkit",),
    "upstream": ("upstream",),
    "both": ("ovkit", "upstream"),
}

#: ggml ops that only re-describe memory: never asked for (nothing is computed; a piece of graph
#: starting at one trips the real backend).
VIEW_OPS = frozenset({"RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE", "NONE"})

#: A node llama.cpp's graph callback named (``attn_norm-0``, ``result_norm``); names with a suffix
#: ggml added (``Kcur-0 (view)``, ``node_12``) are not the graph's own.
NAMED = re.compile(r"[A-Za-z_]+(-\d+)?")

#: The first node "diverges" when its NMSE against llama.cpp CPU passes this bound: above the
#: noise of llama.cpp CPU's own roundings (8-bit activations per block of 32 before every
#: quantized matmul, f16 Q for attention; ovkit's exact-f32 nodes sit at 1e-5..6e-3 on SmolLM2),
#: below the subtlest graph error tried (a norm epsilon of 1 instead of 1e-6: 5.2e-2; a swapped
#: operand or a wrong mask: 1e-1 and more).  docs/model.md has the derivation.
DEFAULT_THRESHOLD = 1e-2

#: The log line of the real backend naming a node it could not translate.
_NAMED_IN_LOG = re.compile(r"(?:RESHAPE|node) (?:node )?'([^']+)'")
#: The log line of an OpenVINO exception naming the OpenVINO op that threw.
_OV_NODE = re.compile(r"Node (\S+) of type (\w+)")

DEFAULT_THREADS = 2

#: The side name of the real backend rerun with its OpenVINO CPU precision set to f32.
F32_RERUN = "upstream@f32"


class CompareError(OvkitError, RuntimeError):
    """A side of the comparison could not run at all (the message says which and why)."""


# ------------------------------------------------------------------------------------ records
@dataclass(frozen=True, slots=True)
class NodeDiff:
    """One node present on llama.cpp's side and on every compared side, in llama.cpp's graph order."""

    name: str
    op: str  #: ggml's op (sub-op for UNARY/GLU: ``SWIGLU``)
    ne: tuple[int, ...]  #: ggml's ne (innermost first)
    nmse: tuple[tuple[str, float], ...]  #: (side, NMSE of that side against llama.cpp CPU)

    def of(self, side: str) -> float:
        return dict(self.nmse)[side]


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """Where a side failed: ``llama_decode``'s code, the node its log names, the node that threw
    (the consumer the named node feeds) and that node as a single-op case."""

    side: str
    code: int  #: llama_decode's return value
    node: str  #: the node the log names (``Vcur-0 (reshaped) (reshaped)``)
    node_op: str
    failing_node: str  #: the node whose translation threw (``cache_v_l0 (view)``)
    failing_op: str  #: its ggml op (``SET_ROWS``)
    ov_node: str  #: the OpenVINO node named in the exception (``ScatterUpdate_2357 (ScatterUpdate)``)
    case_op: str  #: the single-op case, test-backend-ops notation: op name ...
    case_params: str  #: ... and parameters ("" when the op has no case builder here)
    log: tuple[str, ...] = field(default=(), repr=False)  #: the log lines that name the failure
    #: how the node was found: ``log`` (the backend's log names it) or ``exception`` (the OpenVINO
    #: op that threw, traced back to the ggml op the backend translates to it)
    found_by: str = "log"

    @property
    def case_line(self) -> str:
        """The case as one CSV row (``op_name,op_params``)."""
        return f'{self.case_op},"{self.case_params}"'

    def write_case(self, path: str | os.PathLike[str]) -> Path:
        """Write the case as a test-backend-ops case list (``ovkit test-ops --cases``)."""
        p = Path(path)
        p.write_text(f"op_name,op_params\n{self.case_line}\n")
        return p

    def command(self, path: str | os.PathLike[str]) -> str:
        """The CLI line that runs the written case three ways."""
        return f"ovkit test-ops --upstream --catalogue test-backend-ops --cases {path}"


@dataclass(frozen=True, slots=True, repr=False)
class ModelComparison(Reported):
    """The per-node NMSE table of each side against llama.cpp CPU, the first node past the
    threshold per side, and each side's failure (shown as a table in graph order)."""

    path: str
    tokens: tuple[int, ...]
    flash_attn: bool
    sides: tuple[str, ...]
    nodes: tuple[NodeDiff, ...]
    threshold: float
    failures: tuple[BackendFailure, ...] = ()
    precision: tuple[tuple[str, str], ...] = ()  #: (side, inference precision it ran)
    logits_nmse: tuple[tuple[str, float], ...] = ()  #: (side, NMSE of all logits of the batch)

    def first_divergent(self, side: str) -> NodeDiff | None:
        """The first node in graph order whose NMSE passes the threshold (or is not finite)."""
        for n in self.nodes:
            v = n.of(side)
            if not (math.isfinite(v) and v <= self.threshold):
                return n
        return None

    def failure(self, side: str) -> BackendFailure | None:
        return next((f for f in self.failures if f.side == side), None)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""

        def first(side: str) -> str | None:
            n = self.first_divergent(side)
            return None if n is None else n.name

        return {
            "path": self.path,
            "tokens": list(self.tokens),
            "flash_attn": self.flash_attn,
            "threshold": self.threshold,
            "sides": list(self.sides),
            "precision": dict(self.precision),
            "logits_nmse": dict(self.logits_nmse),
            "first_divergent": {s: first(s) for s in self.sides},
            "nodes": [
                {"name": n.name, "op": n.op, "ne": list(n.ne), "nmse": dict(n.nmse)} for n in self.nodes
            ],
            "failures": [
                {k: getattr(f, k) for k in f.__slots__ if k != "log"} | {"log": list(f.log)}
                for f in self.failures
            ],
        }

    def report(self) -> Report:
        firsts = {s: self.first_divergent(s) for s in self.sides}
        rows = []
        for i, n in enumerate(self.nodes):
            marks = [f"<- first past {self.threshold:.0e} ({s})" for s, f in firsts.items() if f is n]
            rows.append(
                (
                    str(i),
                    n.op,
                    n.name,
                    "×".join(map(str, n.ne)),
                    *(f"{n.of(s):.2e}" for s in self.sides),
                    " ".join(marks),
                )  # fmt: skip
            )
        notes = [
            f"{len(self.tokens)} fed tokens, flash attention {'on' if self.flash_attn else 'off'}; "
            f"NMSE of each side against llama.cpp's CPU build, in its graph order (ggml ne)"
        ]
        ran, logits = dict(self.precision), dict(self.logits_nmse)
        for s in self.sides:
            f = firsts[s]
            found = (
                f"first divergent node {f.name} ({f.op}, NMSE {f.of(s):.2e})"
                if f
                else "no node past the threshold"
            )
            on_logits = f"; logits NMSE {logits[s]:.2e}" if s in logits else ""
            notes.append(f"{s}{f' ({ran[s]})' if ran.get(s) else ''}: {found}{on_logits}")
        if firsts.get("upstream") is not None:
            if F32_RERUN in firsts:
                verdict = "removes it" if firsts[F32_RERUN] is None else "does not remove it"
                notes.append(f"the f32 rerun of the real backend {verdict}")
            elif ran.get("upstream", "").endswith("f32"):
                notes.append("upstream ran in f32 already: its precision does not explain the divergence")
        for fl in self.failures:
            how = (
                f"its log names {fl.node_op} {fl.node!r}; {fl.failing_op} {fl.failing_node!r}, which "
                f"consumes it, threw ({fl.ov_node})"
                if fl.found_by == "log"
                else f"OpenVINO's {fl.ov_node} threw, the backend's translation of {fl.failing_op}: "
                f"most likely {fl.failing_op} {fl.failing_node!r} (the store with the most indices), "
                f"fed by {fl.node_op} {fl.node!r}"
            )
            notes.append(
                f"{fl.side} FAILED (llama_decode {fl.code}): {how}. Single-op case: {fl.case_line} "
                "(the op at the node's shapes and types; what the backend does around it in a whole "
                "model, such as slicing the KV cache, is not in it)"
            )
        return Report(
            f"compare-model {Path(self.path).name}",
            ("#", "op", "name", "ne", *self.sides, ""),
            tuple(rows),
            tuple(notes),
        )


# ------------------------------------------------------------------------------ llama.cpp side
@dataclass(frozen=True, slots=True)
class Capture:
    """One llama.cpp run with captures: every node of the graph, the captured values by node
    index, the decode status, the logits and the log."""

    nodes: tuple[dict[str, Any], ...]  #: name, op, ne, type, srcs (names), in graph order
    values: Mapping[int, np.ndarray]
    code: int
    logits: np.ndarray | None
    log: str
    precision: str


def run_llama(
    path: str | os.PathLike[str],
    tokens: Sequence[int],
    *,
    upstream: bool = False,
    flash_attn: bool = True,
    n_ctx: int = 512,
    n_threads: int = DEFAULT_THREADS,
    capture: bool = True,
    ov_precision: str | None = None,
    timeout: float = 1800.0,
) -> Capture:
    """llama.cpp (CPU build, or the real backend with ``upstream``) on ``tokens`` as one batch,
    in a child process, the named nodes captured (``capture=False``: status and node list only);
    ``ov_precision``: the real backend's OpenVINO CPU inference precision (default: the device's)."""
    from ovkit import child
    from ovkit.model.reference import llama_sigill_hint, upstream_env

    with tempfile.TemporaryDirectory(prefix="ovkit-compare-") as tmp:
        req = Path(tmp) / "request.json"
        request = {
            "path": str(path),
            "tokens": [int(t) for t in tokens],
            "n_ctx": n_ctx,
            "flash_attn": flash_attn,
            "n_threads": n_threads,
            "upstream": upstream,
            "capture": capture,
            "ov_precision": ov_precision,
            "dir": tmp,
        }
        req.write_text(json.dumps(request))
        env = upstream_env() if upstream else dict(os.environ)
        if upstream and capture:
            # the backend caches a compiled graph per graph *structure*: two pieces of the split
            # graph with the same ops (layer 0's two RMS_NORMs) then share one compiled graph and
            # the second reads the first one's input (measured: NMSE 0.4 from ffn_inp's norm on,
            # while the uncaptured logits match); without the cache each piece compiles its own
            env["GGML_OPENVINO_DISABLE_CACHE"] = "1"
        log = Path(tmp) / "log.txt"
        what = "the real backend" if upstream else "llama.cpp"
        try:
            child.run(
                [sys.executable, "-m", "ovkit.model.compare", str(req)],
                env=env,
                timeout=timeout,
                sigill_hint=partial(llama_sigill_hint, upstream),
            )
        except child.ChildTimedOut:
            raise CompareError(f"{what} did not finish within {timeout:.0f} s") from None
        except child.ChildCrashed as exc:
            text = log.read_text(errors="replace") if log.exists() else exc.death.stderr
            lines = [x.strip() for x in text.splitlines() if x.strip()] or [""]
            said = [x for x in lines if "error" in x.lower()][-1:]  # llama.cpp's own reason
            why = "; ".join(dict.fromkeys([*said, lines[-1]]))
            raise CompareError(f"{what} failed ({exc.death.describe()}): {why}") from None
        meta = json.loads((Path(tmp) / "meta.json").read_text())
        with np.load(Path(tmp) / "values.npz") as data:
            values = {int(k[1:]): data[k] for k in data.files if k.startswith("t")}
            logits = data["logits"] if "logits" in data.files else None
        return Capture(
            tuple(meta["nodes"]), values, int(meta["code"]), logits, log.read_text(errors="replace"),
            str(meta.get("precision", "")),
        )  # fmt: skip


def _wanted(nodes: Sequence[dict[str, Any]]) -> set[int]:
    """The nodes to ask for: named, f32, computed (not a view) and not followed by a view."""
    out = set()
    for i, n in enumerate(nodes):
        nxt = nodes[i + 1]["op"] if i + 1 < len(nodes) else ""
        if NAMED.fullmatch(n["name"]) and n["type"] == 0 and n["op"] not in VIEW_OPS and nxt not in VIEW_OPS:
            out.add(i)
    return out


def _serve(request: dict[str, Any]) -> None:
    """The child: load the model, run the batch once for the node list and status, then (when it
    ran and captures are asked for) again from an empty cache asking for the wanted nodes."""
    import ctypes

    out_dir = Path(request["dir"])
    log_fd = os.open(out_dir / "log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log_fd, 2)  # llama.cpp's log and the backend's std::cerr, for the parent to parse

    import llama_cpp as L
    from llama_cpp import _ggml

    class GgmlTensor(ctypes.Structure):  # ggml.h's struct ggml_tensor (GGML_MAX_DIMS 4, MAX_SRC 10)
        _fields_ = [
            ("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
            ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
            ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
            ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
            ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8),
        ]  # fmt: skip

    lib = _ggml.libggml
    lib.ggml_op_desc.restype = ctypes.c_char_p
    lib.ggml_op_desc.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
    ]

    upstream = bool(request["upstream"])
    precision = backend_precision(request.get("ov_precision")) if upstream else ""
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = -1 if upstream else 0
    model = L.llama_model_load_from_file(request["path"].encode(), mp)
    if not model:
        raise SystemExit(f"llama.cpp could not load {request['path']}")
    toks = request["tokens"]
    nodes: list[dict[str, Any]] = []
    want: set[int] = set()
    values: dict[int, np.ndarray] = {}

    def name_of(p: int) -> str:
        return GgmlTensor.from_address(p).name.decode(errors="replace") if p else ""

    @L.ggml_backend_sched_eval_callback
    def cb(t: int, ask: bool, _ud: Any) -> bool:
        tt = GgmlTensor.from_address(t)
        if ask:
            nodes.append({
                "name": tt.name.decode(errors="replace"), "op": lib.ggml_op_desc(t).decode(),
                "ne": list(tt.ne), "type": int(tt.type), "srcs": [name_of(s) for s in tt.src if s],
            })  # fmt: skip
            return len(nodes) - 1 in want
        n = lib.ggml_nbytes(t)
        buf = np.empty(n // 4, np.float32)
        lib.ggml_backend_tensor_get(t, buf.ctypes.data, 0, n)
        values[len(nodes) - 1] = buf
        return True

    cp = L.llama_context_default_params()
    cp.n_ctx = request["n_ctx"]
    cp.n_batch = cp.n_ubatch = max(len(toks), min(request["n_ctx"], 512))  # llama.cpp's default batch
    cp.n_threads = cp.n_threads_batch = request["n_threads"]
    cp.flash_attn_type = (
        L.LLAMA_FLASH_ATTN_TYPE_ENABLED if request["flash_attn"] else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    cp.cb_eval = cb
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    batch = L.llama_batch_init(len(toks), 0, 1)
    for i, tk in enumerate(toks):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tk, i, 1, 1
        batch.seq_id[i][0] = 0
    batch.n_tokens = len(toks)
    code = int(L.llama_decode(ctx, batch))  # the plain run: the node list and the real status
    logits = None
    if code == 0:
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        logits = np.ctypeslib.as_array(L.llama_get_logits(ctx), (len(toks) * n_vocab,)).copy()
        if request["capture"]:
            want = _wanted(nodes)
            nodes.clear()
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
            code = int(L.llama_decode(ctx, batch))
    (out_dir / "meta.json").write_text(json.dumps({"nodes": nodes, "code": code, "precision": precision}))
    arrays = {f"t{i}": v for i, v in values.items()}
    if logits is not None:
        arrays["logits"] = logits
    np.savez(out_dir / "values.npz", **arrays)  # type: ignore[arg-type]
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


def backend_precision(wanted: str | None = None) -> str:
    """Set (``wanted``) and read the CPU inference precision of the real backend's own OpenVINO
    core, in the child.  The backend compiles every graph with one process-wide ``ov::Core``
    (``ov_singleton_core()``) and passes no precision hint, so that core's CPU property is what
    its graphs run in: bf16 by default on CPUs with AMX or avx512_bf16, f32 elsewhere.  The core
    is reached through OpenVINO's C API (``ov_core_t`` holds a ``shared_ptr<ov::Core>``: a pointer
    and its control block, which ``set``/``get`` do not touch)."""
    import ctypes
    import glob

    import openvino

    from ovkit.runtime import exact_on_cpu

    backend = ctypes.CDLL(str(Path(os.environ["LLAMA_CPP_LIB_PATH"]) / "libggml-openvino.so"))
    singleton = backend._Z17ov_singleton_corev  # ov::Core& ov_singleton_core()
    singleton.restype = ctypes.c_void_p
    core = (ctypes.c_void_p * 2)(singleton(), None)
    libs = sorted(glob.glob(str(Path(openvino.__file__).parent / "libs" / "libopenvino_c.so*")))
    capi = ctypes.CDLL(libs[0])

    class Property(ctypes.Structure):  # ov_property_t
        _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_void_p)]

    key = b"INFERENCE_PRECISION_HINT"
    if wanted:
        # f32 made exact as ovkit compiles it (ovkit.runtime.exact_on_cpu): without it the CPU
        # plugin still quantizes activations to int8 on CPUs with VNNI or AMX
        wanted_props: dict[str, object] = {"INFERENCE_PRECISION_HINT": wanted}
        exact_on_cpu(wanted_props)
        values = {k: ctypes.c_char_p(str(v).encode()) for k, v in wanted_props.items()}  # kept alive
        props = (Property * len(values))(
            *(Property(k.encode(), ctypes.cast(v, ctypes.c_void_p)) for k, v in values.items())
        )
        capi.ov_core_set_properties.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        if capi.ov_core_set_properties(core, b"CPU", len(values), props) != 0:
            raise SystemExit(f"OpenVINO refused {wanted_props} for the CPU")
    out = ctypes.c_char_p()
    capi.ov_core_get_property.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
    capi.ov_core_get_property(core, b"CPU", key, ctypes.byref(out))
    return (out.value or b"?").decode()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _serve(json.loads(Path(args[0]).read_text()))
    return 0


# ---------------------------------------------------------------------------------- ovkit side
def node_key(name: str, seen: dict[str, int]) -> tuple[str, int]:
    """(name, k): the k-th computed f32 node of that name in graph order (``seen`` counts).

    Not keyed by op: the CPU build and the OpenVINO build of llama-cpp-python number ggml's ops
    differently (the latter has ops of its own), and the k-th ``Qcur-0`` is the same node on
    every side (the matmul, then the rope; the reshape between them is a view, not counted)."""
    k = seen.get(name, 0)
    seen[name] = k + 1
    return name, k


def run_ovkit(
    path: str | os.PathLike[str],
    tokens: Sequence[int],
    *,
    flash_attn: bool = True,
    n_ctx: int = 512,
    device: str | None = None,
    core: Core | None = None,
    precision: str = "exact",
    no_requant: bool = True,
) -> tuple[dict[tuple[str, int], tuple[tuple[int, ...], np.ndarray]], np.ndarray]:
    """ovkit's model graph for ``tokens`` as one batch from an empty cache, with every named f32
    computed node as an output: {(name, k): (ne, values in ggml order)} and the logits.
    ``no_requant``: the weights as stored (default), as llama.cpp CPU has them; False applies
    ovkit's copy of the backend's requantization (token_embd and the output head to per-row i8)."""
    from ovkit.engine import compute_graph
    from ovkit.model.program import cache_names, causal_inputs
    from ovkit.model.runner import Model

    model = Model(
        path, device=device, core=core, n_ctx=n_ctx, flash_attn=flash_attn, precision=precision,
        no_requant=no_requant,
    )  # fmt: skip
    n = len(tokens)
    shape = model.shape(n, 0)
    g, out = model.build(shape)
    seen: dict[str, int] = {}
    named = []
    for t in g.topo([out.logits]):
        if t.is_leaf or t.op.value in VIEW_OPS or t.dtype != "f32" or not NAMED.fullmatch(t.name or ""):
            continue
        named.append((node_key(t.name, seen), t))
    feed = causal_inputs(model.hp, shape, np.asarray(tokens), 0)
    caches = set(cache_names(model.hp.n_layer))
    for t in g.inputs_of([out.logits]):  # an empty cache, of the rows the graph's inputs have
        if t.name in caches:
            feed[t.name] = np.zeros(t.shape, NUMPY_DTYPE[t.dtype])
    results = compute_graph(
        g, [out.logits, *(t for _, t in named)], feed, model.device, core=model.core,
        config=model.run_config(n),
    )  # fmt: skip
    values = {
        key: (tuple(t.ne), np.asarray(v, np.float32).ravel())
        for (key, t), v in zip(named, results[1:], strict=True)
    }
    return values, np.asarray(results[0], np.float32).ravel()


# ------------------------------------------------------------------------------------ compare
def _failure(side: str, cap: Capture) -> BackendFailure:
    """The node a failed run's log names, the node it feeds (the one that threw) and its case."""
    lines = [x.strip() for x in cap.log.splitlines() if x.strip()]
    named = next((m.group(1) for x in lines if "ggml-openvino" in x and (m := _NAMED_IN_LOG.search(x))), "")
    ov = next((f"{m.group(1)} ({m.group(2)})" for x in lines if (m := _OV_NODE.search(x))), "")
    by_name = {n["name"]: n for n in cap.nodes}
    consumer = next((n for n in cap.nodes if named and named in n["srcs"]), None)
    ov_type = ov.rsplit("(", 1)[-1].rstrip(")") if ov else ""
    found_by = "log"
    if consumer is None and ov_type in OV_TO_GGML:
        found_by = "exception"
        # the log names no node: the nodes the backend translates to the OpenVINO op that threw;
        # an index "pointing to a non-existing element" is most likely among the store with the
        # most indices (the transposed V cache stores every element as a row of its own)
        ops = OV_TO_GGML[ov_type]
        cands = [n for n in cap.nodes if n["op"] in ops]
        consumer = max(cands, key=lambda n: by_name.get(n["srcs"][0], {"ne": [0, 0]})["ne"][1], default=None)
        named = consumer["srcs"][0] if consumer else ""
    node = by_name.get(named, {"op": "?", "ne": [], "type": 0, "srcs": []})
    case_op, case_params = _case(consumer, by_name) if consumer else ("", "")
    evidence = tuple(
        x for x in lines
        if "ggml-openvino" in x and named and f"'{named}'" in x or "Exception" in x or " of type " in x
        or "indices value" in x or "llama_decode" in x
    )  # fmt: skip
    return BackendFailure(
        side=side, code=cap.code, node=named, node_op=str(node["op"]),
        failing_node=consumer["name"] if consumer else named, failing_op=consumer["op"] if consumer else str(node["op"]),
        ov_node=ov, case_op=case_op, case_params=case_params, log=evidence[:12], found_by=found_by,
    )  # fmt: skip


#: The OpenVINO op an exception names -> the ggml ops the backend translates to it.
OV_TO_GGML: dict[str, tuple[str, ...]] = {"ScatterUpdate": ("SET_ROWS",), "ScatterNDUpdate": ("SET_ROWS",)}

#: ggml type ids -> test-backend-ops names, for the single-op cases.
_TYPE_NAMES = {0: "f32", 1: "f16", 26: "i32", 27: "i64", 30: "bf16"}


def _case(node: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """A failing node as a test-backend-ops case: its op and params with the node's own shapes
    and types (only SET_ROWS, the KV cache store, is built here)."""
    if node["op"] != "SET_ROWS":
        return node["op"], ""
    # ggml_set_rows(a, b, c) is a view of a with src[0] = b (the rows) and src[1] = c (their ids)
    src = by_name.get(node["srcs"][0], {}) if node["srcs"] else {}
    idx = by_name.get(node["srcs"][1], {}) if len(node["srcs"]) > 1 else {}
    ne = list(node["ne"])
    r = int(src.get("ne", [0, 1])[1])
    t_src = _TYPE_NAMES.get(int(src.get("type", 0)), "f32")
    t_dst = _TYPE_NAMES.get(int(node["type"]), "f16")
    t_idx = _TYPE_NAMES.get(int(idx.get("type", 27)), "i64")
    ne_s = ",".join(map(str, ne))
    return "SET_ROWS", f"type_src={t_src},type_dst={t_dst},type_idx={t_idx},ne=[{ne_s}],nr23=[1,1],r={r},v=0"


def _llama_keyed(cap: Capture) -> dict[tuple[str, int], tuple[tuple[int, ...], str, np.ndarray]]:
    """The captured values by (name, op, k), with ne and the op as ggml describes it (``SWIGLU``)."""
    seen: dict[str, int] = {}
    out = {}
    for i, n in enumerate(cap.nodes):
        if n["op"] in VIEW_OPS or n["type"] != 0 or not NAMED.fullmatch(n["name"]):
            continue
        key = node_key(n["name"], seen)
        if i in cap.values:
            out[key] = (tuple(n["ne"]), str(n["op"]), cap.values[i])
    return out


def compare_model(
    path: str | os.PathLike[str],
    tokens: Sequence[int],
    *,
    n_predict: int = 0,
    against: str = "llama.cpp",
    flash_attn: bool = True,
    n_ctx: int = 512,
    threshold: float = DEFAULT_THRESHOLD,
    device: str | None = None,
    core: Core | None = None,
    f32_rerun: bool | None = None,
    no_requant: bool = True,
) -> ModelComparison:
    """Run ``tokens`` (plus ``n_predict`` greedy tokens llama.cpp CPU picks) as one batch on
    llama.cpp CPU and on the ``against`` sides (:data:`AGAINST`), node by node.

    ``f32_rerun``: run the real backend once more with its OpenVINO CPU precision set to f32 (the
    side :data:`F32_RERUN`); by default only when it diverged while running in another precision.
    ``no_requant=False``: ovkit's side with the backend's requantization (see :func:`run_ovkit`)."""
    from ovkit.gguf import read_gguf
    from ovkit.model.arch import ModelError
    from ovkit.model.limits import check_count, check_n_ctx, model_hparams, token_ids
    from ovkit.oracle import nmse

    if against not in AGAINST:
        raise ModelError(f"against={against!r} is not one of {', '.join(AGAINST)}")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ModelError(f"threshold={threshold} must be a finite NMSE > 0")
    n_predict = check_count("n_predict", n_predict)
    # the ids, the context and the batch checked against the model before llama.cpp runs
    hp = model_hparams(read_gguf(path))
    toks = token_ids(tokens, hp.n_vocab).tolist()
    if not toks:
        raise ModelError("compare_model: no tokens given")
    n_ctx = check_n_ctx(hp, n_ctx, core=core)
    if len(toks) + n_predict > n_ctx:
        raise ModelError(
            f"{len(toks)} tokens and n_predict={n_predict} make a batch of {len(toks) + n_predict}, "
            f"more than n_ctx={n_ctx}"
        )
    if n_predict:
        from ovkit.model.reference import run_reference

        ref = run_reference(path, toks, [], n_ctx=n_ctx, flash_attn=flash_attn)
        for _ in range(n_predict):  # greedy continuations, fed as part of the batch
            toks.append(int(ref.tokens[-1]))
            ref = run_reference(path, toks, [], n_ctx=n_ctx, flash_attn=flash_attn)
    base = run_llama(path, toks, flash_attn=flash_attn, n_ctx=n_ctx)
    if base.code != 0:
        raise CompareError(f"llama.cpp's CPU build failed on {path} (llama_decode {base.code})")
    ref_values = _llama_keyed(base)
    sides = AGAINST[against]
    side_values: dict[str, dict[tuple[str, int], tuple[tuple[int, ...], np.ndarray]]] = {}
    failures: list[BackendFailure] = []
    precision: list[tuple[str, str]] = []
    logits_nmse: list[tuple[str, float]] = []
    logits: np.ndarray | None
    upstream_logits: np.ndarray | None = None
    for side in sides:
        if side == "ovkit":
            values, logits = run_ovkit(
                path,
                toks,
                flash_attn=flash_attn,
                n_ctx=n_ctx,
                device=device,
                core=core,
                no_requant=no_requant,
            )
            precision.append((side, "f32 (exact)" + ("" if no_requant else ", backend's requantization")))
        else:
            cap = run_llama(path, toks, upstream=True, flash_attn=flash_attn, n_ctx=n_ctx)
            precision.append((side, f"OpenVINO CPU default: {cap.precision}"))
            if cap.code != 0 and cap.logits is None:
                failures.append(_failure(side, cap))
                continue
            values = {k: (ne, v) for k, (ne, _, v) in _llama_keyed(cap).items()}
            logits = cap.logits
        side_values[side] = values
        if side == "upstream":
            upstream_logits = logits
        if base.logits is not None and logits is not None and logits.size == base.logits.size:
            logits_nmse.append((side, float(nmse(logits, base.logits))))

    def comparison() -> ModelComparison:
        return ModelComparison(
            str(path), tuple(toks), flash_attn, tuple(side_values), _diffs(ref_values, side_values),
            threshold, tuple(failures), tuple(precision), tuple(logits_nmse),
        )  # fmt: skip

    result = comparison()
    ran_in = dict(precision).get("upstream", "")
    diverged = "upstream" in side_values and result.first_divergent("upstream") is not None
    if f32_rerun or (f32_rerun is None and diverged and not ran_in.endswith("f32")):
        # the real backend's divergence may be its precision (bf16 on AMX CPUs): run it in f32
        cap = run_llama(path, toks, upstream=True, flash_attn=flash_attn, n_ctx=n_ctx, ov_precision="f32")
        if cap.logits is not None:
            side_values[F32_RERUN] = {k: (ne, v) for k, (ne, _, v) in _llama_keyed(cap).items()}
            # the backend may not take the core's precision (on an AMD EPYC with avx512_bf16 it
            # computed the same logits bit for bit at f32, bf16 and its default): say so
            same = upstream_logits is not None and np.array_equal(cap.logits, upstream_logits)
            no_effect = ", no effect: its logits equal the default run's bit for bit" if same else ""
            precision.append((F32_RERUN, f"OpenVINO CPU set to {cap.precision}{no_effect}"))
            if base.logits is not None and cap.logits.size == base.logits.size:
                logits_nmse.append((F32_RERUN, float(nmse(cap.logits, base.logits))))
            result = comparison()
    return result


def _diffs(
    ref_values: Mapping[tuple[str, int], tuple[tuple[int, ...], str, np.ndarray]],
    side_values: Mapping[str, Mapping[tuple[str, int], tuple[tuple[int, ...], np.ndarray]]],
) -> tuple[NodeDiff, ...]:
    """The nodes every side captured, in llama.cpp CPU's graph order, with each side's NMSE."""
    from ovkit.oracle import nmse

    rows = []
    for key, (ne, desc, ref) in ref_values.items():
        if not side_values or not all(key in vals for vals in side_values.values()):
            continue
        per = []
        for s, vals in side_values.items():
            v = vals[key][1]
            per.append((s, float(nmse(v, ref)) if v.size == ref.size else math.inf))
        rows.append(NodeDiff(key[0], desc, tuple(ne), tuple(per)))
    return tuple(rows)


# ---------------------------------------------------------------------------------- command line
def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit compare-model``."""
    p.add_argument("file", help="path of a .gguf model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help='token ids, e.g. "1,5,9"')
    src.add_argument("--prompt", help="prompt text (tokenized by llama.cpp's tokenizer)")
    p.add_argument("-n", "--n-predict", type=int, default=0,
                   help="append llama.cpp CPU's N greedy tokens to the batch (default 0)")  # fmt: skip
    p.add_argument("--against", choices=tuple(AGAINST), default="llama.cpp",
                   help="llama.cpp: ovkit vs llama.cpp CPU (default); upstream: the real backend vs "
                   "llama.cpp CPU; both")  # fmt: skip
    p.add_argument("--fa", choices=("on", "off"), default="on", help="flash attention, as llama.cpp -fa")
    p.add_argument(
        "--ctx-size", type=int, default=512, help="KV cache cells (default 512, llama-cpp-python's)"
    )
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"NMSE past which a node diverges (default {DEFAULT_THRESHOLD:g}, see docs/model.md)")  # fmt: skip
    p.add_argument("--case-out", metavar="FILE",
                   help="where a failing node's single-op case is written (default: FILE-STEM.failing-node.csv "
                   "in the current directory)")  # fmt: skip
    p.add_argument("--device", help="OpenVINO device of ovkit's side (default: GGML_OPENVINO_DEVICE's)")
    p.add_argument(
        "--requant",
        action="store_true",
        help="ovkit's side with the backend's requantization (default: the weights as stored)",
    )
    p.add_argument(
        "--f32-rerun",
        action="store_true",
        help="always rerun the real backend with its OpenVINO CPU precision set to f32 "
        "(default: only when it diverged in another precision)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def cli(args: Any) -> int:
    """``ovkit compare-model``: the table (or JSON); a failing side's case file written."""
    from ovkit.model import reference
    from ovkit.model.arch import ModelError
    from ovkit.model.cli import parse_tokens
    from ovkit.usage import UsageError, check_count, check_positive

    check_count("-n", args.n_predict)
    check_count("--ctx-size", args.ctx_size, low=1)
    check_positive("--threshold", args.threshold)
    if not Path(args.file).is_file():
        raise UsageError(f"{args.file}: no such file")
    try:
        toks = (
            parse_tokens(args.tokens)
            if args.tokens is not None
            else reference.tokenize(args.file, args.prompt)
        )
        result = compare_model(
            args.file, toks, n_predict=args.n_predict, against=args.against, flash_attn=args.fa == "on",
            n_ctx=args.ctx_size, threshold=args.threshold, device=args.device,
            f32_rerun=True if args.f32_rerun else None, no_requant=not args.requant,
        )  # fmt: skip
    except (ValueError, ModelError, CompareError, reference.LlamaCppError) as exc:
        said = str(exc)  # a GGUF or model error names the file already
        raise UsageError(said if said.startswith(str(args.file)) else f"{args.file}: {said}") from None
    written = []
    for f in result.failures:
        out = Path(args.case_out or f"{Path(args.file).stem}.failing-node.csv")
        if f.case_params:
            written.append((f.write_case(out), f))
    if args.json:
        payload = result.as_dict()
        payload["case_files"] = [
            {"side": f.side, "path": str(p), "command": f.command(p)} for p, f in written
        ]
        print(json.dumps(payload, indent=2))
    else:
        print(result)
        for p, f in written:
            print(
                f"{f.side}: the failing node as a single-op case in {p}; run it three ways with:\n  {f.command(p)}"
            )
    return 1 if result.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
