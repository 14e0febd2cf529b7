"""``ovkit bench``: llama-bench's prompt-processing (pp) and text-generation (tg) table for ovkit,
llama.cpp's CPU build and the real OpenVINO backend, measured in one run with the same settings.

Each side loads the model once, runs one untimed warm-up of every test, then ``reps`` timed
repetitions; a repetition starts from an empty KV cache as llama-bench's does: pp feeds
``n_prompt`` tokens in one batch (only the last position's logits are read), tg feeds ``n_gen``
tokens one at a time.  Tokens are fixed pseudo-random ids, the same on every side.  Figures are
tok/s per repetition, then mean ± sample standard deviation.  llama.cpp's worker threads
spin-wait, so figures taken beside other work are meaningless: the machine's load average is
recorded before and after, and a report taken on a busy machine says so.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ovkit.model.precision import PRECISIONS

if TYPE_CHECKING:
    from ovkit.model.limits import ContextLimit

#: The sides ``--against`` can name besides ovkit, and how each runs llama.cpp.
AGAINST = {"llama.cpp": False, "upstream": True}  # name -> llama-cpp-python's OpenVINO build?


#: A side's process of one repetition is at most this long (a hung child is killed).
CHILD_TIMEOUT_S = 1800.0
#: The most threads a side may use: ggml's ``GGML_MAX_N_THREADS``.
MAX_THREADS = 512


class BenchError(ValueError):
    """Bad settings for a benchmark (the message names the value and what was expected)."""


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """What to measure: llama-bench's ``-p -n -r -t -fa`` and ovkit's precision."""

    path: Path
    n_prompt: int = 512
    n_gen: int = 128
    reps: int = 5
    threads: int = 2
    flash_attn: bool = True
    precision: str = "exact"
    against: tuple[str, ...] = ("llama.cpp",)
    shapes: str | None = None  # ovkit's compiled models (``Model(shapes=)``; None: its default)

    def __post_init__(self) -> None:
        if not self.path.is_file():
            raise BenchError(f"{self.path}: no such model file")
        for name, value, low in (
            ("n_prompt", self.n_prompt, 0),
            ("n_gen", self.n_gen, 0),
            ("reps", self.reps, 1),
            ("threads", self.threads, 1),
        ):
            if value < low:
                raise BenchError(f"{name}={value} must be >= {low}")
        if self.threads > MAX_THREADS:
            raise BenchError(f"threads={self.threads} is more than ggml's {MAX_THREADS} (GGML_MAX_N_THREADS)")
        if self.n_prompt == 0 and self.n_gen == 0:
            raise BenchError("nothing to measure: n_prompt and n_gen are both 0")
        if self.precision not in PRECISIONS:
            raise BenchError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        unknown = [a for a in self.against if a not in AGAINST]
        if unknown:
            raise BenchError(f"--against {unknown[0]!r} is not one of {', '.join(AGAINST)}")

    def tests(self) -> list[tuple[str, int]]:
        """llama-bench's test names and token counts: ``pp512``, ``tg128``."""
        return [(f"{kind}{n}", n) for kind, n in (("pp", self.n_prompt), ("tg", self.n_gen)) if n > 0]

    def tokens(self, n_vocab: int) -> list[int]:
        """The fed ids: fixed pseudo-random ids below ``n_vocab`` (no special meaning)."""
        n = max(self.n_prompt, self.n_gen)
        return [1 + (i * 7919) % max(1, n_vocab - 1) for i in range(n)]


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One side's one test: the seconds of every repetition (or why it did not run)."""

    side: str
    test: str
    n_tokens: int
    precision: str
    times_s: tuple[float, ...] = ()
    error: str = ""

    @property
    def tok_s(self) -> tuple[float, ...]:
        return tuple(self.n_tokens / t for t in self.times_s if t > 0)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.tok_s) if self.tok_s else float("nan")

    @property
    def std(self) -> float:
        return statistics.stdev(self.tok_s) if len(self.tok_s) > 1 else 0.0


def load_limits(threads: int, cores: int | None = None) -> tuple[float, float]:
    """The 1-minute load averages above which a run's figures are not trusted: before the run
    (other work on the machine) and after it (the run's own threads plus others beyond the cores)."""
    n = cores or os.cpu_count() or 1
    return 0.5 * n + 0.5, max(n, threads) + 0.5


@dataclass(frozen=True, slots=True)
class BenchReport:
    """Every side's results with the machine's load average around them."""

    settings: BenchSettings
    results: tuple[BenchResult, ...]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    cores: int
    model_bytes: int
    notes: tuple[str, ...] = field(default=())

    def warnings(self) -> list[str]:
        """Why these figures may not mean anything (a busy machine, a side that failed)."""
        before, after = load_limits(self.settings.threads, self.cores)
        out = []
        if self.load_before[0] > before or self.load_after[0] > after:
            out.append(
                f"the machine was busy (load average {self.load_before[0]:.2f} before, "
                f"{self.load_after[0]:.2f} after, on {self.cores} cores; limits {before:.1f} / {after:.1f}): "
                "llama.cpp's threads spin-wait, so ratios against it are not meaningful"
            )
        failed = {r.side: r.error for r in self.results if r.error}  # one line per failed side
        return out + [f"{side} did not run: {error}" for side, error in failed.items()]

    def ratio(self, test: str, side: str, baseline: str) -> float | None:
        """``side``'s mean tok/s over ``baseline``'s for ``test`` (None when either is missing)."""
        got = {r.side: r for r in self.results if r.test == test and r.times_s}
        if side not in got or baseline not in got:
            return None
        return got[side].mean / got[baseline].mean

    def rows(self) -> list[dict[str, Any]]:
        s = self.settings
        return [
            {
                "side": r.side,
                "precision": r.precision,
                "threads": s.threads,
                "fa": int(s.flash_attn),
                "test": r.test,
                "t/s": r.mean,
                "stddev": r.std,
                "reps": len(r.times_s),
                "error": r.error,
            }
            for r in self.results
        ]

    def header(self) -> str:
        lb, la = self.load_before, self.load_after
        return (
            f"model {self.settings.path.name} ({self.model_bytes / 2**20:.1f} MiB); "
            f"load average before {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}, after {la[0]:.2f} {la[1]:.2f} "
            f"{la[2]:.2f} ({self.cores} cores)"
        )

    def to_markdown(self) -> str:
        lines = [
            self.header(),
            "",
            "| side | precision | threads | fa | test | t/s |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for row, r in zip(self.rows(), self.results, strict=True):
            ts = f"{r.mean:.2f} ± {r.std:.2f}" if r.times_s else f"failed: {r.error}"
            lines.append(
                f"| {row['side']} | {row['precision']} | {row['threads']} | {row['fa']} | {row['test']} | {ts} |"
            )
        baselines = [a for a in self.settings.against if any(r.side == a and r.times_s for r in self.results)]
        for test, _ in self.settings.tests():
            for base in baselines:
                q = self.ratio(test, "ovkit", base)
                if q is not None:
                    lines.append(f"\novkit / {base} {test}: {q:.2f}x")
        lines += [f"\nwarning: {w}" for w in self.warnings()]
        lines += [f"\nnote: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_csv(self) -> str:
        buf = io.StringIO()
        rows = self.rows()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["side"])
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()

    def to_json(self) -> str:
        return json.dumps(
            {
                "settings": {**asdict(self.settings), "path": str(self.settings.path)},
                "load_before": self.load_before,
                "load_after": self.load_after,
                "cores": self.cores,
                "model_bytes": self.model_bytes,
                "results": self.rows(),
                "times_s": {f"{r.side} {r.test}": r.times_s for r in self.results},
                "warnings": self.warnings(),
                "notes": list(self.notes),
            },
            indent=1,
        )

    def format(self, output: str) -> str:
        formats: dict[str, Callable[[], str]] = {
            "md": self.to_markdown,
            "csv": self.to_csv,
            "json": self.to_json,
        }
        if output not in formats:
            raise BenchError(f"output format {output!r} is not one of {', '.join(formats)}")
        return formats[output]()


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def context_size(s: BenchSettings, limit: ContextLimit) -> int:
    """The KV cache positions of a run: the longer test's tokens and one more, within ``limit``
    (the model's context and the machine's memory); a :class:`BenchError` naming ``-p`` or ``-n``
    when a test's tokens pass it, checked before any token is made or model compiled."""
    for flag, name, n in (("-p", "n_prompt", s.n_prompt), ("-n", "n_gen", s.n_gen)):
        if n > limit.positions:
            raise BenchError(f"{name}={n} ({flag}) is more than {limit.describe()}")
    return min(max(s.n_prompt, s.n_gen) + 1, limit.positions)


def run_ovkit(
    s: BenchSettings, tokens: Sequence[int], progress: Callable[[str], None] = lambda _: None
) -> list[BenchResult]:
    """ovkit's side, in this process: compile outside the timed runs, one warm-up, ``reps`` runs."""
    from ovkit.gguf import read_gguf
    from ovkit.model.limits import context_limit, model_hparams
    from ovkit.model.runner import Model

    model = Model(
        s.path,
        n_ctx=context_size(s, context_limit(model_hparams(read_gguf(s.path)))),
        flash_attn=s.flash_attn,
        precision=s.precision,
        n_threads=s.threads,
        shapes=s.shapes,
    )

    def pp() -> None:
        model.reset()
        model.eval(tokens[: s.n_prompt], last_only=True)

    def tg() -> None:
        model.reset()
        for t in tokens[: s.n_gen]:
            model.eval([t])

    out = []
    for test, n in s.tests():
        fn = pp if test.startswith("pp") else tg
        progress(f"ovkit {test}: compile and warm up")
        fn()
        times = []
        for i in range(s.reps):
            progress(f"ovkit {test}: repetition {i + 1}/{s.reps}")
            times.append(_timed(fn))
        out.append(BenchResult("ovkit", test, n, model.effective_precision(), tuple(times)))
    return out


def run_llama(s: BenchSettings, side: str, tokens: Sequence[int]) -> list[BenchResult]:
    """llama.cpp's side (``side`` in :data:`AGAINST`) in a child process, crash-isolated."""
    from ovkit import child
    from ovkit.model.reference import llama_sigill_hint, upstream_env

    upstream = AGAINST[side]
    precision = "OpenVINO CPU default" if upstream else "ggml CPU kernels"
    request = {
        "path": str(s.path),
        "tests": s.tests(),
        "tokens": list(tokens),
        "reps": s.reps,
        "threads": s.threads,
        "flash_attn": s.flash_attn,
        "upstream": upstream,
    }
    try:
        env = upstream_env() if upstream else dict(os.environ)
    except RuntimeError as exc:
        return [BenchResult(side, t, n, precision, error=str(exc).splitlines()[0]) for t, n in s.tests()]
    with tempfile.TemporaryDirectory(prefix="ovkit-bench-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps(request))
        try:
            stdout = child.run(
                [sys.executable, "-m", "ovkit.model.bench", str(req)],
                env=env,
                timeout=CHILD_TIMEOUT_S,
                sigill_hint=lambda: llama_sigill_hint(upstream),
            )
        except child.ChildError as exc:  # crashed (the signal named, SIGILL explained) or timed out
            return [BenchResult(side, t, n, precision, error=f"{side} failed: {exc}") for t, n in s.tests()]
    got = json.loads(stdout.strip().splitlines()[-1])
    return [
        BenchResult(side, t, n, got["precision"] or precision, tuple(got["times"][t])) for t, n in s.tests()
    ]


def bench(s: BenchSettings, progress: Callable[[str], None] = lambda _: None) -> BenchReport:
    """Every side of ``s`` in turn (one side at a time: they would compete for the cores)."""
    from ovkit.gguf import read_gguf
    from ovkit.model.limits import context_limit, model_hparams

    cores = os.cpu_count() or 1
    hp = model_hparams(read_gguf(s.path))  # a ModelError (not a decoder model) names the file
    context_size(s, context_limit(hp))  # the sizes, before the tokens are made
    tokens = s.tokens(hp.n_vocab)  # the same fed ids on every side
    before = os.getloadavg()
    results = run_ovkit(s, tokens, progress)
    for side in s.against:
        progress(f"{side}: load, warm up and {s.reps} repetitions")
        results += run_llama(s, side, tokens)
    after = os.getloadavg()
    notes = ("ovkit reads only the last position's logits in pp, as llama-bench does",)
    return BenchReport(s, tuple(results), before, after, cores, s.path.stat().st_size, notes)


# -- the command line -----------------------------------------------------------------------------


def add_cli_args(p: Any) -> None:
    p.add_argument("file", type=Path, help="path of a .gguf model")
    p.add_argument("-p", "--n-prompt", type=int, default=512, help="prompt tokens of the pp test (0: none)")
    p.add_argument("-n", "--n-gen", type=int, default=128, help="generated tokens of the tg test (0: none)")
    p.add_argument("-r", "--repetitions", type=int, default=5, help="timed repetitions per test")
    p.add_argument("-t", "--threads", type=int, default=2, help="threads on every side")
    p.add_argument("--fa", choices=("on", "off"), default="on", help="flash attention, as llama-bench -fa")
    p.add_argument("--precision", default="exact", help=f"ovkit's precision: {', '.join(PRECISIONS)}")
    p.add_argument(
        "--against", default="llama.cpp", help=f"comma-separated baselines: {', '.join(AGAINST)} (or none)"
    )
    p.add_argument("-o", "--output", choices=("md", "csv", "json"), default="md", help="output format")
    p.add_argument(
        "--shapes", choices=("dynamic", "split", "buckets"), help="ovkit's compiled models (Model(shapes=))"
    )


def cli(args: Any) -> int:
    against = tuple(a for a in args.against.split(",") if a and a != "none")
    try:
        s = BenchSettings(
            args.file,
            args.n_prompt,
            args.n_gen,
            args.repetitions,
            args.threads,
            args.fa == "on",
            args.precision,
            against,
            args.shapes,
        )
        report = bench(s, progress=lambda msg: print(f"ovkit bench: {msg}", file=sys.stderr, flush=True))
    except (ValueError, RuntimeError) as exc:  # BenchError, ModelError, a broken GGUF
        print(f"ovkit bench: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(report.format(args.output))
    return 0


# -- the child: llama-cpp-python, CPU or OpenVINO build ------------------------------------------


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    import llama_cpp

    upstream = bool(request["upstream"])
    n_ctx = max(n for _, n in request["tests"]) + 1
    llm = llama_cpp.Llama(
        request["path"],
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        n_threads=request["threads"],
        n_threads_batch=request["threads"],
        n_gpu_layers=-1 if upstream else 0,
        flash_attn=bool(request["flash_attn"]),
        logits_all=False,
        verbose=False,
    )
    toks = request["tokens"]

    def run(test: str, n: int) -> None:
        llm.reset()  # the next eval removes every cached position (a fresh KV cache)
        if test.startswith("pp"):
            llm.eval(toks[:n])
        else:
            for t in toks[:n]:
                llm.eval([t])

    times: dict[str, list[float]] = {}
    for test, n in request["tests"]:
        run(test, n)  # warm-up
        times[test] = [_timed(partial(run, test, n)) for _ in range(request["reps"])]
    precision = None
    if upstream:  # what the backend's own OpenVINO core computes in, read in this child
        from ovkit.model.compare import backend_precision

        precision = f"OpenVINO CPU default ({backend_precision()})"
    return {"times": times, "precision": precision}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    print(json.dumps(_serve(json.loads(Path(args[0]).read_text()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
