"""llama.cpp's side of compare-model: its CPU build or the real backend in a child process whose
``cb_eval`` scheduler callback asks for the wanted nodes and reads them
(``python -m ovkit.model.compare REQUEST.json`` is the child)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ovkit.model.compare.records import NAMED, VIEW_OPS, CompareError
from ovkit.model.reference import DEFAULT_THREADS, run_llama_child

TIMEOUT_S = 1800.0  # a child's longest run (a hung one is killed)


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
    ov_precision: str | None = None,
) -> Capture:
    """llama.cpp (CPU build, or the real backend with ``upstream``) on ``tokens`` as one batch in a
    child, the named nodes captured; ``ov_precision``: the backend's CPU one."""
    from ovkit import child

    with tempfile.TemporaryDirectory(prefix="ovkit-compare-") as tmp:
        request = {
            "path": str(path),
            "tokens": [int(t) for t in tokens],
            "n_ctx": n_ctx,
            "flash_attn": flash_attn,
            "upstream": upstream,
            "ov_precision": ov_precision,
            "dir": tmp,
        }
        # the backend caches a compiled graph per graph *structure*: two pieces of the split
        # graph with the same ops (layer 0's two RMS_NORMs) then share one compiled graph and
        # the second reads the first one's input (measured: NMSE 0.4 from ffn_inp's norm on,
        # while the uncaptured logits match); without the cache each piece compiles its own
        env = {"GGML_OPENVINO_DISABLE_CACHE": "1"} if upstream else {}
        log = Path(tmp) / "log.txt"
        what = "the real backend" if upstream else "llama.cpp"
        try:
            run_llama_child(
                "ovkit.model.compare", request, Path(tmp), upstream=upstream, timeout=TIMEOUT_S, **env
            )
        except child.ChildTimedOut:
            raise CompareError(f"{what} did not finish within {TIMEOUT_S:.0f} s") from None
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


def wanted_nodes(nodes: Sequence[dict[str, Any]]) -> set[int]:
    """The nodes to ask for: named, f32, computed (not a view) and not followed by a view."""
    out = set()
    for i, n in enumerate(nodes):
        nxt = nodes[i + 1]["op"] if i + 1 < len(nodes) else ""
        if NAMED.fullmatch(n["name"]) and n["type"] == 0 and n["op"] not in VIEW_OPS and nxt not in VIEW_OPS:
            out.add(i)
    return out


def serve(request: dict[str, Any]) -> None:
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
    cp.n_threads = cp.n_threads_batch = DEFAULT_THREADS
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
        want = wanted_nodes(nodes)
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
    """Set (``wanted``) and read the CPU inference precision of the real backend's one OpenVINO
    core (``ov_singleton_core()``, reached through OpenVINO's C API), in the child: what its graphs
    run in, bf16 by default on CPUs with AMX or avx512_bf16."""
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
    serve(json.loads(Path(args[0]).read_text()))
    return 0
