"""Running ggml graphs on ggml's own CPU backend: one builder (:func:`ggml_call`), any graph
(:func:`ggml_compute`), or a program written with ``ovkit.Graph``'s method names (:func:`ggml_program`),
so one program runs on both.  Shapes are numpy order; ggml's asserts abort the process: build the
ovkit side first (its ``GraphError`` checks run at build time)."""

from __future__ import annotations

import ctypes
import functools
import inspect
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ovkit import dtypes
from ovkit.dtypes import STORAGE_DTYPE, STORAGE_TYPE_OF_NUMPY, find_type
from ovkit.oracle.loader import QuantArray, Typed, dequantize, ggml_module, quantize, type_id, type_name

DEFAULT_N_THREADS = 2

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
            raw = np.ascontiguousarray(arr.astype(STORAGE_DTYPE[x.dtype]))
        return x.dtype, tuple(arr.shape), raw.tobytes()
    if isinstance(x, np.ndarray | np.generic | float | int | list):
        arr = np.asarray(x)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        dt = STORAGE_TYPE_OF_NUMPY.get(arr.dtype)
        if dt is None:
            raise TypeError(
                f"ggml input of numpy dtype {arr.dtype} is not supported; expected one of "
                f"{[str(d) for d in STORAGE_TYPE_OF_NUMPY]} (or Typed/QuantArray)"
            )
        return dt, tuple(arr.shape), np.ascontiguousarray(arr).tobytes()
    raise TypeError(f"ggml input must be a numpy array, Typed or QuantArray, got {type(x).__name__}")


def _read_tensor(t: Any) -> np.ndarray:
    """Copy a (possibly non-contiguous) ggml tensor into numpy (numpy order; bf16/quant → f32)."""
    g = ggml_module()
    c = t.contents
    tid = int(c.type)
    n_dims = int(g.ggml_n_dims(t))
    ne = [int(c.ne[i]) for i in range(4)]
    nb = [int(c.nb[i]) for i in range(4)]
    name = type_name(tid)
    if 0 in ne:  # an empty tensor: nothing to read (ggml_n_dims would drop its zero dims)
        return np.zeros(tuple(reversed(ne)), STORAGE_DTYPE.get(name, np.float32))
    data = g.ggml_get_data(t)
    if data is None:
        raise RuntimeError("ggml result tensor has no data")
    quantized = name not in STORAGE_DTYPE
    if quantized and not g.ggml_is_quantized(tid):
        raise TypeError(f"cannot read a ggml tensor of type {name}")
    # the elements (a quantized tensor: its rows of blocks) at ggml's byte strides
    unit = int(g.ggml_row_size(tid, ne[0])) if quantized else np.dtype(STORAGE_DTYPE[name]).itemsize
    dims = (3, 2, 1) if quantized else (3, 2, 1, 0)
    span = sum((ne[i] - 1) * nb[i] for i in dims) + unit
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(data))
    view = np.lib.stride_tricks.as_strided(
        raw, shape=(*(ne[i] for i in dims), unit), strides=(*(nb[i] for i in dims), 1)
    )
    # a real copy (ascontiguousarray would alias the ggml buffer, which is freed right after)
    blob = np.array(view, order="C", copy=True)
    if quantized:
        arr = dequantize(name, blob.tobytes(), tuple(reversed(ne)))
    else:
        arr = blob.view(STORAGE_DTYPE[name]).reshape(tuple(reversed(ne)))
        if name == "bf16":
            arr = dtypes.bf16_bits_to_f32(arr)
    return arr.reshape(tuple(reversed(ne[:n_dims])) if n_dims > 0 else ())


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A builder's result plus the tensors the graph expands first, in order (see
    ``GgmlBuilder.build_forward_expand``)."""

    outputs: Any
    first: list[Any]


class Session:
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
            tensors = [None if sp is None else self._leaf(f"in{i}", *sp[:2]) for i, sp in enumerate(specs)]
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
            # zeroed: a ggml_view_tensor of an uncomputed source then reads zeros, not stale memory
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

    def _leaf(self, name: str, dtype: str, shape: tuple[int, ...]) -> Any:
        ne = list(reversed(shape)) or [1]
        if len(ne) > 4:
            raise ValueError(f"ggml tensors have at most 4 dims; got shape {shape}")
        t = self.g.ggml_new_tensor(self.ctx, type_id(dtype), len(ne), (ctypes.c_int64 * len(ne))(*ne))
        self.g.ggml_set_name(t, name.encode())
        return t

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
    """``build(ctx, *tensors)`` on ggml's CPU backend, the inputs as leaves (``None`` stays NULL);
    its one or many results in numpy (f16 stays f16, bf16 and quantized decode to f32)."""
    s = Session(build, inputs, n_threads)
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


def ggml_call(op: str, *args: Any, n_threads: int = DEFAULT_N_THREADS) -> np.ndarray:
    """``ggml_<op>(ctx, *args)`` computed by real ggml, arguments in the builder's order: arrays
    become tensors, ``None`` stays NULL, the rest converts as :class:`GgmlBuilder` converts it."""
    if not hasattr(ggml_module(), "ggml_" + op):
        raise ValueError(f"ggml has no builder ggml_{op}")
    inputs = {str(i): a for i, a in enumerate(args) if isinstance(a, np.ndarray | Typed | QuantArray)}

    def program(b: GgmlBuilder, x: dict[str, Any]) -> Any:
        return getattr(b, op)(*(x.get(str(i), a) for i, a in enumerate(args)))

    out = ggml_program(program, inputs, n_threads=n_threads)
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
    AVX512-FP16), probed once: a 128-wide Q·K of 2175 in f32 is 2174 in f16 (2048 + 1 ties to 2048)."""
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


# -- Graph-mirroring builder: one program, run by ovkit's Graph and by ggml ------------------------

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
    def ne(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.ptr.contents.ne[:4])

    @property
    def nb(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.ptr.contents.nb[:4])

    @property
    def shape(self) -> tuple[int, ...]:
        n = int(ggml_module().ggml_n_dims(self.ptr))
        return tuple(reversed(self.ne[:n]))

    @property
    def dtype(self) -> str:
        return type_name(int(self.ptr.contents.type))

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
    """ggml's builders with ``Graph``'s method names on one context (``b.add(x, y)`` is
    ``ggml_add(ctx, x, y)``); type names, int lists and GLU/unary op names convert to ggml's.
    ``computing``: computed here (:data:`_CONTIGUOUS_OPERANDS`); off, exactly the program's graph."""

    def __init__(self, ctx: Any, *, computing: bool = False) -> None:
        self.ctx = ctx
        self.computing = computing
        self.expanded: list[GgmlTensor] = []

    def build_forward_expand(self, t: GgmlTensor) -> GgmlTensor:
        """``ggml_build_forward_expand(gf, t)``: recorded, expanded first (KV cache writes before views)."""
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
) -> Session:
    """``program``'s graph built with its inputs on ``backend`` (default: ggml's CPU backend), not
    yet computed: ask ``supports_op`` of ``tensors()``, then ``run()``, ``results()``, ``close()``."""
    names = list(inputs)
    build = _program_builder(program, names, on_cpu=backend is None)
    return Session(build, [inputs[n] for n in names], n_threads, backend=backend)


def ggml_program(
    program: Program, inputs: dict[str, InputLike], *, n_threads: int = DEFAULT_N_THREADS
) -> np.ndarray | list[np.ndarray]:
    """``program(builder, leaves)`` computed by real ggml, ``leaves`` by input name (the same
    program runs on ovkit with ``program(graph, {name: graph.input(...)})``)."""
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


def ggml_benchmark_program(
    program: Program,
    inputs: dict[str, InputLike],
    *,
    n_runs: int = 10,
    warmup: int = 1,
    n_threads: int = DEFAULT_N_THREADS,
    backend: Any = None,
) -> BenchResult:
    """``program``'s graph built once (:func:`program_session`), run ``warmup`` + ``n_runs`` times,
    each run timed (compute only)."""
    if n_runs < 1:
        raise ValueError(f"ggml_benchmark_program: n_runs must be >= 1, got {n_runs}")
    s = program_session(program, inputs, backend=backend, n_threads=n_threads)
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
