"""A ``Model`` used from two threads (a notebook's live view or a button callback beside the
cell that runs) gives each thread the tokens a single thread gets, never wrong ones."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ovkit.model import Model
from ovkit.model.synthetic import synthetic

PROMPT = [1, 17, 42, 99, 7, 300, 5, 9, 11, 12]
N_PREDICT = 12


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic("llama", tmp_path_factory.mktemp("models") / "llama.gguf", seed=0)


def in_threads(*calls: Callable[[], object]) -> list[object]:
    """Each call's result (or the exception it raised), the calls run at once in threads."""
    results: list[object] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:  # reported by the caller's assert, with the thread's result
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return results


@pytest.mark.timeout(600)
def test_two_threads_generating_on_one_model_get_the_single_thread_tokens(model_path: Path) -> None:
    model = Model(model_path, n_ctx=64)
    want = model.generate(PROMPT, N_PREDICT).tokens

    def tokens() -> object:
        return model.generate(PROMPT, N_PREDICT).tokens

    for _ in range(4):
        assert in_threads(tokens, tokens) == [want, want]


@pytest.mark.timeout(600)
def test_a_reset_from_another_thread_does_not_cut_into_a_generate(model_path: Path) -> None:
    """``reset``, ``close`` and ``eval`` from a second thread wait for a running ``generate``
    (which resets, then evaluates, as one call): its tokens stay the single-thread ones."""
    model = Model(model_path, n_ctx=64)
    want = model.generate(PROMPT, N_PREDICT).tokens

    done = threading.Event()

    def tokens() -> object:
        try:
            return model.generate(PROMPT, N_PREDICT).tokens
        finally:
            done.set()

    def meddle() -> object:
        while True:  # until the generate is over (at least once)
            model.reset()
            model.eval(PROMPT[:3])
            model.close()
            if done.is_set():
                return None

    for _ in range(4):
        done.clear()
        assert in_threads(tokens, meddle) == [want, None]
