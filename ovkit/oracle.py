"""Real-ggml oracle: compute any catalogue op with ggml's own CPU backend (via ggml-python).

Why: ovkit's ops must reproduce ggml's numbers. This module runs the very same
builder functions (``ggml_add``, ``ggml_rope_ext``, ...) on ggml's CPU backend from numpy inputs,
so tests and benchmarks can compare ovkit's OpenVINO results against ggml itself.

Shapes follow ggml-python's ``from_numpy``/``to_numpy``: numpy shape ``(ne1, ne0)`` is ggml
``ne = [ne0, ne1]``. Dimension arguments of builders (``concat`` dim, ``permute`` axes, view
``ne``/``nb``/offset) stay in ggml's convention (dim 0 = innermost), exactly as in ggml.

Ways in:

* :func:`ggml_call` -- one builder by name, arguments in the builder's order:
  ``ggml_call("rope_ext", x, pos, None, 64, 2, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)``.
* :func:`ggml_compute` -- any ggml graph: ``ggml_compute(lambda ctx, a: ggml.ggml_cont(ctx,
  ggml.ggml_permute(ctx, a, 1, 0, 2, 3)), x)``; this is how tests express non-contiguous
  inputs (views, permutes, transposes) to an op.
* :func:`ggml_program` -- a *program* written with ovkit ``Graph``'s method names,
  ``program(builder, leaves)``: the same function runs on ovkit (``program(Graph(), ...)``) and
  on ggml (:class:`GgmlBuilder`), which is how tests/test_ops_vs_ggml.py compares every op.
* :func:`ggml_benchmark` / :func:`ggml_benchmark_program` -- the same graph run N times on
  ggml's CPU backend, median seconds (2 threads by default), for ovkit-vs-ggml benchmarks.

Caveat: ggml validates with ``GGML_ASSERT``, which aborts the whole process. Build the ovkit
side first (its ``GraphError`` checks run at build time) or pass only shapes ggml accepts.

Inputs are numpy arrays (f32, f16, i32, i64; float64 is converted to f32), :class:`Typed`
(e.g. :func:`as_bf16`) or :class:`QuantArray` (raw ggml blocks from :func:`quantize`).
``ggml-python`` is optional: import this module freely and ask :func:`ggml_available`.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import inspect
import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from ovkit import dtypes
from ovkit.child import NO_BACKTRACE_ENV
from ovkit.dtypes import QUANT_TYPES, STORAGE_DTYPE, STORAGE_TYPE_OF_NUMPY, find_type, type_names
from ovkit.errors import OvkitError

__all__ = [
    "as_bf16",
    "BenchResult",
    "bf16_round",
    "block_size",
    "compare",
    "Comparison",
    "dequantize",
    "ggml_available",
    "ggml_benchmark",
    "ggml_benchmark_program",
    "ggml_call",
    "ggml_compute",
    "ggml_get_rows_quant",
    "ggml_module",
    "ggml_mul_mat_quant",
    "ggml_program",
    "program_session",
    "GgmlBuilder",
    "GgmlTensor",
    "GgmlUnavailableError",
    "nmse",
    "QUANT_TYPES",
    "QuantArray",
    "quantize",
    "quantize_blocks",
    "same_ne",
    "type_id",
    "type_size",
    "Typed",
]

DEFAULT_N_THREADS = 2


class GgmlUnavailableError(OvkitError, ImportError):
    """ggml-python is not installed; install ``ggml-python`` (the ``test`` extra)."""


@functools.cache
def load_ggml() -> ModuleType | None:
    """ggml-python, imported on first use (scripts/install-upstream builds it), else None."""
    # ggml-python built with the OpenVINO backend links libopenvino: the openvino module loads it,
    # so it must come first.
    importlib.import_module("openvino")
    try:
        ggml = importlib.import_module("ggml")
    except ImportError:  # pragma: no cover - exercised only without ggml-python
        return None
    # A failed GGML_ASSERT makes ggml fork a child that prints a backtrace (gdb, else
    # backtrace_symbols) and wait for it; when two of ggml's threads assert at once, that child can
    # deadlock on a lock held at fork time and the process hangs instead of dying.  ggml reads the
    # variable when it aborts, so it is set here, where ggml is loaded (unless the user set it).
    os.environ.setdefault(NO_BACKTRACE_ENV, "1")
    return ggml


def ggml_available() -> bool:
    """True when ggml-python (real ggml CPU build) can be imported (loads it on the first call)."""
    return load_ggml() is not None


def ggml_module() -> ModuleType:
    """ggml-python's module (loaded on first use); :class:`GgmlUnavailableError` without it."""
    ggml = load_ggml()
    if ggml is None:
        raise GgmlUnavailableError("ovkit.oracle needs ggml-python: pip install ggml-python")
    return ggml


# --------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------

_NUMPY_TYPES = STORAGE_TYPE_OF_NUMPY
_STORAGE = STORAGE_DTYPE


def type_id(dtype: str) -> int:
    """ggml's enum value for an ovkit dtype / quant type name (case-insensitive, e.g. ``q4_K``)."""
    t = find_type(dtype)
    if t is None and hasattr(ggml_module(), "GGML_TYPE_" + dtype.upper()):  # any other type ggml knows
        return int(getattr(ggml_module(), "GGML_TYPE_" + dtype.upper()))
    if t is None:
        raise ValueError(f"unknown ggml type {dtype!r}; expected one of {type_names()}")
    return int(getattr(ggml_module(), t.enum_name))


def _type_name(tid: int) -> str:
    name = ggml_module().ggml_type_name(tid)
    return name.decode() if isinstance(name, bytes) else str(name)


def block_size(dtype: str) -> int:
    """Elements per ggml block (1 for plain types, 32 for q4_0, 256 for K-quants)."""
    return int(ggml_module().ggml_blck_size(type_id(dtype)))


def type_size(dtype: str) -> int:
    """Bytes per ggml block of ``dtype``."""
    return int(ggml_module().ggml_type_size(type_id(dtype)))


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round f32 values to bf16 precision as ggml_fp32_to_bf16 does (NaN kept NaN), as f32."""
    return dtypes.bf16_round(x)


@dataclass(frozen=True, slots=True)
class Typed:
    """A numpy array to be stored in ggml as ``dtype`` (e.g. f32 values stored as bf16)."""

    array: np.ndarray
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in _STORAGE:
            raise ValueError(
                f"Typed: dtype {self.dtype!r} is not a plain type; expected one of {sorted(_STORAGE)}"
            )


def as_bf16(x: np.ndarray) -> Typed:
    """Mark an f32 array to be stored as bf16 in ggml."""
    return Typed(np.asarray(x, dtype=np.float32), "bf16")


@dataclass(frozen=True, slots=True)
class QuantArray:
    """Raw ggml blocks of a quantized tensor; ``shape`` in numpy order (last axis = ne0 = rows)."""

    qtype: str
    shape: tuple[int, ...]
    data: bytes = field(repr=False)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def dequantize(self) -> np.ndarray:
        """The f32 values ggml decodes from these blocks."""
        return dequantize(self.qtype, self.data, self.shape)


def quantize_blocks(qtype: str, array: np.ndarray) -> bytes:
    """Quantize ``array`` (rows along the last axis) into raw ggml blocks with ggml_quantize_chunk."""
    g = ggml_module()
    tid = type_id(qtype)
    if not g.ggml_is_quantized(tid):
        raise ValueError(f"quantize_blocks: {qtype!r} is not a quantized type; expected one of {QUANT_TYPES}")
    x = np.ascontiguousarray(array, dtype=np.float32)
    if x.ndim == 0:
        raise ValueError("quantize_blocks: expected an array with at least one axis, got a scalar")
    n_per_row = int(x.shape[-1])
    blck = int(g.ggml_blck_size(tid))
    if n_per_row % blck != 0:
        raise ValueError(
            f"quantize_blocks: row length {n_per_row} (last axis of shape {x.shape}) is not a multiple "
            f"of the {qtype} block size {blck}"
        )
    nrows = int(x.size // n_per_row) if n_per_row else 0
    row_bytes = int(g.ggml_row_size(tid, n_per_row))
    out = (ctypes.c_uint8 * max(1, row_bytes * nrows))()
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    # the IQ1/IQ2 types cannot quantize without an importance matrix: test-backend-ops' dummy one
    ones = np.ones(n_per_row, np.float32)
    im = (
        ones.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) if g.ggml_quantize_requires_imatrix(tid) else None
    )
    written = g.ggml_quantize_chunk(tid, src, ctypes.cast(out, ctypes.c_void_p), 0, nrows, n_per_row, im)
    if written != row_bytes * nrows:
        raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {row_bytes * nrows}")
    return bytes(out)[: row_bytes * nrows]


def quantize(qtype: str, array: np.ndarray) -> QuantArray:
    """Quantize an f32 array into a :class:`QuantArray` (usable as a ggml input)."""
    x = np.asarray(array, dtype=np.float32)
    return QuantArray(qtype, tuple(int(s) for s in x.shape), quantize_blocks(qtype, x))


def dequantize(qtype: str, data: bytes, shape: Sequence[int]) -> np.ndarray:
    """Decode raw ggml blocks into f32 with ggml's own ``to_float`` (numpy order ``shape``)."""
    g = ggml_module()
    tid = type_id(qtype)
    n = int(np.prod(shape)) if len(shape) else 1
    n_per_row = int(shape[-1]) if len(shape) else 1
    blck = int(g.ggml_blck_size(tid))
    expected = int(g.ggml_row_size(tid, n_per_row)) * (n // max(1, n_per_row))
    if n_per_row % blck != 0 or len(data) != expected:
        raise ValueError(
            f"dequantize: {len(data)} bytes do not hold a {qtype} tensor of shape {tuple(shape)} "
            f"(expected {expected} bytes, rows a multiple of {blck})"
        )
    out = np.empty(n, dtype=np.float32)
    buf = (ctypes.c_uint8 * max(1, len(data))).from_buffer_copy(data if data else b"\0")
    to_float = g.ggml_get_type_traits(tid).contents.to_float
    to_float(
        ctypes.cast(buf, ctypes.c_void_p),
        out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        n,
    )
    return out.reshape(tuple(shape))


# --------------------------------------------------------------------------------------------
# Error measure (test-backend-ops)
# --------------------------------------------------------------------------------------------


def nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    """Normalized mean squared error exactly as test-backend-ops: mse(a, b) / mse(a, 0).

    ``actual`` is the backend under test (test-backend-ops' ``f1``), ``expected`` ggml's CPU
    result (``f2``): the denominator is the power of ``actual``. As in the C loop, differences
    and squares are f32, accumulated sequentially in f64, and divided with IEEE semantics (an
    all-zero ``actual`` gives inf or NaN, which ``compare`` treats as the C code does).
    """
    a = np.asarray(actual).astype(np.float32).ravel()
    b = np.asarray(expected).astype(np.float32).ravel()
    if a.size != b.size:
        raise ValueError(f"nmse: element counts differ: actual {a.size} vs expected {b.size}")
    if a.size == 0:
        return float("nan")
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = a - b
        num = np.cumsum((d * d).astype(np.float64))[-1]  # cumsum: the C loop's sequential order
        den = np.cumsum((a * a).astype(np.float64))[-1]
        return float(np.float64(num) / np.float64(den))


_FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True, slots=True)
class Comparison:
    """The verdict of :func:`compare`: ok, the NMSE, the threshold, and why it failed."""

    ok: bool
    err: float
    max_err: float
    reason: str = ""

    def __str__(self) -> str:
        state = "OK" if self.ok else f"FAIL ({self.reason})"
        return f"NMSE = {self.err:.3e} (max {self.max_err:.1e}) {state}"


def compare(actual: np.ndarray, expected: np.ndarray, max_err: float = 1e-7) -> Comparison:
    """test-backend-ops' per-node check: NaN → fail; inf (or ±FLT_MAX) must match in sign on both
    sides; then NMSE must not exceed ``max_err`` (a NaN NMSE from matching infs passes, as in C)."""
    a = np.asarray(actual).astype(np.float32).ravel()
    b = np.asarray(expected).astype(np.float32).ravel()
    if a.size != b.size:
        return Comparison(False, float("inf"), max_err, f"element counts differ: {a.size} vs {b.size}")
    nan = np.isnan(a) | np.isnan(b)
    if nan.any():
        i = int(np.argmax(nan))
        return Comparison(False, float("nan"), max_err, f"NaN at index {i} (actual={a[i]}, expected={b[i]})")
    inf_a = np.isinf(a) | (np.abs(a) == _FLT_MAX)
    inf_b = np.isinf(b) | (np.abs(b) == _FLT_MAX)
    bad = (inf_a != inf_b) | (inf_a & inf_b & (np.signbit(a) != np.signbit(b)))
    if bad.any():
        i = int(np.argmax(bad))
        return Comparison(
            False, float("inf"), max_err, f"inf mismatch at index {i} (actual={a[i]}, expected={b[i]})"
        )
    err = nmse(a, b)
    if err > max_err:  # NaN (inf - inf) compares False, as in test-backend-ops
        return Comparison(False, err, max_err, f"NMSE {err:.3e} > {max_err:.1e}")
    return Comparison(True, err, max_err)


def same_ne(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    """True when two numpy-order shapes are the same ggml tensor (trailing ggml dims of 1 ignored)."""

    def ne(s: Sequence[int]) -> tuple[int, ...]:
        r = list(reversed([int(v) for v in s]))
        while len(r) < 4:
            r.append(1)
        while len(r) > 4 and r[-1] == 1:
            r.pop()
        return tuple(r)

    return ne(shape_a) == ne(shape_b)


# --------------------------------------------------------------------------------------------
# Running ggml graphs
# --------------------------------------------------------------------------------------------

InputLike = np.ndarray | Typed | QuantArray
Builder = Callable[..., Any]


def _spec(x: InputLike) -> tuple[str, tuple[int, ...], bytes]:
    """(ggml dtype name, numpy-order shape, raw bytes) of one input."""
    if isinstance(x, QuantArray):
        return x.qtype, x.shape, x.data
    if isinstance(x, Typed):
        arr = np.ascontiguousarray(x.array)
        if x.dtype == "bf16":
            raw = dtypes.f32_to_bf16_bits(arr.astype(np.float32))
        else:
            raw = np.ascontiguousarray(arr.astype(_STORAGE[x.dtype]))
        return x.dtype, tuple(arr.shape), raw.tobytes()
    if isinstance(x, np.ndarray | np.generic | float | int | list):
        arr = np.asarray(x)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        dt = _NUMPY_TYPES.get(arr.dtype)
        if dt is None:
            raise TypeError(
                f"ggml input of numpy dtype {arr.dtype} is not supported; expected one of "
                f"{[str(d) for d in _NUMPY_TYPES]} (or Typed/QuantArray)"
            )
        return dt, tuple(arr.shape), np.ascontiguousarray(arr).tobytes()
    raise TypeError(f"ggml input must be a numpy array, Typed or QuantArray, got {type(x).__name__}")


def _ne(shape: tuple[int, ...]) -> list[int]:
    ne = list(reversed(shape)) or [1]
    if len(ne) > 4:
        raise ValueError(f"ggml tensors have at most 4 dims; got shape {shape}")
    return ne


def _read_tensor(t: Any) -> np.ndarray:
    """Copy a (possibly non-contiguous) ggml tensor into numpy (numpy order; bf16/quant → f32)."""
    g = ggml_module()
    c = t.contents
    tid = int(c.type)
    n_dims = int(g.ggml_n_dims(t))
    ne = [int(c.ne[i]) for i in range(4)]
    nb = [int(c.nb[i]) for i in range(4)]
    name = _type_name(tid)
    if 0 in ne:  # an empty tensor: nothing to read (ggml_n_dims would drop its zero dims)
        return np.zeros(tuple(reversed(ne)), _STORAGE.get(name, np.float32))
    data = g.ggml_get_data(t)
    if data is None:
        raise RuntimeError("ggml result tensor has no data")
    if name in _STORAGE:
        # byte span covered by the tensor
        span = max(sum((ne[i] - 1) * nb[i] for i in range(4)) + nb[0], nb[0])
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(data))
        itemsize = np.dtype(_STORAGE[name]).itemsize
        view = np.lib.stride_tricks.as_strided(
            raw.view(np.uint8),
            shape=tuple(reversed(ne)) + (itemsize,),
            strides=tuple(reversed(nb)) + (1,),
        )
        # a real copy (ascontiguousarray would alias the ggml buffer, which is freed right after)
        arr = np.array(view, order="C", copy=True).view(_STORAGE[name]).reshape(tuple(reversed(ne)))
        if name == "bf16":
            arr = dtypes.bf16_bits_to_f32(arr)
    elif g.ggml_is_quantized(tid):
        rows: list[np.ndarray] = []
        row_bytes = int(g.ggml_row_size(tid, ne[0]))
        for i3, i2, i1 in itertools.product(range(ne[3]), range(ne[2]), range(ne[1])):
            blob = ctypes.string_at(data + i1 * nb[1] + i2 * nb[2] + i3 * nb[3], row_bytes)
            rows.append(dequantize(name, blob, (ne[0],)))
        arr = np.stack(rows).reshape(tuple(reversed(ne)))
    else:
        raise TypeError(f"cannot read a ggml tensor of type {name}")
    return arr.reshape(tuple(reversed(ne[:n_dims])) if n_dims > 0 else ())


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A builder's result plus the tensors the graph expands first, in order (see
    ``GgmlBuilder.build_forward_expand``)."""

    outputs: Any
    first: list[Any]


class _Session:
    """One ggml context + backend (ggml's CPU backend unless ``backend`` is given; a given one is
    borrowed, not freed) with inputs uploaded and a built graph."""

    def __init__(
        self, build: Builder, inputs: Sequence[InputLike | None], n_threads: int, backend: Any = None
    ) -> None:
        g = ggml_module()
        self.g = g
        n_tensors = 64 + 8 * len(inputs)
        params = g.ggml_init_params(
            mem_size=g.ggml_tensor_overhead() * n_tensors + g.ggml_graph_overhead_custom(4096, False),
            mem_buffer=None,
            no_alloc=True,
        )
        self.ctx = g.ggml_init(params)
        self.owns_backend = backend is None
        self.backend = g.ggml_backend_cpu_init() if backend is None else backend
        self.buffer = None
        if self.owns_backend:
            g.ggml_backend_cpu_set_n_threads(self.backend, n_threads)
        try:
            specs = [None if x is None else _spec(x) for x in inputs]
            tensors: list[Any] = []
            for i, sp in enumerate(specs):
                if sp is None:
                    tensors.append(None)
                    continue
                dt, shape, _raw = sp
                ne = _ne(shape)
                t = g.ggml_new_tensor(self.ctx, type_id(dt), len(ne), (ctypes.c_int64 * len(ne))(*ne))
                g.ggml_set_name(t, f"in{i}".encode())
                tensors.append(t)
            out = build(self.ctx, *tensors)
            first = out.first if isinstance(out, Scheduled) else []
            out = out.outputs if isinstance(out, Scheduled) else out
            self.multi = isinstance(out, list | tuple)
            self.outputs = list(out) if self.multi else [out]
            if not self.outputs or any(o is None for o in self.outputs):
                raise ValueError("the ggml builder returned no tensor")
            self.graph = g.ggml_new_graph_custom(self.ctx, 4096, False)
            for o in [*first, *self.outputs]:
                g.ggml_build_forward_expand(self.graph, o)
            self.buffer = g.ggml_backend_alloc_ctx_tensors(self.ctx, self.backend)
            if not self.buffer:
                raise RuntimeError("ggml_backend_alloc_ctx_tensors failed")
            # Zero the whole buffer so results never depend on stale heap memory. Example:
            # ggml_view_tensor(computed) records no graph edge (op NONE, no src), so its source
            # is never computed unless something else needs it; reads then see zeros, not garbage.
            g.ggml_backend_buffer_clear(self.buffer, 0)
            for t, sp in zip(tensors, specs, strict=True):
                if t is None or sp is None:
                    continue
                raw = sp[2]
                nbytes = int(g.ggml_nbytes(t))
                if len(raw) != nbytes:
                    raise ValueError(
                        f"input {t.contents.name!r}: {len(raw)} bytes given, ggml expects {nbytes}"
                    )
                if nbytes:
                    src = (ctypes.c_uint8 * nbytes).from_buffer_copy(raw)
                    g.ggml_backend_tensor_set(t, ctypes.cast(src, ctypes.c_void_p), 0, nbytes)
        except BaseException:
            self.close()
            raise

    def run(self) -> None:
        status = self.g.ggml_backend_graph_compute(self.backend, self.graph)
        if status != 0:
            raise RuntimeError(f"ggml_backend_graph_compute failed with status {status}")

    def results(self) -> list[np.ndarray]:
        return [_read_tensor(o) for o in self.outputs]

    def tensors(self) -> list[Any]:
        """Every tensor of the context, in creation order (test-backend-ops checks them all)."""
        out, t = [], self.g.ggml_get_first_tensor(self.ctx)
        while t:
            out.append(t)
            t = self.g.ggml_get_next_tensor(self.ctx, t)
        return out

    def close(self) -> None:
        g = self.g
        if self.buffer:
            g.ggml_backend_buffer_free(self.buffer)
            self.buffer = None
        if self.backend and self.owns_backend:
            g.ggml_backend_free(self.backend)
        self.backend = None
        if self.ctx:
            g.ggml_free(self.ctx)
            self.ctx = None


def ggml_compute(
    build: Builder, *inputs: InputLike | None, n_threads: int = DEFAULT_N_THREADS
) -> np.ndarray | list[np.ndarray]:
    """Run ``build(ctx, *tensors)`` (a ggml graph) on ggml's CPU backend and return numpy results.

    Each input becomes a ggml leaf tensor (``None`` stays ``None``); ``build`` returns one tensor
    or a list of tensors. Results are copied out in numpy order; f16 stays f16, bf16 and
    quantized results are decoded to f32, non-contiguous results are gathered.
    """
    s = _Session(build, inputs, n_threads)
    try:
        s.run()
        res = s.results()
    finally:
        s.close()
    return res if s.multi else res[0]


def _convert_arg(a: Any) -> Any:
    """Scalars pass through; type names become ggml enums; int lists become C int arrays."""
    if isinstance(a, str) and find_type(a) is not None:
        return type_id(a)
    if isinstance(a, list | tuple) and all(isinstance(v, int | np.integer) for v in a):
        return (ctypes.c_int * len(a))(*[int(v) for v in a])
    return a


def _is_input(a: Any) -> bool:
    return isinstance(a, np.ndarray | Typed | QuantArray)


def ggml_call(op: str, *args: Any, n_threads: int = DEFAULT_N_THREADS) -> np.ndarray:
    """Compute ``ggml_<op>(ctx, *args)`` with real ggml; arrays become tensors, ``None`` stays NULL.

    Arguments are in the ggml builder's order (and ovkit Graph's). Dtype names
    (``"f16"``) become ggml type enums; int lists (rope sections) become C arrays.
    """
    g = ggml_module()
    fn = getattr(g, "ggml_" + op, None)
    if fn is None:
        raise ValueError(f"ggml has no builder ggml_{op}")
    slots = [i for i, a in enumerate(args) if _is_input(a)]
    inputs = [args[i] for i in slots]

    def build(ctx: Any, *tensors: Any) -> Any:
        call = [_convert_arg(a) for a in args]
        for i, t in zip(slots, tensors, strict=True):
            call[i] = t
        return fn(ctx, *call)

    out = ggml_compute(build, *inputs, n_threads=n_threads)
    assert isinstance(out, np.ndarray)
    return out


def ggml_mul_mat_quant(
    qtype: str, weight: np.ndarray, x: np.ndarray, *, n_threads: int = DEFAULT_N_THREADS
) -> np.ndarray:
    """``ggml_mul_mat(quantize(weight), x)`` = ``x @ deq(weight).T`` with ggml's quantized kernels."""
    return ggml_call("mul_mat", quantize(qtype, weight), np.asarray(x, dtype=np.float32), n_threads=n_threads)


@functools.cache
def ggml_dot_f16_in_f16() -> bool:
    """Whether ggml-python's CPU ``ggml_vec_dot_f16`` accumulates in f16 (older ggml built with
    AVX512-FP16) rather than f32; probed once through a one-query FLASH_ATTN_EXT.

    Q·K of ones with ``[2048, 1, ..., 1]`` (128 wide: one AVX512-FP16 step) is 2175 in f32 and
    2174 in f16 (2048 + 1 ties to 2048); with scale 1/2048 and a second key of Q·K 0, the row is
    V₀'s 1 times ``1/(1 + exp(−Q·K/2048))``: 0.74307 or 0.74298."""
    d = 128
    q = np.ones((1, 1, 1, d), np.float32)
    k = np.zeros((1, 1, 2, d), np.float16)
    k[0, 0, 0] = 1.0
    k[0, 0, 0, 0] = 2048.0
    v = np.zeros((1, 1, 2, d), np.float16)
    v[0, 0, 0] = 1.0
    out = float(ggml_call("flash_attn_ext", q, k, v, None, 1.0 / 2048, 0.0, 0.0).reshape(-1)[0])
    f32, f16 = (1.0 / (1.0 + np.exp(-dot / 2048)) for dot in (2175.0, 2174.0))
    return abs(out - f16) < abs(out - f32)


def ggml_get_rows_quant(
    qtype: str, table: np.ndarray, rows: np.ndarray, *, n_threads: int = DEFAULT_N_THREADS
) -> np.ndarray:
    """``ggml_get_rows(quantize(table), rows)``: ggml dequantizes the selected rows to f32."""
    return ggml_call(
        "get_rows", quantize(qtype, table), np.asarray(rows, dtype=np.int32), n_threads=n_threads
    )


# --------------------------------------------------------------------------------------------
# Graph-mirroring builder: one program, run by ovkit's Graph and by ggml
# --------------------------------------------------------------------------------------------

# builder method -> the ggml enum family its string op arguments name (e.g. glu(a, "SWIGLU")).
_ENUM_ARGS: dict[str, str] = {"glu": "GGML_GLU_OP_", "glu_split": "GGML_GLU_OP_", "unary": "GGML_UNARY_OP_"}


@functools.cache
def _takes_ctx(name: str) -> bool:
    """Whether ggml builder ``ggml_<name>`` takes the context first (``soft_max_add_sinks`` does not)."""
    try:
        params = list(inspect.signature(getattr(ggml_module(), "ggml_" + name)).parameters)
    except (TypeError, ValueError):
        return True
    return bool(params) and params[0] == "ctx"


class GgmlTensor:
    """A ggml tensor seen like an ovkit ``Tensor``: ``.ne``, ``.nb`` (bytes), ``.shape``, ``.dtype``."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: Any) -> None:
        self.ptr = ptr

    @property
    def ne(self) -> tuple[int, int, int, int]:
        c = self.ptr.contents.ne
        return (int(c[0]), int(c[1]), int(c[2]), int(c[3]))

    @property
    def nb(self) -> tuple[int, int, int, int]:
        c = self.ptr.contents.nb
        return (int(c[0]), int(c[1]), int(c[2]), int(c[3]))

    @property
    def shape(self) -> tuple[int, ...]:
        n = int(ggml_module().ggml_n_dims(self.ptr))
        return tuple(reversed(self.ne[:n]))

    @property
    def dtype(self) -> str:
        return _type_name(int(self.ptr.contents.type))

    def set_name(self, name: str) -> GgmlTensor:
        """``ggml_set_name``, chainable like ``ovkit.graph.Tensor.set_name``."""
        ggml_module().ggml_set_name(self.ptr, name.encode())
        return self

    @property
    def op(self) -> str:
        """ggml's op name (``MUL_MAT``, ``UNARY``, ``NONE`` for a leaf)."""
        name = ggml_module().ggml_op_name(int(self.ptr.contents.op))
        return name.decode() if isinstance(name, bytes) else str(name)

    def __repr__(self) -> str:
        return f"GgmlTensor(ne={list(self.ne)}, dtype={self.dtype})"


#: builder -> positions of the operands the installed ggml's CPU kernels read only contiguous
#: (they abort on a permuted one; newer ggml reads any layout): computing programs copy such an
#: operand first (``ggml_cont``: the same values, so the same result).
_CONTIGUOUS_OPERANDS: dict[str, tuple[int, ...]] = {"conv_2d_direct": (0,), "conv_3d_direct": (0,)}


class GgmlBuilder:
    """ggml's builder functions with ovkit ``Graph``'s method names, on one context.

    ``b.add(x, y)`` calls ``ggml_add(ctx, x, y)``; tensors are :class:`GgmlTensor`; dtype names
    become ggml type enums, int lists become C arrays (rope sections), GLU/unary op names become
    their enums. Functions returning nothing (``soft_max_add_sinks``) return ``None``. Leaves are
    made by :func:`ggml_program`, so a test can write one program for both implementations.
    ``computing``: the graph will be computed here (see :data:`_CONTIGUOUS_OPERANDS`); off, the
    graph is exactly the program's (as test-backend-ops builds it).
    """

    def __init__(self, ctx: Any, *, computing: bool = False) -> None:
        self.ctx = ctx
        self.computing = computing
        self.expanded: list[GgmlTensor] = []

    def build_forward_expand(self, t: GgmlTensor) -> GgmlTensor:
        """``ggml_build_forward_expand(gf, t)``: the graph is made after the program, so ``t`` is
        recorded and expanded first, in call order (llama.cpp's KV cache writes before the views)."""
        self.expanded.append(t)
        return t

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        g = ggml_module()
        fn = getattr(g, "ggml_" + name, None)
        if fn is None:
            raise AttributeError(f"ggml has no builder ggml_{name} (GgmlBuilder.{name})")
        enum_prefix = _ENUM_ARGS.get(name)

        def call(*args: Any) -> Any:
            conv: list[Any] = []
            for a in args:
                if isinstance(a, GgmlTensor):
                    conv.append(a.ptr)
                elif enum_prefix and isinstance(a, str) and hasattr(g, enum_prefix + a.upper()):
                    conv.append(int(getattr(g, enum_prefix + a.upper())))
                else:
                    conv.append(_convert_arg(a))
            if self.computing:
                for i in _CONTIGUOUS_OPERANDS.get(name, ()):
                    if not g.ggml_is_contiguous(conv[i]):
                        conv[i] = g.ggml_cont(self.ctx, conv[i])
            out = fn(self.ctx, *conv) if _takes_ctx(name) else fn(*conv)
            return GgmlTensor(out) if out is not None and hasattr(out, "contents") else out

        call.__name__ = name
        return call


Program = Callable[[Any, dict[str, Any]], Any]


def _program_builder(program: Program, names: Sequence[str], *, on_cpu: bool = True) -> Builder:
    """``program`` as a ggml graph builder; ``on_cpu``: computed by the installed ggml's CPU
    backend (:class:`GgmlBuilder`'s ``computing``), else exactly the program's graph."""

    def build(ctx: Any, *tensors: Any) -> Any:
        leaves = {n: (None if t is None else GgmlTensor(t)) for n, t in zip(names, tensors, strict=True)}
        b = GgmlBuilder(ctx, computing=on_cpu)
        out = program(b, leaves)
        ptrs = [o.ptr for o in out] if isinstance(out, list | tuple) else out.ptr
        return Scheduled(ptrs, [t.ptr for t in b.expanded]) if b.expanded else ptrs

    return build


def program_session(
    program: Program, inputs: dict[str, InputLike], *, backend: Any = None, n_threads: int = DEFAULT_N_THREADS
) -> _Session:
    """``program``'s ggml graph built and its inputs uploaded on ``backend`` (a ``ggml_backend_t``,
    e.g. the real OpenVINO backend; default ggml's CPU backend on ``n_threads``), not yet computed:
    the caller asks ``supports_op`` about ``tensors()``, then ``run()``, ``results()`` and ``close()``."""
    names = list(inputs)
    build = _program_builder(program, names, on_cpu=backend is None)
    return _Session(build, [inputs[n] for n in names], n_threads, backend=backend)


def ggml_program(
    program: Program, inputs: dict[str, InputLike], *, n_threads: int = DEFAULT_N_THREADS
) -> np.ndarray | list[np.ndarray]:
    """Run ``program(builder, leaves)`` with real ggml; ``leaves`` maps each input name to its tensor.

    The same ``program`` runs on ovkit with ``program(graph, {name: graph.input(...)})``: write a
    case once (views, permutes and ``*_add_sinks`` included) and compare both results.
    """
    names = list(inputs)
    return ggml_compute(_program_builder(program, names), *[inputs[n] for n in names], n_threads=n_threads)


@dataclass(frozen=True, slots=True)
class BenchResult:
    """Timing of one ggml graph: median and all per-run seconds (compute only, no setup)."""

    median_s: float
    times_s: tuple[float, ...]
    n_threads: int

    @property
    def min_s(self) -> float:
        return min(self.times_s)


def ggml_benchmark(
    build: Builder,
    *inputs: InputLike | None,
    n_runs: int = 10,
    warmup: int = 1,
    n_threads: int = DEFAULT_N_THREADS,
) -> BenchResult:
    """Build the graph once, run it ``warmup`` + ``n_runs`` times on ggml's CPU backend, time each run."""
    if n_runs < 1:
        raise ValueError(f"ggml_benchmark: n_runs must be >= 1, got {n_runs}")
    s = _Session(build, inputs, n_threads)
    try:
        for _ in range(warmup):
            s.run()
        times = []
        for _ in range(n_runs):
            t0 = time.perf_counter()
            s.run()
            times.append(time.perf_counter() - t0)
    finally:
        s.close()
    return BenchResult(statistics.median(times), tuple(times), n_threads)


def ggml_benchmark_program(
    program: Program,
    inputs: dict[str, InputLike],
    *,
    n_runs: int = 10,
    warmup: int = 1,
    n_threads: int = DEFAULT_N_THREADS,
) -> BenchResult:
    """:func:`ggml_benchmark` for a Graph-style ``program`` (see :func:`ggml_program`)."""
    names = list(inputs)
    return ggml_benchmark(
        _program_builder(program, names),
        *[inputs[n] for n in names],
        n_runs=n_runs,
        warmup=warmup,
        n_threads=n_threads,
    )
