"""GGUF files: metadata, a tensor table, constants (quantized stay quantized), and a fit check.

Reading uses the ``gguf`` package's ``GGUFReader`` (a read-only memory map, nothing is loaded until
used).  Broken files become :class:`GGUFError` naming the file and what is wrong: a truncated
header or metadata, or tensor data whose offsets point past the end of the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit import quant
from ovkit.memory import MIB

if TYPE_CHECKING:
    import pandas as pd

PLAIN_TYPES: dict[str, np.dtype[Any]] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "f64": np.dtype(np.float64),
}


class GGUFError(ValueError):
    """A GGUF file that cannot be read as one (names the file and the problem)."""


def type_name(ggml_type: Any) -> str:
    """ovkit's name of a ggml type id: ``f32``, ``f16``, ``bf16``, ``q4_0``, ``q4_K``, ``mxfp4``..."""
    import gguf

    name = gguf.GGMLQuantizationType(int(ggml_type)).name
    try:
        return quant.quant_spec(name).name
    except quant.QuantError:
        return name.lower() if name.lower() in PLAIN_TYPES else name


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor of a GGUF file: name, ovkit type name, numpy-order shape, bytes, file offset."""

    name: str
    type: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int
    supported: bool  # a type ovkit can turn into a constant (upstream §5.1's accepted types)


@dataclass
class GGUFModel:
    """An opened GGUF file."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    file_size: int
    _reader: Any = field(repr=False, default=None)

    # -- tables ----------------------------------------------------------------------------------
    def tensor_table(self) -> pd.DataFrame:
        """One row per tensor: name, type, shape (numpy order), bytes, offset, supported."""
        import pandas as pd

        rows = [
            {
                "name": t.name,
                "type": t.type,
                "shape": t.shape,
                "bytes": t.nbytes,
                "offset": t.offset,
                "supported": t.supported,
            }
            for t in self.tensors.values()
        ]
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
        """The tensor's bytes (a read-only view of the memory-mapped file)."""
        info = self._info(name)
        data = self._reader_tensor(name).data
        raw = np.asarray(data).reshape(-1).view(np.uint8)
        if raw.size != info.nbytes:
            raise GGUFError(f"{self.path}: tensor {name!r} holds {raw.size} bytes, expected {info.nbytes}")
        return raw

    def constant(self, name: str, form: quant.Form = "fast") -> quant.QuantizedWeight | np.ndarray:
        """A graph constant: a QuantizedWeight for quantized types, a numpy array otherwise."""
        info = self._info(name)
        if not info.supported:
            raise GGUFError(
                f"Unexpected weight tensor type: {name} with type {info.type} "
                f"(supported: f32, f16, bf16, {', '.join(quant.QUANT_TYPES)})"
            )
        raw = self.raw(name)
        if info.type in PLAIN_TYPES:
            arr = raw.view(PLAIN_TYPES[info.type]).reshape(info.shape)
            if info.type == "bf16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            return np.array(arr)
        return quant.from_blocks(info.type, raw, info.shape, name=name, form=form)

    def constants(
        self, form: quant.Form = "fast"
    ) -> Iterator[tuple[str, quant.QuantizedWeight | np.ndarray]]:
        for name, info in self.tensors.items():
            if info.supported:
                yield name, self.constant(name, form)

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor {name!r} (it has {len(self.tensors)} tensors)") from None

    @cached_property
    def _reader_tensors(self) -> dict[str, Any]:
        """The reader's tensors by name (built once, not scanned per tensor)."""
        return {t.name: t for t in self._reader.tensors}

    def _reader_tensor(self, name: str) -> Any:
        return self._reader_tensors[name]

    def load_into_buffer(
        self, device: str = "CPU", *, host: bool = True, core: Any = None, register: bool = True
    ) -> tuple[Any, dict[str, Any]]:
        """Allocate one WEIGHTS buffer on ``device`` and set every supported tensor into it.

        Returns ``(buffer, {name: PlacedTensor})``; each tensor's extra holds its weight (quantized
        ones a QuantizedWeight).  The buffer shows up in the allocation tracking.
        """
        from ovkit import buffers

        infos = [t for t in self.tensors.values() if t.supported]
        bt = buffers.host_buffer_type(device) if host else buffers.buffer_type(device)
        size = sum(buffers._align(bt.get_alloc_size(t.shape, t.type), bt.alignment) for t in infos)
        buf = bt.alloc_buffer(size, buffers.Usage.WEIGHTS, core=core)
        placed = {}
        try:
            for t in infos:
                p = buf.place(t.name, t.shape, t.type)
                buf.set_weight(p, self.raw(t.name), register=register)
                placed[t.name] = p
        except BaseException:
            buf.free()
            raise
        return buf, placed

    # -- fit check -------------------------------------------------------------------------------
    def weight_bytes(self, device_class: str, *, no_requant: bool = False) -> int:
        """Bytes the weights need on a device class after the requantization policy (§5.3)."""
        total = 0
        for t in self.tensors.values():
            if t.type in quant.QUANT_SPECS:
                target = quant.requant_type(t.name, device_class, t.type, no_requant=no_requant)
                total += quant.requant_bytes(target, t.type, t.shape)
            else:
                total += t.nbytes
        return total

    def fit_check(self, core: Any = None) -> pd.DataFrame:
        """Per device: the bytes the weights need after the policy vs the device's free memory."""
        import pandas as pd

        from ovkit.devices import list_devices

        rows = []
        for d in list_devices(core):
            need = self.weight_bytes(str(d.device_class))
            free = d.free_bytes
            if d.host_available_bytes is not None and str(d.device_class) == "CPU":
                free = min(free, d.host_available_bytes)
            rows.append(
                {
                    "device": d.name,
                    "class": str(d.device_class),
                    "file_bytes": self.total_bytes,
                    "weight_bytes": need,
                    "free_bytes": free,
                    "fits": need <= free,
                    "headroom_bytes": free - need,
                    "simulated": d.simulated,
                }
            )
        return pd.DataFrame(rows)


def _short(v: Any) -> Any:
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(map(str, v[:8]))}, ... ({len(v)} items)]"
    return v


def _field_value(f: Any) -> Any:
    import gguf

    types = list(f.types)
    if not types:
        return None
    if types[0] == gguf.GGUFValueType.ARRAY:
        if len(types) > 1 and types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
        return [_scalar(f.parts[i]) for i in f.data]
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8", "replace")
    return _scalar(f.parts[f.data[0]])


def _scalar(part: Any) -> Any:
    arr = np.asarray(part)
    return arr.reshape(-1)[0].item() if arr.size == 1 else arr.tolist()


def read_gguf(path: str | os.PathLike[str]) -> GGUFModel:
    """Open a GGUF file (metadata + tensor infos); clear :class:`GGUFError` on broken files."""
    import gguf

    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"{p}: no such GGUF file")
    size = p.stat().st_size
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise GGUFError(f"{p}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(p, "r")
    except (ValueError, IndexError, OSError, KeyError, TypeError, OverflowError) as exc:
        raise GGUFError(f"{p}: truncated or corrupt GGUF header/metadata ({size} bytes): {exc}") from exc
    metadata: dict[str, Any] = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            metadata[key] = _field_value(f)
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            metadata[key] = f"<unreadable: {exc}>"
    tensors: dict[str, TensorInfo] = {}
    for t in reader.tensors:
        tname = type_name(t.tensor_type)
        shape = tuple(int(s) for s in reversed([int(x) for x in t.shape]))
        nbytes = int(t.n_bytes)
        offset = int(t.data_offset)
        if offset + nbytes > size:
            raise GGUFError(
                f"{p}: tensor {t.name!r} ({tname}, {nbytes} bytes at offset {offset}) ends at byte "
                f"{offset + nbytes}, past the end of the file ({size} bytes): the file is truncated or corrupt"
            )
        supported = tname in ("f32", "f16", "bf16") or tname in quant.QUANT_SPECS
        tensors[t.name] = TensorInfo(t.name, tname, shape, nbytes, offset, supported)
    return GGUFModel(p, metadata, tensors, size, reader)


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
    for k, v in (metadata or {}).items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            raise TypeError(f"write_gguf: metadata {k!r} has unsupported type {type(v).__name__}")
    for name, value in tensors.items():
        if isinstance(value, quant.QuantizedWeight):
            spec = value.spec
            blocks = np.frombuffer(value.raw, np.uint8).reshape(value.rows, -1)
            w.add_tensor(
                name, blocks, raw_shape=blocks.shape, raw_dtype=gguf.GGMLQuantizationType(spec.ggml_type)
            )
        else:
            w.add_tensor(name, np.ascontiguousarray(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return p


def add_cli_args(p: Any) -> None:
    """Arguments of ``ovkit gguf FILE``."""
    p.add_argument("file", help="path of a .gguf file")
    p.add_argument("--simulate", metavar="PROFILE", help="fit-check against a simulated device set")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def cli(args: Any) -> int:
    """``ovkit gguf FILE``: metadata summary, tensor table and the per-device fit check."""
    import json
    import sys

    from ovkit.cli import make_core

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
                    "fit": fit.to_dict("records"),
                },
                indent=2,
                default=str,
            )
        )
        return 0
    print(
        f"{model.path}: {len(model.tensors)} tensors, {model.total_bytes / MIB:.1f} MiB, arch {model.architecture}"
    )
    counts = table.groupby("type")["bytes"].agg(["count", "sum"])
    for dtype, crow in counts.iterrows():
        print(f"  {dtype!s:6} {int(crow['count']):5} tensors {int(crow['sum']) / MIB:10.1f} MiB")
    print("Fit check (weights after the requantization policy vs free memory):")
    for row in fit.to_dict("records"):
        verdict = "fits" if row["fits"] else "does NOT fit"
        print(
            f"  {row['device']:8} {row['weight_bytes'] / MIB:10.1f} MiB needed, "
            f"{row['free_bytes'] / MIB:10.1f} MiB free: {verdict}"
        )
    return 0
