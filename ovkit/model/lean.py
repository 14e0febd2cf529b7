"""A GGUF decoder as one compiled OpenVINO model, built straight from the file's blocks.

The weights go tensor by tensor from the file into the compressed forms the CPU plugin runs as
FullyConnected with decompression (4-bit and 8-bit integers with f16 or f32 scales per ggml block,
a zero point where the block type has a minimum), read with ``pread`` so no page of the file stays
mapped; no decoded host copy is kept.  The KV cache lives in OpenVINO state (ReadValue/Assign
around ScaledDotProductAttention, the stateful form the CPU plugin fuses, GenAI's and the real
backend's), and ``n_tokens`` and the cached length are dynamic, so one compiled model serves every
prompt length and context.  Once compiled, the translated ``ov.Model`` and the weight arrays are
released: the plugin holds its own packed copy.

With ``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR`` set, the compiled model is exported once warm and a
later start imports it instead of building and compiling (``ovkit.engine.blob_cache``).

The nodes carry llama.cpp's tensor names (``attn_norm-0``, ``Qcur-0``, ``ffn_out-0``,
``result_output``) as friendly names, so OpenVINO's profile reads in ggml's terms.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ovkit import quant
from ovkit.engine.blob_cache import BlobCache
from ovkit.gguf import GGUFModel, TensorInfo
from ovkit.ir import RopeType
from ovkit.model.arch import HParams, ModelError
from ovkit.model.program import output_weight_name
from ovkit.runtime import Core

#: How each block type is held on the device: its integer container, and whether it has a
#: per-block minimum (a zero point ``-min/scale`` then, in f32).  Other types are decoded to f16.
CONTAINERS: dict[str, str] = {
    "q4_0": "i4",
    "q8_0": "i8",
    "q6_K": "i8",
    "q4_1": "u4",
    "q4_K": "u4",
    "q5_1": "u8",
    "q5_K": "u8",
}
#: The integer offset that turns a symmetric type's stored values into signed ones is applied
#: on decoding (``quant.decode_blocks``: q4_0 ``q - 8``, q6_K ``q - 32``), so no zero point is needed.
PLAIN = {"f32": np.float32, "f16": np.float16}
#: Input names (llama.cpp's where it has one).
TOKENS, POSITIONS, OUT_IDS, BEAM = "inp_tokens", "inp_pos", "out_ids", "beam_idx"
LOGITS = "result_output"
#: Each layer's 2-d weights (``blk.N.<name>.weight``).
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_gate", "ffn_down")


def _ops() -> Any:
    import openvino.opset13 as ops

    return ops


def _ov() -> Any:
    import openvino as ov

    return ov


def read_tensor(gguf: GGUFModel, info: TensorInfo) -> np.ndarray:
    """The tensor's bytes, read from the file (not the mapping: its pages would count as ours)."""
    out = np.empty(info.nbytes, np.uint8)
    with open(gguf.path, "rb", buffering=0) as fh:
        view = out.data
        done = 0
        while done < info.nbytes:
            n = os.preadv(fh.fileno(), [view[done:]], info.offset + done)
            if n <= 0:
                raise ModelError(
                    f"{gguf.path}: tensor {info.name!r} is cut short at byte {info.offset + done}"
                )
            done += n
    return out


def model_device_bytes(gguf: GGUFModel) -> int:
    """Bytes every tensor of the file takes in its device form."""
    return sum(device_bytes(t) for t in gguf.tensors.values())


def device_bytes(info: TensorInfo) -> int:
    """Bytes a tensor takes in its device form (before the plugin's own packing)."""
    n = int(np.prod(info.shape))
    if info.type in CONTAINERS:
        spec = quant.quant_spec(info.type)
        bits = 4 if CONTAINERS[info.type].endswith("4") else 8
        groups = n // spec.group
        zp = 4 if not spec.symmetric else 0
        scale = 2 if info.type in ("q4_0", "q8_0", "q4_1") else 4
        return n * bits // 8 + groups * (scale + zp)
    if info.type in PLAIN:
        return info.nbytes
    return 2 * n  # decoded to f16


class WeightFile:
    """The converted weights in an unlinked file, each array mapped from it.

    The CPU plugin packs its own copy of every compressed weight on the first run; the pages it
    read ours from are then given back (``release``: ``MADV_DONTNEED``), so the weights are held
    once.  A page touched again (an embedding row) is read back from the file, never zeroed, so
    releasing is always safe.  ``directory``: ``GGML_OPENVINO_SPILL_DIR`` (made if missing) or,
    where no file can be made there, the temp directory: the configuration has already warned of
    a path that cannot be a directory, and a spill file is never a reason to refuse a model."""

    def __init__(self, directory: str | None = None) -> None:
        import tempfile

        self.fd = -1
        try:
            if directory:
                os.makedirs(directory, exist_ok=True)
            fd, path = tempfile.mkstemp(prefix="ovkit-weights-", dir=directory)
        except OSError:
            fd, path = tempfile.mkstemp(prefix="ovkit-weights-")
        os.unlink(path)  # the space is freed with the last mapping
        self.fd = fd
        # closed with the object, or at exit (a __del__ then finds module globals gone)
        weakref.finalize(self, os.close, fd)
        self.size = 0
        self.maps: list[Any] = []

    def put(self, array: np.ndarray) -> np.ndarray:
        """``array``'s bytes (u8) appended to the file, returned as a read-only mapped view."""
        import mmap

        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
        offset = -(-self.size // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY
        done = 0
        while done < data.nbytes:
            done += os.pwrite(self.fd, data[done:], offset + done)
        self.size = offset + data.nbytes
        mm = mmap.mmap(self.fd, data.nbytes, access=mmap.ACCESS_READ, offset=offset)
        self.maps.append(mm)
        return np.frombuffer(mm, np.uint8)

    def release(self) -> None:
        """Drop the mapped pages from memory (the file keeps them)."""
        import mmap

        for mm in self.maps:
            mm.madvise(mmap.MADV_DONTNEED)


#: Blocks converted per step: the step's temporaries stay in the CPU's caches.
_STEP = 1 << 15


def _q4_0_parts(raw: np.ndarray, rows: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (f16 d, 16 bytes: element j in the low nibble of byte j, j + 16 in its high
    nibble, stored as q + 8) as OpenVINO's packed i4 [rows, k/32, 16] (element 2i in the low nibble
    of byte i; ``q ^ 8`` is ``q - 8`` in 4-bit two's complement) and the scales [rows, k/32, 1].
    Byte pairs are read as u16 (``b0 | b1 << 8``): masking 0x0F0F and or-ing in a 4-bit shift puts
    ``lo(b0) | lo(b1) << 4`` in the low byte, and the same on ``>> 4`` for the high nibbles."""
    blocks = raw.reshape(-1, 18)
    pairs = blocks[:, 2:].view(np.uint16)  # [n, 8]
    packed = np.empty((len(blocks), 16), np.uint8)
    t = np.empty((_STEP, 8), np.uint16)
    u = np.empty_like(t)
    for start in range(0, len(blocks), _STEP):
        v, stop = pairs[start : start + _STEP], start + _STEP
        a, b = t[: len(v)], u[: len(v)]
        for half, shift in ((slice(0, 8), 0), (slice(8, 16), 4)):
            np.right_shift(v, shift, out=a)
            np.bitwise_and(a, 0x0F0F, out=a)
            np.right_shift(a, 4, out=b)
            np.bitwise_or(a, b, out=a)
            packed[start:stop, half] = a
    packed ^= 0x88
    d = np.ascontiguousarray(blocks[:, :2]).view(np.float16)
    return packed.reshape(rows, k // 32, 16), d.reshape(rows, k // 32, 1)


def _q8_0_parts(raw: np.ndarray, rows: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Q8_0 blocks (f16 d, 32 int8) as i8 [rows, k/32, 32] and the scales [rows, k/32, 1]."""
    blocks = raw.reshape(-1, 34)
    q = np.ascontiguousarray(blocks[:, 2:]).view(np.int8)
    d = np.ascontiguousarray(blocks[:, :2]).view(np.float16)
    return q.reshape(rows, k // 32, 32), d.reshape(rows, k // 32, 1)


#: Block types read straight into their device form (the common ones; the rest go through
#: ``quant.decode_blocks``): type -> (parts, container).
FAST = {"q4_0": (_q4_0_parts, "i4"), "q8_0": (_q8_0_parts, "i8")}


def _pack4(q: np.ndarray) -> np.ndarray:
    """4-bit values (the low nibble of each byte) packed two per byte, element 2i in the low nibble."""
    v = (q.astype(np.uint8, copy=False) & 0x0F).reshape(-1)
    return v[0::2] | (v[1::2] << 4)


@dataclass(frozen=True, slots=True)
class Parts:
    """A 2-d weight converted to its device form: integer blocks [rows, groups, group] (``container``
    "i4"/"u4": packed two per byte) or plain values [rows, k], the scale [rows, groups, 1] and zero
    point (None where there are none), and the group size."""

    weight: np.ndarray
    container: str | None
    scale: np.ndarray | None
    zp: np.ndarray | None
    group: int


class _Weights:
    """Builds each weight's decompression subgraph once, from the file."""

    def __init__(
        self,
        gguf: GGUFModel,
        exact: bool,
        store: WeightFile,
        device_class: str,
        no_requant: bool,
        row_orders: dict[str, np.ndarray],
    ) -> None:
        self.gguf = gguf
        self.row_orders = row_orders  #: tensor name -> the order its rows are read in
        self.exact = exact
        self.device_class = device_class
        self.no_requant = no_requant
        self.store = store
        self._cache: dict[tuple[str, str], Any] = {}

    def info(self, name: str) -> TensorInfo:
        try:
            return self.gguf.tensors[name]
        except KeyError:
            raise ModelError(f"{self.gguf.path}: no tensor {name!r}") from None

    def constant(self, values: np.ndarray, element_type: str | None = None) -> Any:
        """A Constant sharing the weight file's copy of ``values`` (``element_type``: a packed
        4-bit type, ``values`` then holding its bytes)."""
        ov = _ov()
        et = getattr(ov.Type, element_type) if element_type else ov.Type(values.dtype)
        shape = values.shape if element_type is None else values.shape[:-1] + (values.shape[-1] * 2,)
        view = self.store.put(values)
        return ov.op.Constant(ov.Tensor(view, ov.Shape(list(shape)), et), shared_memory=True)

    def read(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes with its rows (elements of a 1-d tensor) in ``row_orders``' order."""
        raw = read_tensor(self.gguf, info)
        order = self.row_orders.get(info.name)
        if order is None:
            return raw
        return raw.reshape(len(order), -1)[order].reshape(-1)

    def plain(self, name: str) -> Any:
        """A small tensor (norms, biases) as an f32 Constant."""
        key = (name, "plain")
        if key not in self._cache:
            info = self.info(name)
            raw = self.read(info)
            if info.type in PLAIN:
                arr = raw.view(PLAIN[info.type]).astype(np.float32)
            elif info.type == "bf16":
                arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                arr = quant.decode_blocks(info.type, raw, info.shape).dequantize()
            self._cache[key] = _ops().constant(arr.reshape(info.shape))
        return self._cache[key]

    def convert(self, name: str) -> Parts:
        """A 2-d weight in its device form, as arrays (thread-safe: no Constant, no store)."""
        info = self.info(name)
        rows, k = int(np.prod(info.shape[:-1])), info.shape[-1]
        raw = self.read(info)
        if info.type in PLAIN or info.type == "bf16":
            arr = raw.view(np.uint16) if info.type == "bf16" else raw.view(PLAIN[info.type])
            if info.type == "bf16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            keep = np.float32 if self.exact and info.type != "f16" else np.float16
            return Parts(arr.reshape(rows, k).astype(keep, copy=False), None, None, None, k)
        target = quant.requant_type(
            name, self.device_class, info.type, no_requant=self.no_requant, shape=info.shape
        )
        if info.type in FAST and target is quant.RequantTarget.NATIVE and k % 32 == 0:
            fast, container = FAST[info.type]
            q, d = fast(raw, rows, k)
            scale = d if np.isfinite(d).all() else d.astype(np.float32)
            return Parts(q, container if container == "i4" else None, scale, None, 32)
        if info.type in quant.REPACKS:  # Q5_0: losslessly Q8_0 blocks
            qtype, blocks = quant.repack_blocks(info.type, raw)
            dec = quant.decode_blocks(qtype, blocks, (rows, k))
            container = "i8"
        elif info.type in CONTAINERS:
            dec = quant.decode_blocks(info.type, raw, (rows, k))
            container = CONTAINERS[info.type]
        else:
            values = quant.decode_blocks(info.type, raw, (rows, k)).dequantize()
            return Parts(values.astype(np.float16), None, None, None, k)
        if target is quant.RequantTarget.F16:
            return Parts(dec.dequantize().astype(np.float16), None, None, None, k)
        if target in quant.REQUANT_CONTAINER:  # the device's policy, as the backend applies it
            dec = quant.requantize(dec.dequantize(), target)
            container = quant.REQUANT_CONTAINER[target]
        del raw
        g = dec.group
        packed: str | None = container if container.endswith("4") else None
        if packed:
            weight = _pack4(dec.q).reshape(rows, k // g, g // 2)
        else:
            weight = dec.q.astype(np.int8 if container == "i8" else np.uint8).reshape(rows, k // g, g)
        scale = dec.scale.reshape(rows, k // g, 1)
        zp = None
        if dec.bias is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                zp = np.where(scale != 0, -dec.bias.reshape(scale.shape) / scale, 0.0).astype(np.float32)
        s16 = scale.astype(np.float16)
        exact_f16 = zp is None and np.array_equal(s16.astype(np.float32), scale) and np.isfinite(s16).all()
        return Parts(weight, packed, s16 if exact_f16 else scale.astype(np.float32), zp, g)

    def prefetch(self, names: list[str], workers: int) -> None:
        """Convert ``names`` on ``workers`` threads (numpy gives the GIL up while it converts), at
        most two per thread ahead of the Constants made from them: the conversion is a sixth to a
        quarter of a cold start, and single-threaded it left a core idle."""
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="ovkit-convert")
        pending: deque[tuple[str, Future[Parts]]] = deque()
        try:
            for name in names:
                pending.append((name, pool.submit(self.convert, name)))
                if len(pending) > 2 * workers:
                    self._take(*pending.popleft())
            while pending:
                self._take(*pending.popleft())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _take(self, name: str, future: Any) -> None:
        self._cache[(name, "parts")] = self._constants(future.result())

    def _constants(self, parts: Parts) -> tuple[Any, Any, Any | None, int]:
        weight = self.constant(parts.weight, parts.container)
        scale = None if parts.scale is None else self.constant(parts.scale)
        zp = None if parts.zp is None else self.constant(parts.zp)
        return weight, scale, zp, parts.group

    def _parts(self, name: str) -> tuple[Any, Any, Any | None, int]:
        """A 2-d weight's integer Constant [rows, groups, group], its scale [rows, groups, 1] and
        zero point (or None), and the group size; (Constant f16/f32 [rows, k], None, None, k) when
        the type has no compressed form."""
        cached = self._cache.pop((name, "parts"), None)
        return cached if cached is not None else self._constants(self.convert(name))

    def matrix(self, name: str) -> Any:
        """``name`` [rows, k] as an f32 value: the decompression chain the plugin folds into a
        FullyConnected (Convert, Subtract zero point, Multiply scale, Reshape)."""
        key = (name, "matrix")
        if key not in self._cache:
            ops = _ops()
            weight, scale, zp, g = self._parts(name)
            if scale is None:
                out = weight if weight.get_element_type() == _ov().Type.f32 else ops.convert(weight, "f32")
            else:
                dt = scale.get_element_type()
                w = ops.convert(weight, dt)
                if zp is not None:
                    w = ops.subtract(w, zp)
                w = ops.multiply(w, scale)
                rows, groups = weight.get_shape()[0], weight.get_shape()[1]
                w = ops.reshape(w, ops.constant(np.array([rows, groups * g], np.int64)), False)
                out = w if dt == _ov().Type.f32 else ops.convert(w, "f32")
            _named(out, name)
            self._cache[key] = out
        return self._cache[key]

    def rows(self, name: str, ids: Any) -> Any:
        """Rows ``ids`` of ``name`` as f32 (the embedding): the weight's chain, then a Gather."""
        ops = _ops()
        return ops.gather(self.matrix(name), ids, ops.constant(np.int64(0)))


def _i64(values: Any) -> Any:
    return _ops().constant(np.asarray(values, np.int64))


def _rms_norm(x: Any, w: Any, eps: float, name: str) -> Any:
    ops = _ops()
    mean = ops.reduce_mean(ops.multiply(x, x), _i64([-1]), True)
    return _named(
        ops.multiply(ops.divide(x, ops.sqrt(ops.add(mean, ops.constant(np.float32(eps))))), w), name
    )


def _named(node: Any, name: str) -> Any:
    """``node`` (a Node or an Output) with llama.cpp's tensor name as its friendly name."""
    (node.get_node() if hasattr(node, "get_node") else node).set_friendly_name(name)
    return node


def _rope(x: Any, cos: Any, sin: Any, head_dim: int) -> Any:
    """ggml's NEOX rope of ``x`` [1, T, H, D], the two halves of a head rotating, with ``cos`` and
    ``sin`` [1, T, 1, D] (each angle twice): ``x·cos + [-x₂, x₁]·sin``, the form the CPU plugin
    fuses into one RoPE node.  llama's adjacent pairs (mode 0) take this form too: ``build``
    reads the Q and K weights' rows pair-halves first (``rope_row_order``)."""
    ops = _ops()
    x1, x2 = ops.variadic_split(x, _i64(3), _i64([head_dim // 2, head_dim // 2])).outputs()
    half_turn = ops.concat([ops.multiply(x2, ops.constant(np.float32(-1))), x1], -1)
    return ops.add(ops.multiply(x, cos), ops.multiply(half_turn, sin))


def rope_row_order(n_heads: int, head_dim: int) -> np.ndarray:
    """Rows of a Q or K weight reordered, head by head, so that the pairs ggml's mode-0 rope turns
    (dims 2i, 2i+1) become the NEOX halves (i, i + D/2).  Q and K are reordered alike, so Q·Kᵀ and
    the attention are unchanged; only Q and K themselves are held in the other order."""
    within = np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])
    return (np.arange(n_heads)[:, None] * head_dim + within[None, :]).reshape(-1)


def _inv_freq(hp: HParams, base: float, scale: float, factors: np.ndarray | None) -> np.ndarray:
    """θ per pair for position 1, as ggml computes it (f32, θ_i = θ_{i-1}·base^(-2/n_dims))."""
    half = hp.head_dim // 2
    step = np.float32(base) ** np.float32(-2.0 / hp.head_dim)
    theta = np.empty(half, np.float32)
    t = np.float32(1.0)
    for i in range(half):
        theta[i] = t
        t = np.float32(t * step)
    theta *= np.float32(scale)
    if factors is not None:
        theta /= factors[:half].astype(np.float32)
    return theta


def rope_row_orders(hp: HParams) -> dict[str, np.ndarray]:
    """The Q and K tensors' row orders that turn llama's adjacent rope pairs into halves (none
    for NEOX-mode models, whose pairs are halves already)."""
    orders: dict[str, np.ndarray] = {}
    if hp.spec.rope_type != RopeType.NEOX:
        for il in range(hp.n_layer):
            for part, heads in (("q", hp.n_head), ("k", hp.n_head_kv)):
                orders[f"blk.{il}.attn_{part}.weight"] = rope_row_order(heads, hp.head_dim)
                orders[f"blk.{il}.attn_{part}.bias"] = rope_row_order(heads, hp.head_dim)
                orders[f"blk.{il}.attn_{part}_norm.weight"] = rope_row_order(1, hp.head_dim)
    return orders


def matrix_names(gguf: GGUFModel, hp: HParams) -> list[str]:
    """The 2-d weights the graph reads, in file order (read and converted ahead in that order)."""
    used = {"token_embd.weight", output_weight_name(gguf.tensors)} | {
        f"blk.{il}.{part}.weight" for il in range(hp.n_layer) for part in MATRICES
    }
    return [t.name for t in sorted(gguf.tensors.values(), key=lambda t: t.offset) if t.name in used]


def build(
    gguf: GGUFModel,
    hp: HParams,
    store: WeightFile,
    *,
    exact: bool = True,
    device_class: str = "CPU",
    no_requant: bool = False,
    workers: int | None = None,
) -> Any:
    """The whole decoder as one stateful ``ov.Model``: inputs ``inp_tokens`` [1, T] and
    ``inp_pos`` [1, T] (positions continue the cache), ``out_ids`` [N] (the rows whose logits come
    back); output ``result_output`` [N, n_vocab]; one K and one V state per layer.  ``workers``:
    threads converting the weights (default: every core)."""
    ov, ops = _ov(), _ops()
    spec = hp.spec
    if spec.moe:
        raise ModelError(f"{hp.arch}: mixture-of-experts layers have no lean form (use shapes='buckets')")
    hd, n_h, n_kv = hp.head_dim, hp.n_head, hp.n_head_kv
    W = _Weights(gguf, exact, store, device_class, no_requant, rope_row_orders(hp))
    W.prefetch(matrix_names(gguf, hp), workers or os.cpu_count() or 1)
    tokens = ops.parameter([1, -1], ov.Type.i64, name=TOKENS)
    positions = ops.parameter([1, -1], ov.Type.i64, name=POSITIONS)
    out_ids = ops.parameter([-1], ov.Type.i64, name=OUT_IDS)
    # the plugin fuses ReadValue -> Gather(beam) -> Concat -> SDPA (and the Assign) into one node
    # that keeps the cache in place: the Gather must be there, with the one sequence's index 0
    beam = ops.parameter([-1], ov.Type.i32, name=BEAM)
    for p, n in ((tokens, TOKENS), (positions, POSITIONS), (out_ids, OUT_IDS), (beam, BEAM)):
        p.output(0).get_tensor().set_names({n})

    x = _named(W.rows("token_embd.weight", ops.reshape(tokens, _i64([-1]), False)), "inp_embd")  # [T, E]
    if spec.embd_scale:
        x = _named(ops.multiply(x, ops.constant(np.sqrt(np.float32(hp.n_embd)))), "inp_scaled")
    pos_f = ops.convert(ops.reshape(positions, _i64([-1, 1]), False), "f32")  # [T, 1]
    # the causal mask [1, 1, T, S] from the positions: the cache holds positions 0..S-1 in order
    q_pos = ops.reshape(positions, _i64([-1, 1]), False)
    n_cells = ops.add(ops.reduce_max(positions, _i64([0, 1]), False), _i64(1))  # the cache after this step
    cells = ops.unsqueeze(ops.range(_i64(0), n_cells, _i64(1), "i64"), _i64(0))  # [1, S]
    freqs = gguf.tensors.get("rope_freqs.weight")
    factors = read_tensor(gguf, freqs).view(np.float32) if freqs is not None else None
    ropes: dict[tuple[float, float], tuple[Any, Any]] = {}
    sinks: list[Any] = []
    r = n_h // n_kv
    kq_scale = 1.0 if spec.q_scale else hp.attn_scale
    masks: dict[bool, Any] = {}
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        inp_sa = x
        cur = _rms_norm(x, W.plain(p + "attn_norm.weight"), hp.rms_eps, f"attn_norm-{il}")
        qkv = []
        for part, heads in (("q", n_h), ("k", n_kv), ("v", n_kv)):
            t = ops.matmul(cur, W.matrix(f"{p}attn_{part}.weight"), False, True)
            if spec.qkv_bias:
                t = ops.add(t, W.plain(f"{p}attn_{part}.bias"))
            t = _named(t, f"{part.upper()}cur-{il}")
            qkv.append(ops.reshape(t, _i64([1, -1, heads, hd]), False))  # [1, T, H, D]
        q, k, v = qkv
        if spec.qk_norm:
            q = _rms_norm(q, W.plain(p + "attn_q_norm.weight"), hp.rms_eps, f"Qcur_normed-{il}")
            k = _rms_norm(k, W.plain(p + "attn_k_norm.weight"), hp.rms_eps, f"Kcur_normed-{il}")
        base_scale = hp.rope_base_scale(il)
        if base_scale not in ropes:
            inv_freq = _inv_freq(hp, *base_scale, factors)
            theta = ops.multiply(pos_f, ops.constant(np.concatenate([inv_freq, inv_freq])[None, :]))
            theta = ops.reshape(theta, _i64([1, -1, 1, hd]), False)
            ropes[base_scale] = (ops.cos(theta), ops.sin(theta))
        cos, sin = ropes[base_scale]
        q = _named(_rope(q, cos, sin, hd), f"Qcur-{il}")
        k = _named(_rope(k, cos, sin, hd), f"Kcur-{il}")
        if spec.q_scale:
            q = ops.multiply(q, ops.constant(np.float32(hp.attn_scale)))
        # the cache is kept [1, S, H_kv, D], as K and V come out of their projections; SDPA reads
        # Q, K and V through one Transpose each to [1, H, T|S, D], which the plugin folds into its
        # fused attention node (so none of them is copied)
        both = []
        for kind, new in (("k", k), ("v", v)):
            info = ov.op.util.VariableInfo()
            info.data_shape = ov.PartialShape([1, -1, n_kv, hd])
            info.data_type = ov.Type.f32
            info.variable_id = f"cache_{kind}_l{il}"
            var = ov.op.util.Variable(info)
            empty = ops.constant(np.zeros((1, 0, n_kv, hd), np.float32))
            past = ops.gather(ops.read_value(empty, var), beam, _i64(0))
            full = ops.concat([past, new], 1)
            sinks.append(ops.assign(full, var))
            both.append(full)
        k_all, v_all = both
        swa = hp.is_swa(il)
        if swa not in masks:
            seen = ops.less_equal(cells, q_pos)  # [T, S]
            if swa:
                seen = ops.logical_and(seen, ops.less(ops.subtract(q_pos, cells), _i64(hp.n_swa)))
            m = ops.select(seen, ops.constant(np.float32(0)), ops.constant(np.float32(-np.inf)))
            masks[swa] = ops.unsqueeze(m, _i64([0, 1]))
        if r > 1:  # each KV head serves r query heads
            k_all, v_all = (
                ops.reshape(
                    ops.broadcast(
                        ops.unsqueeze(t, _i64(3)), _i64([1, 1, 1, r, 1]), broadcast_spec="BIDIRECTIONAL"
                    ),
                    _i64([1, -1, n_h, hd]),
                    False,
                )
                for t in (k_all, v_all)
            )
        q, k_all, v_all = (ops.transpose(t, _i64([0, 2, 1, 3])) for t in (q, k_all, v_all))
        att = ops.scaled_dot_product_attention(
            q, k_all, v_all, masks[swa], ops.constant(np.float32(kq_scale)), causal=False
        )
        att = ops.reshape(ops.transpose(att, _i64([0, 2, 1, 3])), _i64([-1, n_h * hd]), False)
        cur = _named(att, f"kqv_out-{il}")
        cur = ops.matmul(cur, W.matrix(p + "attn_output.weight"), False, True)
        if spec.names_attn_out:
            _named(cur, f"attn_out-{il}")
        if spec.post_norms:
            cur = _rms_norm(
                cur, W.plain(p + "post_attention_norm.weight"), hp.rms_eps, f"attn_post_norm-{il}"
            )
        ffn_inp = _named(ops.add(cur, inp_sa), f"{'sa_out' if spec.post_norms else 'ffn_inp'}-{il}")
        cur = _rms_norm(ffn_inp, W.plain(p + "ffn_norm.weight"), hp.rms_eps, f"ffn_norm-{il}")
        up = _named(ops.matmul(cur, W.matrix(p + "ffn_up.weight"), False, True), f"ffn_up-{il}")
        gate = _named(ops.matmul(cur, W.matrix(p + "ffn_gate.weight"), False, True), f"ffn_gate-{il}")
        if spec.ffn_act == "gelu":
            act = _named(ops.multiply(ops.gelu(gate, "tanh"), up), f"ffn_geglu-{il}")
        else:
            act = _named(ops.multiply(ops.swish(gate), up), f"ffn_swiglu-{il}")
        cur = _named(ops.matmul(act, W.matrix(p + "ffn_down.weight"), False, True), f"ffn_out-{il}")
        if spec.post_norms:
            cur = _rms_norm(cur, W.plain(p + "post_ffw_norm.weight"), hp.rms_eps, f"ffn_post_norm-{il}")
        x = _named(ops.add(cur, ffn_inp), f"l_out-{il}")
    x = ops.gather(x, out_ids, _i64(0))
    cur = _rms_norm(x, W.plain("output_norm.weight"), hp.rms_eps, "result_norm")
    logits = ops.matmul(cur, W.matrix(output_weight_name(gguf.tensors)), False, True)
    cap = hp.final_logit_softcapping
    if cap:
        logits = ops.multiply(
            ops.tanh(ops.multiply(logits, ops.constant(np.float32(1.0 / cap)))), ops.constant(np.float32(cap))
        )
    logits = _named(logits, LOGITS)
    result = ops.result(logits)
    result.output(0).get_tensor().set_names({LOGITS})
    return ov.Model([result], sinks, [tokens, positions, out_ids, beam], f"ovkit-lean-{hp.arch}")


#: From this many bytes of weights the device precision is f32 activations quantized to int8 per
#: 32 on the fly (the plugin's dynamic quantization, llama.cpp's own Q8_0 activations) instead of
#: bf16: at one row the plugin reads 4-bit weights at 10.3-11.3 GB/s against 7.0-7.7 in bf16
#: (``benchmarks/probe_gemv.py``), so decode is faster once the weights outgrow the caches, but
#: bf16 prefills faster on AMX.  At 3 B int8 wins both; at 1.1 B (628 MiB) bf16 prefills 1.2x
#: faster and decodes 0.89x as fast, which keeps both at or above GenAI's
#: (``benchmarks/probe_same_process.py``); below, bf16 prefills 2.5x faster and decodes as fast.
DYNAMIC_INT8_FROM_BYTES = 1 << 30


def compile_properties(exact: bool, n_threads: int | None, weight_bytes: int = 0) -> dict[str, Any]:
    """CPU properties: f16 KV cache as llama.cpp keeps it; ``exact``: f32 arithmetic and no
    dynamic quantization of activations; else the device's own precision, with int8 activations
    for weights of ``DYNAMIC_INT8_FROM_BYTES`` or more."""
    props: dict[str, Any] = {"KV_CACHE_PRECISION": "f16", "PERFORMANCE_HINT": "LATENCY"}
    if exact:
        props |= {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    elif weight_bytes >= DYNAMIC_INT8_FROM_BYTES:
        props |= {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "32"}
    if n_threads:
        props["INFERENCE_NUM_THREADS"] = str(n_threads)
    return props


class Releasable(Protocol):
    """Memory a compiled model was made from (``WeightFile``, ``blob_cache.MappedBlob``): its pages
    can be given back once the plugin has packed its own copy."""

    def release(self) -> None: ...


class LeanSession:
    """One infer request of a compiled lean model: feeds tokens after what its state holds
    (``store``: the weight file or the cached blob the compiled model was made from, kept with
    it; ``loaded_from_cache``: imported from ``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``)."""

    def __init__(
        self, compiled: Any, store: Releasable | None = None, *, loaded_from_cache: bool = False
    ) -> None:
        self.compiled = compiled
        self.store = store
        self.loaded_from_cache = loaded_from_cache
        self.request = compiled.create_infer_request()
        self.n_past = 0

    def reset(self) -> None:
        self.request.reset_state()
        self.n_past = 0

    def run(self, tokens: np.ndarray, out_ids: np.ndarray) -> np.ndarray:
        """Logits [len(out_ids), n_vocab] of ``tokens`` fed at positions ``n_past..``."""
        n = tokens.size
        pos = np.arange(self.n_past, self.n_past + n, dtype=np.int64)
        self.request.infer(
            {
                TOKENS: tokens.reshape(1, n).astype(np.int64),
                POSITIONS: pos.reshape(1, n),
                OUT_IDS: np.asarray(out_ids, np.int64),
                BEAM: np.zeros(1, np.int32),
            }
        )
        self.n_past += n
        return np.array(self.request.get_tensor(LOGITS).data)

    @property
    def inference_precision(self) -> str:
        """The activations' precision, "+ int8 activations" where they are quantized on the fly."""
        precision = str(self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string())
        dq = int(self.compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE"))
        return f"{precision} + int8 activations per {dq}" if dq and precision == "f32" else precision


def compile_lean(
    gguf: GGUFModel,
    hp: HParams,
    device: str,
    *,
    core: Core,
    exact: bool,
    no_requant: bool = False,
    n_threads: int | None = None,
    spill_dir: str | None = None,
    cache_dir: str | None = None,
) -> LeanSession:
    """Build, compile and warm the lean model: one prefill and one decode step (the plugin packs
    its weights on the first of each), the mapped weight pages released all along.  ``cache_dir``
    (``GGML_OPENVINO_COMPILED_MODEL_CACHE_DIR``): imported from there when an entry for this file
    and these settings is, else exported there once warm (``cache_key``)."""
    import gc

    props = compile_properties(exact, n_threads, model_device_bytes(gguf))
    cache = BlobCache(cache_dir, "ovkit: lean model cache", "lean-") if cache_dir else None
    if cache is not None:
        key = cache_key(gguf, device, core=core, exact=exact, no_requant=no_requant, n_threads=n_threads)
        hit = cache.load(key, device, props, core=core)
        if hit is not None:
            session = LeanSession(hit.compiled, hit.blob, loaded_from_cache=True)
            with releasing(hit.blob):
                _warm(session)
            return session
    store = WeightFile(spill_dir)
    model = build(gguf, hp, store, exact=exact, device_class="CPU", no_requant=no_requant, workers=n_threads)
    with releasing(store):
        compiled = core.compile_model(model, device, props)
        del model
        gc.collect()
        session = LeanSession(compiled, store)
        _warm(session)
        if cache is not None:  # the export reads the weight pages again
            cache.store(compiled, key, {})
    return session


def cache_key(gguf: GGUFModel, device: str, *, core: Core, **settings: bool | int | None) -> dict[str, Any]:
    """What the compiled lean model depends on besides ovkit and OpenVINO, as JSON values: the
    file itself (real path, size, mtime, inode, sha256 of its header: metadata and tensor table,
    read, not mapped), the device's CPU and ``settings``."""
    st = os.stat(gguf.path)
    header = min((t.offset for t in gguf.tensors.values()), default=gguf.file_size)
    with open(gguf.path, "rb", buffering=0) as fh:
        header_sha256 = hashlib.sha256(fh.read(header)).hexdigest()
    return {
        "gguf": os.path.realpath(gguf.path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "inode": [st.st_dev, st.st_ino],
        "header_sha256": header_sha256,
        "device": device,
        "cpu": str(core.get_property(device, "FULL_DEVICE_NAME")),
        **settings,
    }


def _warm(session: LeanSession) -> None:
    """One prefill and one decode step: the plugin packs its weights on the first of each."""
    session.run(np.array([1, 1], np.int64), np.array([1], np.int64))
    session.run(np.array([1], np.int64), np.array([0], np.int64))
    session.reset()


#: How often ``releasing`` gives the mapped weight pages back while the plugin packs its copy.
RELEASE_EVERY_S = 0.05


@contextlib.contextmanager
def releasing(store: Releasable) -> Iterator[None]:
    """Give ``store``'s pages back every ``RELEASE_EVERY_S`` while the block runs, and once after.

    The plugin reads each weight once to pack its own copy; without this every page it read
    would stay resident until the end, and the load's peak would hold the weights twice.  A page
    given back while the plugin still reads it is read again from the file (correct, a little
    slower), so the peak is the packed copy and the pages of the last few weights."""
    import threading

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(RELEASE_EVERY_S):
            store.release()

    worker = threading.Thread(target=loop, name="ovkit-lean-release", daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()
        store.release()
