"""GGUF files: metadata, a tensor table, constants (quantized stay quantized), and a fit check.
Read over a memory map, every count, length and offset checked first (a :class:`GGUFError` names
the file, tensor or key and the bytes); written with the ``gguf`` package's ``GGUFWriter``."""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import astuple, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit import quant
from ovkit.dtypes import STORAGE_DTYPE, UnknownTypeError, align_up, bf16_bits_to_f32, type_by_id
from ovkit.errors import OvkitError
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd

PLAIN_TYPES = STORAGE_DTYPE  #: numpy dtype of each plain type's raw bytes (bf16: uint16 bits)


class GGUFError(OvkitError, ValueError):
    """A GGUF file that cannot be read as one (names the file and the problem)."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor of a GGUF file: name, ovkit type name, numpy-order shape, bytes, file offset."""

    name: str
    type: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int
    supported: bool  # a type ovkit can turn into a constant (the types upstream accepts for weights)


@dataclass
class GGUFModel:
    """An opened GGUF file."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    file_size: int
    _data: memoryview = field(repr=False, default_factory=lambda: memoryview(b""))

    # -- tables ----------------------------------------------------------------------------------
    def tensor_table(self) -> pd.DataFrame:
        """One row per tensor: name, type, shape (numpy order), bytes, offset, supported."""
        import pandas as pd

        rows = [astuple(t) for t in self.tensors.values()]
        return pd.DataFrame(rows, columns=["name", "type", "shape", "bytes", "offset", "supported"])

    def metadata_table(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [{"key": k, "value": _short(v)} for k, v in self.metadata.items()], columns=["key", "value"]
        )

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    # -- data ------------------------------------------------------------------------------------
    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes (a read-only view of the memory-mapped file; nothing is copied)."""
        info = self._info(name)
        return np.frombuffer(self._data, np.uint8, count=info.nbytes, offset=info.offset)

    def constant(self, name: str, form: quant.Form = "fast") -> quant.QuantizedWeight | np.ndarray:
        """A graph constant: a QuantizedWeight for quantized types (Q5_0 repacked losslessly as
        Q8_0 blocks, ``quant.REPACKS``), a numpy array otherwise."""
        info = self._info(name)
        if not info.supported and info.type not in quant.REPACKS:
            raise GGUFError(
                f"Unexpected weight tensor type: {name} with type {info.type} "
                f"(supported: f32, f16, bf16, {', '.join(quant.QUANT_TYPES)}; repacked: {', '.join(quant.REPACKS)})"
            )
        raw = self.raw(name)
        if info.type in PLAIN_TYPES:
            arr = raw.view(PLAIN_TYPES[info.type]).reshape(info.shape)
            return bf16_bits_to_f32(arr) if info.type == "bf16" else np.array(arr)
        try:
            qtype, blocks = quant.repack_blocks(info.type, raw) if not info.supported else (info.type, raw)
            return quant.from_blocks(qtype, blocks, info.shape, name=name, form=form)
        except (quant.QuantError, ValueError) as exc:
            raise GGUFError(f"{self.path}: tensor {name!r} cannot be a constant: {exc}") from None

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor {name!r} (it has {len(self.tensors)} tensors)") from None

    # -- fit check -------------------------------------------------------------------------------
    def weight_bytes(self, device_class: str, *, no_requant: bool = False) -> int:
        """Bytes the weights need on a device class after upstream's requantization policy."""
        total = 0
        for t in self.tensors.values():
            if t.type in quant.QUANT_SPECS:
                total += quant.requant_decision(
                    t.name, device_class, t.type, t.shape, no_requant=no_requant
                ).nbytes
            else:
                total += t.nbytes
        return total

    def fit_check(self, core: Core | None = None) -> pd.DataFrame:
        """Per device: the bytes the weights need after the policy vs the device's free memory
        (unknown stays unknown); ``refused`` says why when the device cannot build a weight."""
        import pandas as pd

        from ovkit.devices import list_devices

        rows = []
        for d in list_devices(core=core):
            need = self.weight_bytes(str(d.device_class))
            free = d.live.free_bytes  # the free figure of the table and charts; None = unknown
            # a weight the device cannot build (quant.requant_decision, as Model and placement)
            refused = [
                r.refused
                for t in self.tensors.values()
                if t.type in quant.QUANT_SPECS
                for r in (quant.requant_decision(t.name, str(d.device_class), t.type, t.shape),)
                if not r.ok
            ]
            rows.append(
                {
                    "device": d.name,
                    "class": str(d.device_class),
                    "file_bytes": self.total_bytes,
                    "weight_bytes": need,
                    "free_bytes": free,
                    "fits": False if refused else None if free is None else need <= free,
                    "headroom_bytes": None if free is None else free - need,
                    "memory_rule": d.live.explain(),
                    "simulated": d.simulated,
                    "refused": f"{refused[0]} (and {len(refused) - 1} more)"
                    if len(refused) > 1
                    else "".join(refused),
                }
            )
        return pd.DataFrame(rows)


def _json_value(key: str, v: Any) -> Any:
    """A fit-check cell for JSON: unknown (NaN) as null, byte counts as integers."""
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if key.endswith("_bytes") and v.is_integer():
            return int(v)
    return v


def _short(v: Any) -> Any:
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(map(str, v[:8]))}, ... ({len(v)} items)]"
    return v


# -- reading: every count, length and offset checked against the bytes left before use ---------

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # what ggml's reader accepts (v1 is refused there too)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME = 64  # GGML_MAX_NAME: names are shorter than this
INT64_MAX = 2**63 - 1
_ARRAY = 9
_STRING = 8
_BOOL = 7

#: GGUF metadata value types with a fixed width: (name, struct format, numpy dtype), little-endian
_SCALAR_TYPES: dict[int, tuple[str, str, np.dtype[Any]]] = {
    0: ("uint8", "<B", np.dtype("<u1")),
    1: ("int8", "<b", np.dtype("<i1")),
    2: ("uint16", "<H", np.dtype("<u2")),
    3: ("int16", "<h", np.dtype("<i2")),
    4: ("uint32", "<I", np.dtype("<u4")),
    5: ("int32", "<i", np.dtype("<i4")),
    6: ("float32", "<f", np.dtype("<f4")),
    _BOOL: ("bool", "<b", np.dtype("<i1")),  # one byte, != 0 is true (as ggml reads it)
    10: ("uint64", "<Q", np.dtype("<u8")),
    11: ("int64", "<q", np.dtype("<i8")),
    12: ("float64", "<d", np.dtype("<f8")),
}
_VALUE_TYPE_NAMES = {k: v[0] for k, v in _SCALAR_TYPES.items()} | {_STRING: "string", _ARRAY: "array"}


class _Cursor:
    """Reads little-endian fields from the mapped file; each read checks the bytes left first."""

    def __init__(self, path: Path, data: memoryview) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.pos = 0

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: truncated or corrupt GGUF ({self.size} bytes): {what}")

    def need(self, n: int, what: str) -> None:
        left = self.size - self.pos
        if n > left:
            raise self.fail(f"{what} needs {n} bytes at offset {self.pos}, only {left} are left")

    def take(self, n: int, what: str) -> memoryview:
        self.need(n, what)
        view = self.data[self.pos : self.pos + n]
        self.pos += n
        return view

    def scalar(self, fmt: str, what: str) -> Any:
        """One field of struct format ``fmt`` (``"<I"``, ``"<q"``, ...)."""
        width = struct.calcsize(fmt)
        self.need(width, what)
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += width
        return value

    def u32(self, what: str) -> int:
        return int(self.scalar("<I", what))

    def u64(self, what: str) -> int:
        return int(self.scalar("<Q", what))

    def string(self, what: str, max_bytes: int | None = None) -> str:
        n = self.u64(f"the length of {what}")
        if max_bytes is not None and n > max_bytes:
            raise self.fail(f"{what} is {n} bytes long, expected at most {max_bytes}")
        return bytes(self.take(n, f"{what} ({n} bytes long)")).decode("utf-8", "replace")

    def strings(self, count: int, key: str) -> list[str]:
        """``count`` strings of an array (the vocabulary: one tight loop, each length checked)."""
        data, size, pos, out = self.data, self.size, self.pos, []
        unpack = struct.Struct("<Q").unpack_from
        for i in range(count):
            if size - pos < 8:
                self.pos = pos
                self.need(8, f"the length of item {i} of array {key!r}")
            n = unpack(data, pos)[0]
            pos += 8
            if n > size - pos:
                self.pos = pos
                self.need(n, f"item {i} of array {key!r} ({n} bytes long)")
            out.append(str(data[pos : pos + n], "utf-8", "replace"))
            pos += n
        self.pos = pos
        return out

    def array(self, key: str) -> list[Any]:
        item_type = int(self.scalar("<i", f"the item type of array {key!r}"))
        count = self.u64(f"the length of array {key!r}")
        if item_type == _STRING:
            # every string takes at least its 8-byte length: refuse impossible counts up front
            self.need(count * 8, f"array {key!r} of {count} strings")
            return self.strings(count, key)
        if item_type not in _SCALAR_TYPES:
            raise self.fail(
                f"array {key!r} has item type {_VALUE_TYPE_NAMES.get(item_type, item_type)!r}, "
                "expected a number, bool or string type (ggml reads no nested arrays)"
            )
        tname, _, dtype = _SCALAR_TYPES[item_type]
        raw = self.take(count * dtype.itemsize, f"array {key!r} of {count} {tname} values")
        values = np.frombuffer(raw, dtype)
        return (values != 0).tolist() if item_type == _BOOL else values.tolist()

    def value(self, key: str) -> tuple[int, Any]:
        vtype = int(self.scalar("<i", f"the type of key {key!r}"))
        if vtype == _ARRAY:
            return vtype, self.array(key)
        if vtype == _STRING:
            return vtype, self.string(f"the value of key {key!r}")
        if vtype not in _SCALAR_TYPES:
            raise self.fail(
                f"key {key!r} has value type {vtype}, expected one of {sorted(_VALUE_TYPE_NAMES)}"
            )
        v = self.scalar(_SCALAR_TYPES[vtype][1], f"the value of key {key!r}")
        return vtype, bool(v) if vtype == _BOOL else v


def _header(cur: _Cursor) -> tuple[int, int]:
    """Version, tensor count and key count, each checked (ggml's rules)."""
    cur.take(4, "the magic")
    version = cur.u32("the version")
    if version & 0xFFFF == 0 and version:
        raise cur.fail(
            f"version {version:#x} looks byte-swapped: a big-endian GGUF file, expected little-endian"
        )
    if version not in GGUF_VERSIONS:
        raise cur.fail(f"GGUF version {version}, expected one of {GGUF_VERSIONS}")
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the metadata key count")
    # every key takes at least 12 bytes (length + type), every tensor info at least 24
    for count, least, what in ((n_kv, 12, "metadata keys"), (n_tensors, 24, "tensor infos")):
        if count > INT64_MAX or count * least > cur.size - cur.pos:
            raise cur.fail(
                f"the header declares {count} {what}, which need at least {count * least} bytes; "
                f"{cur.size - cur.pos} are left"
            )
    return n_tensors, n_kv


def _metadata(cur: _Cursor, n_kv: int) -> tuple[dict[str, Any], int]:
    """The key/value pairs and the alignment (``general.alignment``, a power of two)."""
    metadata: dict[str, Any] = {}
    alignment = DEFAULT_ALIGNMENT
    for i in range(n_kv):
        key = cur.string(f"the name of key {i}")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        vtype, metadata[key] = cur.value(key)
        if key == "general.alignment":
            alignment = metadata[key]
            if vtype != 4 or alignment == 0 or alignment & (alignment - 1):
                raise cur.fail(
                    f"general.alignment is {alignment!r} ({_VALUE_TYPE_NAMES[vtype]}), "
                    "expected a uint32 power of two"
                )
    return metadata, alignment


def _tensor_info(cur: _Cursor, i: int) -> TensorInfo:
    """One tensor info, its offset still relative to the data section."""
    name = cur.string(f"the name of tensor {i}", max_bytes=MAX_NAME - 1)
    n_dims = cur.u32(f"the dimension count of tensor {name!r}")
    if n_dims > MAX_DIMS:
        raise cur.fail(f"tensor {name!r} has {n_dims} dimensions, expected at most {MAX_DIMS}")
    ne = tuple(int(cur.scalar("<q", f"dimension {j} of tensor {name!r}")) for j in range(n_dims))
    for j, n in enumerate(ne):
        if n < 0:
            raise cur.fail(f"tensor {name!r} dimension {j} is {n}, expected a non-negative size")
    elements = math.prod(ne)
    if elements > INT64_MAX:
        raise cur.fail(f"tensor {name!r} of ne {list(ne)} has {elements} elements, more than an int64 holds")
    ggml_type = int(cur.scalar("<i", f"the type of tensor {name!r}"))
    try:
        known = type_by_id(ggml_type)
    except UnknownTypeError as exc:
        raise cur.fail(f"tensor {name!r}: {exc}") from None
    row = ne[0] if ne else 1
    if row % known.block:
        raise cur.fail(
            f"tensor {name!r} ({known.name}) has rows of {row} elements, "
            f"not a multiple of its block size {known.block}"
        )
    offset = cur.u64(f"the data offset of tensor {name!r}")
    supported = known.name in ("f32", "f16", "bf16") or known.name in quant.QUANT_SPECS
    nbytes = elements // known.block * known.size
    return TensorInfo(name, known.name, tuple(reversed(ne)), nbytes, offset, supported)


def _check_layout(cur: _Cursor, infos: list[TensorInfo], data_start: int, alignment: int) -> None:
    """Tensors packed in table order, each padded to the alignment, all inside the file (as ggml)."""
    expected = 0
    prev: TensorInfo | None = None
    for t in infos:
        end = data_start + t.offset + t.nbytes
        if end > cur.size:
            raise GGUFError(
                f"{cur.path}: tensor {t.name!r} ({t.type}, ne {list(reversed(t.shape))}) needs "
                f"{t.nbytes} bytes at file offset {data_start + t.offset}, up to byte {end}, but the "
                f"file has {cur.size} bytes: it is truncated or corrupt"
            )
        if t.offset != expected:
            after = (
                f"right after tensor {prev.name!r} ({prev.type}, {prev.nbytes} bytes at "
                f"offset {prev.offset}); "
                if prev is not None
                else ""
            )
            raise cur.fail(
                f"tensor {t.name!r} has data offset {t.offset}, expected {expected} {after}tensors are "
                f"stored in table order, each padded to {alignment} bytes"
            )
        expected = align_up(t.offset + t.nbytes, alignment)
        prev = t


def read_gguf(path: str | os.PathLike[str]) -> GGUFModel:
    """Open a GGUF file (metadata + tensor infos, data memory-mapped), every count, length and
    offset checked before use as ggml's reader does; GGUFError on broken files."""
    p = Path(path)
    if p.is_dir():
        raise GGUFError(f"{p}: is a directory, expected a GGUF file")
    if not p.exists():
        raise GGUFError(f"{p}: no such file")
    if not p.is_file():
        raise GGUFError(f"{p}: not a regular file, expected a GGUF file")
    size = p.stat().st_size
    with open(p, "rb") as fh:
        if (magic := fh.read(4)) != GGUF_MAGIC:
            raise GGUFError(f"{p}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
        cur = _Cursor(p, memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)))
    n_tensors, n_kv = _header(cur)
    metadata, alignment = _metadata(cur, n_kv)
    infos: dict[str, TensorInfo] = {}
    for i in range(n_tensors):
        info = _tensor_info(cur, i)
        if info.name in infos:
            raise cur.fail(f"duplicate tensor name {info.name!r}")
        infos[info.name] = info
    data_start = align_up(cur.pos, alignment)
    _check_layout(cur, list(infos.values()), data_start, alignment)
    tensors = {n: replace(t, offset=data_start + t.offset) for n, t in infos.items()}
    return GGUFModel(p, metadata, tensors, size, cur.data)


def write_gguf(
    path: str | os.PathLike[str],
    tensors: dict[str, np.ndarray | quant.QuantizedWeight],
    *,
    arch: str = "llama",
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a small GGUF file with the ``gguf`` package (f32/f16 arrays, quantized weights raw)."""
    import gguf

    p = Path(path)
    w = gguf.GGUFWriter(p, arch)
    adders = ((str, w.add_string), (bool, w.add_bool), (int, w.add_uint32), (float, w.add_float32))
    for k, v in (metadata or {}).items():
        add = next((fn for kind, fn in adders if isinstance(v, kind)), None)
        if add is None:
            raise TypeError(f"write_gguf: metadata {k!r} has unsupported type {type(v).__name__}")
        add(k, v)
    finish_gguf(w, tensors)
    return p


def finish_gguf(w: Any, tensors: dict[str, np.ndarray | quant.QuantizedWeight]) -> None:
    """Add ``tensors`` to a ``GGUFWriter`` (quantized weights as their raw blocks) and write it."""
    import gguf

    for name, value in tensors.items():
        if isinstance(value, quant.QuantizedWeight):
            spec = value.spec
            blocks = np.frombuffer(value.raw, np.uint8).reshape(*value.shape[:-1], -1)  # 3-d: experts
            w.add_tensor(
                name, blocks, raw_shape=blocks.shape, raw_dtype=gguf.GGMLQuantizationType(spec.ggml_type)
            )
        else:
            w.add_tensor(name, np.ascontiguousarray(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit gguf FILE``."""
    p.add_argument("file", help="path of a .gguf file")
    p.add_argument("--simulate", metavar="PROFILE", help="fit-check against a simulated device set")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def cli(args: Any) -> int:
    """``ovkit gguf FILE``: metadata summary, tensor table and the per-device fit check."""
    import json
    import sys

    import pandas as pd

    from ovkit.memory import format_bytes
    from ovkit.report import Report
    from ovkit.usage import make_core

    try:
        model = read_gguf(args.file)
    except GGUFError as exc:
        print(f"ovkit: {exc}", file=sys.stderr)
        return 2
    fit = model.fit_check(make_core(args.simulate))
    table = model.tensor_table()
    if args.json:
        print(
            json.dumps(
                {
                    "metadata": {k: _short(v) for k, v in model.metadata.items()},
                    "tensors": table.assign(shape=table["shape"].map(list)).to_dict("records"),
                    "fit": [
                        {str(k): _json_value(str(k), v) for k, v in r.items()} for r in fit.to_dict("records")
                    ],
                },
                indent=2,
                default=str,
            )
        )
        return 0
    counts = table.groupby("type")["bytes"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    unsupported = [t.name for t in model.tensors.values() if not t.supported]
    more = f" and {len(unsupported) - 5} more" if len(unsupported) > 5 else ""
    summary = Report(
        f"{model.path}: {len(model.tensors)} tensors, {format_bytes(model.total_bytes)} of tensor data "
        f"(file {format_bytes(model.file_size)}), arch {model.architecture}",
        ("type", "tensors", "bytes"),
        tuple((str(t), str(n), format_bytes(int(b))) for t, n, b in counts.itertuples()),
        (f"not backend weight types (no constants): {', '.join(unsupported[:5])}{more}",)
        if unsupported
        else (),
    )
    rows = []
    for row in fit.to_dict("records"):
        known = row["fits"] is not None and not pd.isna(row["free_bytes"])
        verdict = ("fits" if row["fits"] else "does NOT fit") if known else "unknown: free memory unreadable"
        if row["refused"]:
            verdict = f"does NOT run: {row['refused']}"
        free, headroom = (row["free_bytes"], row["headroom_bytes"]) if known else (None, None)
        label = f"{row['device']}{' (SIMULATED)' if row['simulated'] else ''}"
        rows.append(
            (label, format_bytes(row["weight_bytes"]), format_bytes(free), format_bytes(headroom), verdict)
        )
    title = (
        "Fit check (weights after the requantization policy vs free memory; what the backend takes "
        f"at a context, KV cache and compiled model included: ovkit check {model.path.name} -c N):"
    )
    print(summary, Report(title, ("device", "needed", "free", "headroom", "verdict"), tuple(rows)), sep="\n")
    return 0
