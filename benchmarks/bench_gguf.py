"""Opening a GGUF: ``ovkit.gguf.read_gguf`` vs the ``gguf`` package's ``GGUFReader`` (baseline).

The file is llama-shaped without the bulk: a 64,000-token vocabulary (strings, f32 scores,
i32 token types, the arrays that dominate a real model's metadata) and 300 small tensors.
Both readers memory-map the file; opening means parsing the header, metadata and tensor table.
Both are timed in the same run, interleaved.  Target: ratio <= 0.5x.

Run: ``python benchmarks/bench_gguf.py``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import median_seconds, report  # noqa: E402

N_VOCAB = 64_000
N_TENSORS = 300


def write_file(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(N_VOCAB)])
    w.add_array("tokenizer.ggml.scores", [float(-i) for i in range(N_VOCAB)])
    w.add_array("tokenizer.ggml.token_type", [1] * N_VOCAB)
    for i in range(N_TENSORS):
        w.add_tensor(f"blk.{i}.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(repeat: int = 3) -> None:
    import gguf

    from ovkit.gguf import read_gguf

    with tempfile.TemporaryDirectory() as tmp:
        path = write_file(Path(tmp) / "vocab.gguf")
        model = read_gguf(path)
        assert len(model.metadata["tokenizer.ggml.tokens"]) == N_VOCAB and len(model.tensors) == N_TENSORS
        ours, baseline = [], []
        for _ in range(repeat):  # interleaved, so both see the same machine load
            baseline.append(median_seconds(lambda: gguf.GGUFReader(path, "r"), 1, warmup=0))
            ours.append(median_seconds(lambda: read_gguf(path), 1, warmup=0))
        report(
            "read_gguf (open: header, metadata, tensor table)",
            min(ours),
            "GGUFReader",
            min(baseline),
            target=0.5,
        )


if __name__ == "__main__":
    main()
