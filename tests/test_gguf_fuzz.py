"""Seeded GGUF fuzzing: 330 mutated files, read in a subprocess with a 10 s limit per file.

Every mutated file either loads correctly (every tensor inside the file, the same table as the
``gguf`` package's reader, every constant made or refused with ``GGUFError``) or raises
``GGUFError``; none hangs, none crashes the reader process.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ovkit import gguf as og
from ovkit import quant

MUTANTS_PER_SEED = 110
FILE_TIME_LIMIT_S = 10.0
STARTUP_S = 30.0  # importing numpy, gguf and ovkit in the worker


@dataclass(frozen=True, slots=True)
class Field:
    """One integer field of a valid GGUF file: what it is, where, and its width in bytes."""

    kind: str  # n_tensors, n_kv, version, str_len, value_type, item_type, array_len, n_dims, dim, ggml_type, offset
    pos: int
    width: int


def layout(data: bytes) -> list[Field]:
    """The integer fields of a *valid* GGUF file, walked independently of ovkit's reader."""
    fields = [Field("version", 4, 4), Field("n_tensors", 8, 8), Field("n_kv", 16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(p: int) -> int:
        fields.append(Field("str_len", p, 8))
        return p + 8 + struct.unpack_from("<Q", data, p)[0]

    for _ in range(n_kv):
        pos = string(pos)
        vtype = struct.unpack_from("<i", data, pos)[0]
        fields.append(Field("value_type", pos, 4))
        pos += 4
        if vtype == 9:
            item, count = struct.unpack_from("<iQ", data, pos)
            fields += [Field("item_type", pos, 4), Field("array_len", pos + 4, 8)]
            pos += 12
            for _ in range(count):
                pos = string(pos) if item == 8 else pos + sizes[item]
        else:
            pos = string(pos) if vtype == 8 else pos + sizes[vtype]
    for _ in range(n_tensors):
        pos = string(pos)
        n_dims = struct.unpack_from("<I", data, pos)[0]
        fields.append(Field("n_dims", pos, 4))
        pos += 4
        fields += [Field("dim", pos + 8 * j, 8) for j in range(n_dims)]
        pos += 8 * n_dims
        fields += [Field("ggml_type", pos, 4), Field("offset", pos + 4, 8)]
        pos += 12
    return fields


def seed_files(directory: Path) -> list[Path]:
    """Small valid GGUFs written with the gguf package: every quantized type, plain types, arrays."""
    import gguf

    rng = np.random.default_rng(11)
    quantized = {
        f"blk.{i}.{qt}.weight": quant.quantize(qt, rng.standard_normal((2, 256)).astype(np.float32))
        for i, qt in enumerate(quant.QUANT_TYPES)
    }
    plain = {
        "norm.weight": rng.standard_normal(64).astype(np.float32),
        "token_embd.weight": rng.standard_normal((4, 32)).astype(np.float16),
    }
    a = og.write_gguf(directory / "seed-quant.gguf", {**quantized, **plain}, metadata={"general.name": "q"})
    b_path = directory / "seed-arrays.gguf"
    w = gguf.GGUFWriter(b_path, "llama")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", "wörld"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.25, 3.0])
    w.add_uint32("general.alignment", 64)
    w.add_bool("flag", True)
    bf16_bits = (rng.standard_normal((3, 8)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("bf16.weight", bf16_bits, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor("f16.weight", rng.standard_normal((2, 2, 4)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    c = og.write_gguf(
        directory / "seed-one.gguf", {"w": quant.quantize("q8_0", np.ones((1, 32), np.float32))}
    )
    return [a, b_path, c]


_SPECIAL = [0, 1, 2, 3, 7, 31, 32, 33, 64, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1]
_SPECIAL += [2**63, 2**64 - 1, 2**64 - 2, 2**64 - 32, 2**64 - 4096, 10**6, 10**7]


def mutate(data: bytes, fields: list[Field], rng: np.random.Generator) -> tuple[bytes, str]:
    """One or two seeded mutations of ``data``; returns the bytes and a description."""
    out = bytearray(data)
    notes = []
    for _ in range(1 + int(rng.random() < 0.3)):
        what = rng.choice(["field", "field", "field", "truncate", "bytes", "header_bytes"])
        if what == "field":
            f = fields[int(rng.integers(len(fields)))]
            old = int.from_bytes(out[f.pos : f.pos + f.width], "little")
            mask = 2 ** (8 * f.width) - 1
            choice = rng.random()
            if choice < 0.5:
                new = int(rng.choice(_SPECIAL))
            elif choice < 0.8:
                new = old + int(rng.integers(-3, 4))
            else:
                new = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(2))
            new &= mask
            out[f.pos : f.pos + f.width] = new.to_bytes(f.width, "little")
            notes.append(f"{f.kind}@{f.pos}: {old}->{new}")
        elif what == "truncate":
            cut = int(rng.integers(0, len(out)))
            del out[cut:]
            notes.append(f"truncate@{cut}")
        else:
            end = min(len(out), 256) if what == "header_bytes" else len(out)
            for _ in range(int(rng.integers(1, 9))):
                if end:
                    at = int(rng.integers(0, end))
                    out[at] = int(rng.integers(0, 256))
            notes.append(what)
    return bytes(out), "; ".join(notes)


WORKER = r"""
import json, sys, time
import numpy as np
from ovkit import gguf as og

def check(path):
    try:
        m = og.read_gguf(path)
    except og.GGUFError as exc:
        return {"result": "GGUFError", "error": str(exc)[:300]}
    outside = [n for n, t in m.tensors.items() if t.offset < 0 or t.offset + t.nbytes > m.file_size]
    made, refused = 0, 0
    for name, info in m.tensors.items():
        if not info.supported:
            continue
        try:
            value = m.constant(name)
        except og.GGUFError:
            refused += 1
            continue
        n = value.nbytes
        if n != (info.nbytes if info.type != "bf16" else info.nbytes * 2):
            return {"result": "wrong", "error": f"constant {name} holds {n} bytes, table says {info.nbytes}"}
        made += 1
    m.weight_bytes("CPU")
    m.tensor_table(); m.metadata_table()
    table = {n: [t.offset, t.nbytes, list(t.shape)] for n, t in m.tensors.items()}
    try:
        import gguf
        r = gguf.GGUFReader(path, "r")
        theirs = {t.name: [int(t.data_offset), int(t.n_bytes), [int(s) for s in reversed(list(t.shape))]] for t in r.tensors}
    except Exception as exc:  # the gguf package refuses files ovkit accepts: report, judged by the test
        theirs = {"<gguf refused>": str(exc)[:200]}
    return {"result": "loaded", "outside": outside, "made": made, "refused": refused, "table": table, "gguf": theirs}

for line in sys.stdin:
    path = line.strip()
    print(json.dumps({"start": path}), flush=True)
    t0 = time.perf_counter()
    try:
        rec = check(path)
    except Exception as exc:
        rec = {"result": "other", "error": f"{type(exc).__name__}: {exc}"[:300]}
    rec.update(path=path, seconds=time.perf_counter() - t0)
    print(json.dumps(rec), flush=True)
"""


@pytest.fixture(scope="module")
def mutants(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str]]:
    directory = tmp_path_factory.mktemp("fuzz")
    rng = np.random.default_rng(20261201)
    files: list[tuple[Path, str]] = []
    for seed in seed_files(directory):
        data = seed.read_bytes()
        fields = layout(data)
        assert len(og.read_gguf(seed).tensors) >= 1  # the seeds themselves are valid
        for i in range(MUTANTS_PER_SEED):
            blob, note = mutate(data, fields, rng)
            path = directory / f"{seed.stem}-{i:03d}.gguf"
            path.write_bytes(blob)
            files.append((path, note))
    return files


def _run_worker(paths: list[Path]) -> tuple[list[dict[str, object]], str | None]:
    """Read every file in one subprocess; returns its records and, on a hang or crash, the culprit.

    Each file gets :data:`FILE_TIME_LIMIT_S` (the first also the worker's start-up): a file that
    takes longer is a hang, and the worker is killed.
    """
    root = Path(og.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def feed(stream: Any) -> None:
        stream.write("\n".join(map(str, paths)) + "\n")
        stream.close()

    def drain(stream: Any) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=feed, args=(proc.stdin,), daemon=True).start()
    threading.Thread(target=drain, args=(proc.stdout,), daemon=True).start()
    records: list[dict[str, object]] = []
    current: str | None = None
    limit = FILE_TIME_LIMIT_S + STARTUP_S
    try:
        while True:
            try:
                line = lines.get(timeout=limit)
            except queue.Empty:
                proc.kill()
                return (
                    records,
                    f"{current or 'before the first file'}: no answer within {limit:.0f} s (a hang)",
                )
            if line is None:
                break
            rec = json.loads(line)
            if "start" in rec:
                current, limit = str(rec["start"]), FILE_TIME_LIMIT_S
            else:
                records.append(rec)
                current = None
    finally:
        proc.wait(timeout=30)
    err = proc.stderr.read()
    if proc.returncode != 0 or len(records) != len(paths):
        return (
            records,
            f"{current or 'after the last file'}: exit {proc.returncode}, stderr tail: {err[-500:]}",
        )
    return records, None


def test_fuzzed_files_load_correctly_or_raise_gguf_error(mutants: list[tuple[Path, str]]) -> None:
    assert len(mutants) >= 300
    notes = {str(p): n for p, n in mutants}
    records, failure = _run_worker([p for p, _ in mutants])
    assert failure is None, (
        f"the reader hung or crashed on {failure} ({notes.get(str(failure).split(':')[0])})"
    )
    problems = []
    for r in records:
        path, note = str(r["path"]), notes[str(r["path"])]
        if float(r["seconds"]) > FILE_TIME_LIMIT_S:  # type: ignore[arg-type]
            problems.append(f"{path} ({note}): took {r['seconds']:.1f} s")
        if r["result"] == "GGUFError":
            continue
        if r["result"] != "loaded":
            problems.append(f"{path} ({note}): {r['result']}: {r.get('error')}")
            continue
        if r["outside"]:
            problems.append(f"{path} ({note}): tensors outside the file loaded: {r['outside']}")
        theirs = r["gguf"]
        if isinstance(theirs, dict) and "<gguf refused>" not in theirs and theirs != r["table"]:
            problems.append(f"{path} ({note}): tensor table differs from the gguf package's")
    assert not problems, "\n".join(problems[:20])
    outcomes = {k: sum(r["result"] == k for r in records) for k in ("loaded", "GGUFError")}
    assert outcomes["GGUFError"] >= len(records) // 3  # the mutations really hit the parser
    assert outcomes["loaded"] >= 10  # and some harmless ones still load


def test_error_messages_name_the_problem_not_numpy(mutants: list[tuple[Path, str]]) -> None:
    """A sample of refusals, read in-process: file named, no numpy internals."""
    seen = 0
    for path, _ in mutants[::7]:
        try:
            og.read_gguf(path)
        except og.GGUFError as exc:
            msg = str(exc)
            assert msg.startswith(str(path)), msg
            for internal in ("reshape", "out of bounds", "buffer is smaller", "Traceback"):
                assert internal not in msg, msg
            seen += 1
    assert seen >= 10


def test_layout_walker_sees_every_seed_field(tmp_path: Path) -> None:
    """The mutator's field map matches the file: every offset field holds ovkit's data offsets."""
    for seed in seed_files(tmp_path):
        data = seed.read_bytes()
        offsets = [
            int.from_bytes(data[f.pos : f.pos + 8], "little") for f in layout(data) if f.kind == "offset"
        ]
        model = og.read_gguf(seed)
        starts = [t.offset for t in model.tensors.values()]
        assert len(offsets) == len(starts)
        assert [s - o for s, o in zip(starts, offsets, strict=True)] == [starts[0] - offsets[0]] * len(starts)
