"""A quantized ggml weight as OpenVINO constants: :class:`QuantizedWeight` and its decompression
forms (``fast``, ``upstream``, ``upstream_bias``; ``docs/quant.md`` describes them), the
compressed matmul and row gather, and the CPU compile hints that suit the weights."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ovkit.config import FROM_ENV, FromEnv
from ovkit.quant.decode import Decoded, decode_blocks
from ovkit.quant.requant import (
    REQUANT_CONTAINER,
    REQUANT_GROUPED,
    RequantTarget,
    requant_refusal,
    requant_type,
    requantize,
)
from ovkit.quant.specs import FORMS, Form, QuantError, QuantSpec, checked_shape, n_rows, quant_spec, row_bytes


def _ov() -> Any:
    import openvino as ov

    return ov


def _ops() -> Any:
    import openvino.opset13 as ops

    return ops


def packed_constant(values: np.ndarray, element_type: str) -> Any:
    """A Constant of a sub-byte/byte integer type from integer ``values`` (packed low nibble first)."""
    ov = _ov()
    et = getattr(ov.Type, element_type)
    tensor = ov.Tensor(et, ov.Shape(list(values.shape)))
    dst = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    if element_type in ("u4", "i4", "f4e2m1"):
        v = (values.astype(np.int16) & 0x0F).astype(np.uint8).reshape(-1)
        if v.size % 2:
            v = np.concatenate([v, np.zeros(1, np.uint8)])
        dst[:] = v[0::2] | (v[1::2] << 4)
    else:
        small = values.astype(np.int8) if element_type == "i8" else values.astype(np.uint8)
        dst[:] = small.view(np.uint8).reshape(-1)
    return ov.op.Constant(tensor)


def _scale_type(scale: np.ndarray, *, exact: bool) -> type[np.floating[Any]]:
    """f16 when every scale survives the cast (``exact``: bit for bit, and normal in f16; else
    finite and non-zero staying non-zero), otherwise f32 — NaN, inf, values beyond f16's range or
    below its smallest subnormal (MXFP4's 2**-30) all stay f32, and so do f16 subnormals (a ``d``
    of 0x0001), so no kernel reads an f16-subnormal scale (in f32 they are normal)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s16 = scale.astype(np.float16)
    if not np.isfinite(s16).all():
        return np.float32
    if exact:
        f16_subnormal = (s16 != 0) & (np.abs(s16) < np.finfo(np.float16).smallest_normal)
        same = np.array_equal(s16.astype(np.float32), scale) and not f16_subnormal.any()
        return np.float16 if same else np.float32
    return np.float32 if np.any((s16 == 0) & (scale != 0)) else np.float16


def _decompress(weight: Any, scale: np.ndarray, *, exact: bool = True) -> Any:
    """``Convert(weight) → Multiply(scale)`` in f16 or f32 (one type for both inputs, as
    OpenVINO requires), chosen by :func:`_scale_type`."""
    ops = _ops()
    dt = _scale_type(scale, exact=exact)
    return ops.multiply(
        ops.convert(weight, "f16" if dt is np.float16 else "f32"), ops.constant(scale.astype(dt))
    )


#: MXFP4 exponent bytes 0 and 1 scale by 2**-128 and 2**-127, f32 subnormals, which OpenVINO's CPU
#: plugin flushes to zero in every constant it loads.  The fast form holds such "tiny" groups in a
#: second weight with the scale raised by 2**TINY_SHIFT (2**-8, 2**-7: normal even in f16) and lowers
#: that weight's product by 2**-TINY_SHIFT (normal too) at run time, where subnormals survive.
TINY_SHIFT = 120


def _to_f32(node: Any) -> Any:
    return node if node.get_element_type() == _ov().Type.f32 else _ops().convert(node, "f32")


@dataclass(frozen=True)
class QuantizedWeight:
    """A ggml-quantized weight (raw blocks + decoded view) usable as a graph constant; ``shape``
    in numpy order (``(rows, k)`` or ``(experts, rows, k)``)."""

    qtype: str
    shape: tuple[int, ...]
    raw: bytes = field(repr=False)
    name: str = ""
    form: Form = "fast"
    requant: RequantTarget = RequantTarget.NATIVE

    def __post_init__(self) -> None:
        spec = quant_spec(self.qtype)
        object.__setattr__(self, "qtype", spec.name)
        object.__setattr__(self, "requant", RequantTarget(self.requant))
        what = f"weight {self.name!r}" if self.name else "weight"
        object.__setattr__(self, "shape", checked_shape(spec, self.shape, what))
        if self.form not in FORMS:
            raise QuantError(f"unknown decompression form {self.form!r}; expected one of {FORMS}")
        if spec.host_decoded and self.form != "fast":
            raise QuantError(
                f"{spec.name} {what}: form {self.form!r} does not exist (upstream refuses {spec.name} "
                "weights); expected 'fast' (the host-decoded constant)"
            )
        refused = requant_refusal(self.requant, spec.name, self.shape, what)
        if refused:
            raise QuantError(refused)
        need = self.rows * row_bytes(spec.name, self.shape[-1])
        if len(self.raw) != need:
            raise QuantError(
                f"{spec.name} {what} of shape {self.shape} needs {need} bytes of blocks, got {len(self.raw)}"
            )

    # -- the graph-constant protocol (ovkit.graph.Graph.constant) --------------------------------
    @property
    def dtype(self) -> str:
        return self.qtype

    @property
    def spec(self) -> QuantSpec:
        return quant_spec(self.qtype)

    @property
    def nbytes(self) -> int:
        return len(self.raw)

    @property
    def rows(self) -> int:
        return n_rows(self.shape)

    @property
    def k(self) -> int:
        return self.shape[-1]

    @cached_property
    def decoded(self) -> Decoded:
        """Integer weights, scales and biases of the blocks, or of their requantization."""
        native = decode_blocks(self.qtype, self.raw, self.shape)
        if self.requant in (RequantTarget.NATIVE, RequantTarget.F16):
            return native
        return requantize(native.dequantize(), self.requant)

    @property
    def scale_group(self) -> int:
        """Elements per scale of the constant (``decoded.group``) without decoding the blocks: the
        requant target's groups, a row for host-decoded types and per-row Q8_0_C, else the type's."""
        if self.requant in REQUANT_GROUPED:
            return REQUANT_GROUPED[self.requant][0]
        if self.spec.host_decoded or self.requant is RequantTarget.Q8_0_C:
            return self.k
        return self.spec.group

    def may_be_int8(self) -> bool:
        """False when :attr:`container` is surely not i8/u8, told without decoding the blocks."""
        if self.requant in REQUANT_CONTAINER:
            return REQUANT_CONTAINER[self.requant] in NO_DYNQ_CONTAINERS
        if self.spec.host_decoded:
            return False
        if self.spec.name == "mxfp4":
            return self.form == "fast"
        return self.spec.container_bits == 8

    @cached_property
    def digest(self) -> str:
        """sha256 of the blocks plus type, shape and form (a cache key for compiled graphs)."""
        import hashlib

        h = hashlib.sha256(self.raw)
        h.update(f"|{self.qtype}|{self.shape}|{self.form}|{self.requant}".encode())
        return h.hexdigest()

    def dequantize(self) -> np.ndarray:
        """f32 values the constant holds: ggml's ``to_float`` of the blocks (after any requant)."""
        if self.requant is RequantTarget.F16:
            return self.decoded.dequantize().astype(np.float16).astype(np.float32).reshape(self.shape)
        return self.decoded.dequantize().reshape(self.shape)

    def with_form(self, form: Form) -> QuantizedWeight:
        return QuantizedWeight(self.qtype, self.shape, self.raw, self.name, form, self.requant)

    def with_requant(self, target: RequantTarget | str) -> QuantizedWeight:
        """The same blocks requantized to ``target`` (upstream's targets: Q8_0_C, Q4_0_128, Q4_0_64,
        Q4_1_64, F16)."""
        return QuantizedWeight(self.qtype, self.shape, self.raw, self.name, self.form, RequantTarget(target))

    def apply_policy(
        self, device_class: str, *, no_requant: bool = False, kquant: str | None | FromEnv = FROM_ENV
    ) -> QuantizedWeight:
        """Requantized as upstream's policy does for this tensor name and shape on ``device_class``
        (``kquant``: the REQUANT_KQUANT choice, by default the environment's)."""
        target = requant_type(
            self.name, device_class, self.qtype, no_requant=no_requant, shape=self.shape, kquant=kquant
        )
        return self.with_requant(target)

    @property
    def container(self) -> str:
        """OpenVINO element type of the weight Constant in this form."""
        spec = self.spec
        if self.requant in REQUANT_CONTAINER:
            return REQUANT_CONTAINER[self.requant]
        if spec.host_decoded:
            return "f16" if self._f16_exact else "f32"
        if self._host_f32:
            return "f32"
        if spec.name == "mxfp4":
            # fast: the exact integers 2*e2m1 in i8 (decompressing kernel, ~25% faster at n=1
            # than f4e2m1, which has no int8 path); upstream: the raw e2m1 codes
            return "i8" if self.form == "fast" else "f4e2m1"
        sign = "i" if spec.symmetric or self._offset else "u"
        return f"{sign}{spec.container_bits}"

    @cached_property
    def _f16_exact(self) -> bool:
        """Host-decoded values that f16 holds bit for bit (q1_0's ±d, most ternary blocks)."""
        v = self.decoded.q
        with np.errstate(over="ignore", invalid="ignore"):
            back = v.astype(np.float16).astype(np.float32)
        return bool(np.array_equal(back.view(np.uint32), v.view(np.uint32)))

    # -- OpenVINO --------------------------------------------------------------------------------
    def _grouped(self, values: np.ndarray) -> np.ndarray:
        g = self.decoded.group
        return values.reshape(self.rows, self.k // g, g)

    def _weight_const(self) -> Any:
        """The weight Constant [rows, k/G, G] in the element type of :attr:`container`."""
        dec, et = self.decoded, self.container
        if et == "f4e2m1":
            assert dec.codes is not None
            return packed_constant(self._grouped(dec.codes), "f4e2m1")
        q = dec.q
        offset = self._offset
        if offset:
            q = q.astype(np.int16) - offset
        return packed_constant(self._grouped(q), et)

    @cached_property
    def _offset(self) -> int:
        """Fast form of the asymmetric types: q - 8 (4-bit) or q - 16 (5-bit) in a signed container,
        only where ``(q-o)*s + (b + s*o)`` equals ``q*s + b`` in f32 for every weight (a huge scale
        beside a small bias rounds ``b`` away: such weights keep ``q*s + b``, ggml's arithmetic)."""
        dec = self.decoded
        if (
            self.form != "fast"
            or self.requant is not RequantTarget.NATIVE
            or dec.bias is None
            or self._host_f32
        ):
            return 0
        offset = 8 if self.spec.bits == 4 else 16
        o = np.float32(offset)
        with np.errstate(over="ignore", invalid="ignore"):
            same = all(
                np.array_equal((q - o) * sc + (b + sc * o), q * sc + b) for q, sc, b in self._row_runs()
            )
        return offset if same else 0

    @cached_property
    def _host_f32(self) -> bool:
        """Fast form whose decoded weights hold NaN or ±inf (a NaN/inf scale or bias, or scale·q
        beyond f32): built as the f32 constant of ggml's values, so its MatMul is a plain f32 one
        on every CPU.  A compressed FullyConnected quantizes the activations to int8 on CPUs with
        VNNI, and its integer sums times an inf scale are ±inf or NaN where the product is not."""
        dec = self.decoded
        if self.form != "fast" or self.requant is not RequantTarget.NATIVE or self.spec.host_decoded:
            return False
        qmax = max(int(dec.q.max(initial=0)), -int(dec.q.min(initial=0)))
        with np.errstate(over="ignore", invalid="ignore"):
            bound = np.abs(dec.scale.astype(np.float64)) * qmax
            if dec.bias is not None:
                bound = bound + np.abs(dec.bias)
            if np.all(bound < np.finfo(np.float32).max / 2):  # NaN fails the comparison
                return False
            return not all(np.isfinite(q * sc + b).all() for q, sc, b in self._row_runs())

    def _row_runs(self) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
        """(q as f32, scale, bias or 0) of the grouped weights in runs of rows (bounded temporaries)."""
        dec, grouped = self.decoded, self._grouped(self.decoded.q)
        step = max(1, (1 << 20) // self.k)
        for r in range(0, self.rows, step):
            bias = np.float32(0) if dec.bias is None else dec.bias[r : r + step, :, None]
            yield grouped[r : r + step].astype(np.float32), dec.scale[r : r + step, :, None], bias

    @cached_property
    def _tiny(self) -> np.ndarray | None:
        """The fast form's MXFP4 groups whose scale is an f32 subnormal (exponent byte 0 or 1),
        [rows, k/32] bool; None when there are none (every other weight)."""
        exponent = self.decoded.exponent
        if self.form != "fast" or self.requant is not RequantTarget.NATIVE or exponent is None:
            return None
        tiny = exponent < 2
        return tiny if tiny.any() else None

    def _tiny_split(self) -> tuple[Any, Any, Any]:
        """The weight as ``normal + tiny * low``: f32 [rows, k] nodes of the groups with a normal
        scale (tiny groups zeroed) and of the tiny groups with their scale raised by 2**TINY_SHIFT
        (the others zeroed), both compressed i8, and the f32 constant ``low`` = 2**-TINY_SHIFT."""
        ops, dec, tiny = _ops(), self.decoded, self._tiny
        assert tiny is not None and dec.exponent is not None
        q, one, in_tiny = self._grouped(dec.q), np.float32(1), tiny[:, :, None]

        def part(weights: np.ndarray, scale: np.ndarray) -> Any:
            return _to_f32(self._flat(_decompress(packed_constant(weights, "i8"), scale[:, :, None])))

        if self._host_f32:  # the other groups hold NaN/inf: ggml's values, as the f32 constant
            values = np.where(in_tiny, np.float32(0), self._grouped(dec.dequantize()))
            normal = ops.constant(values.reshape(self.rows, self.k))
        else:
            normal = part(np.where(in_tiny, 0, q), np.where(tiny, one, dec.scale))
        # 2**(e - 128 + TINY_SHIFT) for the tiny groups, 1 for the others
        shift = np.where(tiny, dec.exponent.astype(np.int32) - 128 + TINY_SHIFT, 0)
        small = part(np.where(in_tiny, q, 0), np.ldexp(one, shift).astype(np.float32))
        return normal, small, ops.constant(np.float32(2.0**-TINY_SHIFT))

    @cached_property
    def _zero_points(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Integer zero points and the exact residual ``bias + scale * zp`` (None: symmetric): the fast
        form's fixed offset (8 or 16), upstream's ``round(-bias/scale)`` in the unsigned container."""
        dec, spec = self.decoded, self.spec
        if dec.bias is None or self._host_f32:  # the f32 constant holds the bias already
            return None
        if self.form == "fast":
            offset = self._offset
            z = np.full(dec.scale.shape, offset, np.uint8)
            resid = dec.bias + dec.scale * np.float32(offset) if offset else dec.bias
            return z, resid.astype(np.float32)
        hi = 15 if spec.bits == 4 else 255
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            zf = np.where(dec.scale != 0, -dec.bias / dec.scale, 0.0)
            # NaN has no zero point (upstream's cast is undefined there): 0; infinities clamp
            z = np.clip(np.rint(np.nan_to_num(zf, nan=0.0, posinf=hi, neginf=0.0)), 0, hi).astype(np.uint8)
            scale_used = dec.scale.astype(np.float16).astype(np.float32)
            return z, (dec.bias + scale_used * z.astype(np.float32)).astype(np.float32)

    def _scaled(self, *, upstream: bool) -> Any:
        """Convert → [Subtract zp] → Multiply, grouped [rows, k/G, G] (without the residual bias)."""
        ops, dec, spec = _ops(), self.decoded, self.spec
        if self.requant is RequantTarget.F16:
            values = dec.dequantize().astype(np.float16)
            return ops.convert(ops.constant(self._grouped(values)), "f32")
        if spec.host_decoded:  # the decoded values as the constant (f16 only where exact)
            values = self._grouped(dec.q)
            if self.container == "f32":
                return ops.constant(values)
            return ops.convert(ops.constant(values.astype(np.float16)), "f32")
        if not upstream and self._tiny is not None:  # folded into one constant: subnormals flush
            normal, tiny, low = self._tiny_split()
            shape = ops.constant(
                np.array([self.rows, self.k // self.decoded.group, self.decoded.group], np.int64)
            )
            return ops.reshape(ops.add(normal, ops.multiply(tiny, low)), shape, False)
        if not upstream and self._host_f32:
            return ops.constant(self._grouped(dec.dequantize()))
        w = self._weight_const()
        if not upstream:
            # ggml's numbers: the scale exactly (requantized scales as upstream rounds them)
            return _decompress(w, dec.scale[:, :, None], exact=self.requant is RequantTarget.NATIVE)
        if self.container == "f4e2m1":
            assert dec.exponent is not None
            e = packed_constant(dec.exponent.reshape(self.rows, -1, 1), "f8e8m0")
            return ops.multiply(ops.convert(w, "f32"), ops.convert(e, "f32"))
        node = ops.convert(w, "f16")
        if self.form == "upstream_bias" and dec.bias is not None:
            # upstream with use_bias (test graphs, MoE): exact f16 zero point -bias/scale
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                zf = np.where(dec.scale != 0, -dec.bias / dec.scale, 0.0).astype(np.float16)
            node = ops.subtract(node, ops.constant(zf[:, :, None]))
        elif upstream and self._zero_points is not None:
            # upstream: u4 zero points for 4-bit weights, u8 for 5-bit
            zt = "u4" if spec.bits == 4 else "u8"
            zc = packed_constant(self._zero_points[0][:, :, None], zt)
            node = ops.subtract(node, ops.convert(zc, "f16"))
        with np.errstate(over="ignore"):  # upstream's f16 scales: beyond 65504 they are inf there too
            return ops.multiply(node, ops.constant(dec.scale[:, :, None].astype(np.float16)))

    def _flat(self, node: Any) -> Any:
        ops = _ops()
        return ops.reshape(node, ops.constant(np.array([self.rows, self.k], np.int64)), False)

    def to_ov_node(self) -> Any:
        """The decompression subgraph: f32 output of the numpy ``shape`` (for get_rows and fallback)."""
        ops = _ops()
        upstream = self.form != "fast"
        node = self._scaled(upstream=upstream)
        zps = self._zero_points
        if not upstream and zps is not None:
            node = ops.add(_to_f32(node), ops.constant(zps[1][:, :, None]))
        out = _to_f32(self._flat(node))
        if len(self.shape) != 2:
            out = ops.reshape(out, ops.constant(np.array(self.shape, np.int64)), False)
        return out.output(0)

    def expert_activations(self, b: Any) -> Any:
        """The activations MUL_MAT_ID multiplies these expert weights with: ``b`` as it is (a
        weight computing with ggml's numerics quantizes them first)."""
        return b

    def ov_mul_mat(self, b: Any) -> Any:
        """``b @ W.T`` for an f32 Output ``b`` [..., n, k]: f32 Output [..., n, rows] (ggml mul_mat)."""
        ops = _ops()
        if len(self.shape) != 2:
            return ops.matmul(b, self.to_ov_node(), False, True).output(0)
        if self._tiny is not None:  # the tiny groups' product is lowered at run time
            normal, tiny, low = self._tiny_split()
            # through an Unsqueeze: a Multiply right after the MatMul is fused into its weights'
            # scale (2**-128 again, and the weight decompressed at every inference)
            axis = ops.constant(np.int64(0))
            product = ops.unsqueeze(ops.matmul(b, tiny, False, True), axis)
            lowered = ops.squeeze(ops.multiply(product, low), axis)
            return ops.add(ops.matmul(b, normal, False, True), lowered).output(0)
        if not self._offset:  # symmetric, upstream forms, NaN/inf weights: one MatMul
            return ops.matmul(b, self.to_ov_node(), False, True).output(0)
        weight = _to_f32(self._flat(self._scaled(upstream=False)))
        main = ops.matmul(b, weight, False, True)
        return ops.add(main, self._bias_term(b)).output(0)

    def ov_get_rows(self, indices: Any) -> Any:
        """Rows ``indices`` (integer Output) of the dequantized weight, f32 [..., k], gathered from the
        compressed table, the asymmetric types' exact residual gathered separately and added."""
        ops = _ops()
        axis = ops.constant(np.int64(0))
        zps = self._zero_points
        if self._tiny is not None and len(self.shape) == 2:  # tiny rows lowered after the gather
            normal, tiny, low = self._tiny_split()
            lowered = ops.multiply(ops.gather(tiny, indices, axis), low)
            return ops.add(ops.gather(normal, indices, axis), lowered).output(0)
        if not self._offset or zps is None:
            table = self.to_ov_node()
            if len(self.shape) != 2:
                # a batched shape such as (1, 1, m, k) gathers the m rows of its [rows, k] table;
                # a 2-D table is gathered as it is, so the plugin keeps it compressed
                table = self._flat(table)
            return ops.gather(table, indices, axis).output(0)
        g = self.decoded.group
        flat = ops.reshape(indices, ops.constant(np.array([-1], np.int64)), False)
        main = ops.gather(_to_f32(self._flat(self._scaled(upstream=False))), flat, axis)
        main = ops.reshape(main, ops.constant(np.array([-1, self.k // g, g], np.int64)), False)
        resid = ops.gather(ops.constant(zps[1]), flat, axis)
        rows = ops.add(main, ops.unsqueeze(resid, ops.constant(np.int64(-1))))
        out_shape = ops.concat([ops.shape_of(indices), ops.constant(np.array([self.k], np.int64))], 0)
        return ops.reshape(rows, out_shape, False).output(0)

    def _bias_term(self, b: Any) -> Any:
        """groupsum(b) @ residual.T: the part of the bias the integer zero points leave, out of the FC."""
        ops, dec, zps = _ops(), self.decoded, self._zero_points
        assert zps is not None
        rank = b.get_partial_shape().rank.get_length()
        g = dec.group
        target = np.array([0] * (rank - 1) + [self.k // g, g], np.int64)
        grouped = ops.reshape(b, ops.constant(target), True)
        sums = ops.reduce_sum(grouped, ops.constant(np.array([-1], np.int64)), False)
        return ops.matmul(sums, ops.constant(zps[1]), False, True)

    def __reduce__(self) -> tuple[Any, ...]:
        return (QuantizedWeight, (self.qtype, self.shape, self.raw, self.name, self.form, self.requant))


def from_blocks(
    qtype: str,
    raw: bytes | np.ndarray | memoryview,
    shape: Sequence[int],
    name: str = "",
    form: Form = "fast",
) -> QuantizedWeight:
    """A :class:`QuantizedWeight` from raw ggml blocks of numpy ``shape``."""
    data = raw.tobytes() if isinstance(raw, np.ndarray) else bytes(raw)
    return QuantizedWeight(qtype, shape, data, name, form)  # type: ignore[arg-type]  # checked there


def quantize(qtype: str, array: np.ndarray, name: str = "", form: Form = "fast") -> QuantizedWeight:
    """Quantize an f32 array with ggml's own ``ggml_quantize_chunk`` (via ovkit.oracle) or gguf."""
    from ovkit import oracle  # here: loading ggml-python is a cost only quantizing pays

    spec = quant_spec(qtype)
    x = np.ascontiguousarray(array, dtype=np.float32)
    if oracle.ggml_available():
        return from_blocks(spec.name, oracle.quantize_blocks(spec.name, x), x.shape, name, form)
    import gguf.quants as gq

    blocks = gq.quantize(x, gq.GGMLQuantizationType(spec.ggml_type))
    return from_blocks(spec.name, blocks, x.shape, name, form)


#: Element types whose FullyConnected runs faster without activation dynamic quantization (n=1,
#: measured in docs/quant.md); 4-bit types are 2x slower without it.
NO_DYNQ_CONTAINERS = frozenset({"i8", "u8"})


def compile_hints(weights: Sequence[QuantizedWeight], n_tokens: int = 1) -> dict[str, Any]:
    """CPU compile properties that suit these weights (docs/quant.md, finding 8): single-token
    graphs of only 8-bit containers run without activation dynamic quantization (~25% faster),
    Q6_K-only batches with 16-element groups, everything else the default."""
    # Told from the types first: a model with a 4-bit weight is settled without decoding a block
    # (Model() then reads no weight; the compiled-model cache may never need them).
    eight_bit = n_tokens == 1 and bool(weights) and all(w.may_be_int8() for w in weights)
    if eight_bit and {w.container for w in weights} <= NO_DYNQ_CONTAINERS:
        return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    groups = {w.scale_group for w in weights}
    if n_tokens > 1 and groups == {16}:
        # Q6_K's 16-element scale groups: int8 activations in 16-groups halve the n=8 time
        return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 16}
    return {}
