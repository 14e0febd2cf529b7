"""Sizes, ids and files a careless or hostile user gives: each checked against the model and the
machine before any work, refused with one line naming the value (and the bound), never a
traceback, a hang or a silently wrong answer (issue 35, items 5 and 6).

The CLI runs in a subprocess, as a user runs it, bounded by :data:`BOUND_S`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ovkit.model import Model, synthetic
from ovkit.model.arch import ModelError

#: Seconds an oversized or bad argument may take to be refused, the interpreter's start included.
BOUND_S = 5.0
HUGE = "99999999999999999999999"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama (64 wide, 2 layers, 512 tokens, trained context 4096)."""
    return synthetic("llama", tmp_path_factory.mktemp("models") / "llama.gguf")


def refused(*argv: str, wanted: tuple[str, ...]) -> str:
    """Run ``ovkit ARGV`` and check it ends within the bound with a non-zero status and one line
    on stderr, no traceback, naming each of ``wanted``; the line."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ovkit", *argv], capture_output=True, text=True, timeout=BOUND_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"ovkit {' '.join(argv)} did not end within {BOUND_S} s")
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for text in wanted:
        assert text in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------- sizes (item 5)
TRAINING = "4,096, the model's training context (llama.context_length)"


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["-n", "100000000"], ("-n 100000000", "4,094", TRAINING, "prompt's 2 tokens")),
        (["-n", HUGE], (f"-n {HUGE}", "4,094")),
        (["--ctx-size", "1000000000000"], ("--ctx-size 1000000000000", "4,096", "training context")),
        (["-n", "10", "--ctx-size", "5"], ("-n 10", "more than 3", "--ctx-size 5")),
        (["-n", "-3"], ("-n -3", "0 or more")),
    ],
)
def test_run_model_sizes_are_checked_first(model: Path, argv: list[str], wanted: tuple[str, ...]) -> None:
    refused("run-model", str(model), "--tokens", "1 2", *argv, wanted=wanted)


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["-p", "100000000"], ("n_prompt=100000000 (-p)", TRAINING)),
        (["-p", HUGE], (f"n_prompt={HUGE} (-p)", "training context")),
        (["-n", HUGE], (f"n_gen={HUGE} (-n)", "training context")),
        (["-t", HUGE], (f"threads={HUGE}", "512")),
    ],
)
def test_bench_sizes_are_checked_first(model: Path, argv: list[str], wanted: tuple[str, ...]) -> None:
    refused("bench", str(model), "--against", "none", *argv, wanted=wanted)


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        # llama.cpp is not run ~1,000,000 times before the batch is found too long
        (["--tokens", "1 2 3", "-n", "1000000"], ("n_predict=1000000", "1000003", "n_ctx=512")),
        (["--tokens", "1 2", "--ctx-size", "1000000000000"], ("n_ctx=1000000000000", TRAINING)),
        (["--tokens", "1 2", "-n", "-1"], ("-n -1", "0 or more")),
        # named as run-model names it, not "llama.cpp's CPU build failed (llama_decode -1)"
        (["--tokens", "1 99999"], ("token id 99999", "outside the vocabulary 0..511")),
        # nan passes no comparison: every node would be "within" it and the first one "divergent"
        (["--tokens", "1 2", "--threshold", "nan"], ("--threshold nan", "finite number > 0")),
        (["--tokens", "1 2", "--threshold", "-1"], ("--threshold -1.0", "finite number > 0")),
        (["--tokens", "1 2", "--threshold", "inf"], ("--threshold inf", "finite number > 0")),
    ],
)
def test_compare_model_checks_before_llama_cpp_runs(
    model: Path, argv: list[str], wanted: tuple[str, ...]
) -> None:
    refused("compare-model", str(model), *argv, wanted=wanted)


def test_model_refuses_a_context_past_the_models(model: Path) -> None:
    with pytest.raises(ModelError) as got:
        Model(model, n_ctx=10**12)
    assert str(got.value) == f"n_ctx=1000000000000 is more than {TRAINING}"
    with pytest.raises(ModelError, match=r"n_ctx=4097 is more than 4,096"):
        Model(model, n_ctx=4097)
    with pytest.raises(ModelError, match=r"n_ctx=2.5 must be an integer"):
        Model(model, n_ctx=2.5)  # type: ignore[arg-type]


def test_model_refuses_a_context_whose_kv_cache_passes_the_memory(tmp_path: Path) -> None:
    """A model trained for a huge context: the machine's memory is the bound, named with the
    bytes a position takes (2 layers x K and V x 32 values x 4 bytes = 512 B)."""
    path = synthetic("llama", tmp_path / "long.gguf", n_ctx_train=2**32 - 1)
    with pytest.raises(ModelError, match=r"^n_ctx=1000000000000 is more than [\d,]+, the positions whose KV "
                       r"cache \(512 B each, at f32\) fits the [\d.,]+ GiB of available memory$"):  # fmt: skip
        Model(path, n_ctx=10**12)


# ------------------------------------------------------------------------------ ids (item 6)
def test_generate_refuses_float_ids_instead_of_truncating(model: Path) -> None:
    m = Model(model, n_ctx=64)
    for bad, named in (
        (np.array([1.7, 5.2, 9.9]), "1.7"),
        ([1, 2.0], "2.0"),
        ([1, True], "True"),
        (["5"], "'5'"),
    ):
        with pytest.raises(ModelError, match=rf"^token id {named} is not an integer"):
            m.generate(bad, 4)
    with pytest.raises(ModelError, match=r"token id 512 is outside the vocabulary 0..511"):
        m.generate(np.array([1, 512], dtype=np.uint16), 4)
    with pytest.raises(ModelError, match=r"token id 1.5 is not an integer"):
        m.eval([1.5])
    # the prompt and n_predict against n_ctx, before anything is compiled
    with pytest.raises(
        ModelError, match=r"a prompt of 2 tokens and n_predict=63 need 65 positions, more than n_ctx=64"
    ):
        m.generate([1, 2], 63)
    with pytest.raises(ModelError, match=r"n_predict=2.0 must be an integer"):
        m.generate([1, 2], 2.0)  # type: ignore[arg-type]
    assert m.sessions() == []


# ------------------------------------------------------------------------ test-ops (item 6)
def _case_list(*argv: str, wanted: tuple[str, ...]) -> str:
    return refused("test-ops", "--catalogue", "test-backend-ops", "--no-progress", *argv, wanted=wanted)


def test_test_ops_case_list_must_be_a_regular_utf8_file(tmp_path: Path) -> None:
    _case_list("--cases", str(tmp_path), wanted=(str(tmp_path), "a directory", "not a regular file"))
    _case_list("--cases", "/dev/zero", wanted=("/dev/zero", "a character device"))
    fifo = tmp_path / "cases.fifo"
    os.mkfifo(fifo)
    _case_list("--cases", str(fifo), wanted=(str(fifo), "a FIFO"))
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(b'op_name,op_params\nADD,"type=f32,ne=[10,5,4,3],nr=[1,1,1,1]"\n# caf\xe9\n')
    _case_list("--cases", str(latin1), wanted=(str(latin1), "not UTF-8", "0xe9"))
    _case_list("--cases", str(tmp_path / "missing.csv"), wanted=("missing.csv", "no such file"))


def test_test_ops_refuses_a_negative_sample() -> None:
    _case_list("--sample", "-5", wanted=("--sample -5", "1 or more"))
    _case_list("--sample", "0", wanted=("--sample 0", "1 or more"))


def test_a_fifo_is_refused_without_opening_it_for_good(tmp_path: Path) -> None:
    """In-process as well: the case list reader returns at once on a FIFO nobody writes to."""
    from ovkit.catalogue.run import read_rows

    fifo = tmp_path / "cases.fifo"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def read() -> None:
        try:
            read_rows(fifo)
        except ValueError as exc:
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(BOUND_S)
    if reader.is_alive():  # unblock the reader left waiting for a writer
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO case list blocked")
    assert result and "is a FIFO, not a regular file" in str(result[0])
