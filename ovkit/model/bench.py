"""``ovkit bench``: llama-bench's prompt-processing (pp) and text-generation (tg) table for ovkit,
llama.cpp's CPU build, the real OpenVINO backend and OpenVINO GenAI's GGUF path, in one run.

Each side runs in a fresh process: a warm-up, then ``reps`` timed repetitions as llama-bench's,
beside its peak RSS, cold start and greedy tokens against llama.cpp's; a busy machine is reported.
"""

from __future__ import annotations

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
from typing import Any, Protocol

from ovkit.errors import OvkitError
from ovkit.model.precision import PRECISIONS
from ovkit.model.runner import SHAPE_MODES

#: The sides ``--against`` can name besides ovkit: llama.cpp's CPU build and the real backend
#: (llama-cpp-python, its OpenVINO build for "upstream"), and OpenVINO GenAI's GGUF reader.
AGAINST = ("llama.cpp", "upstream", "genai")
#: Greedy tokens every side picks after the same prompt, compared with llama.cpp's.
N_CHECK = 16
#: That prompt, in llama.cpp's tokens of the model (the pp test's pseudo-random ids when it has no
#: tokenizer): natural text, whose next tokens a trained model does not pick from near-ties.
GREEDY_TEXT = "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"


#: A side's process of one repetition is at most this long (a hung child is killed).
CHILD_TIMEOUT_S = 1800.0
#: The most threads a side may use: ggml's ``GGML_MAX_N_THREADS``.
MAX_THREADS = 512


class BenchError(OvkitError, ValueError):
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
class SideRun:
    """One side's process: its memory and start, and the greedy tokens it picked."""

    side: str
    peak_rss: int = 0  # bytes: the process's high-water mark
    rss_first: int = 0  # bytes: right after the first token
    cold_s: float = float("nan")  # process start to the first token
    greedy: tuple[int, ...] = ()
    error: str = ""


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
    runs: tuple[SideRun, ...] = field(default=())

    def greedy_agreement(self, side: str) -> str:
        """``side``'s greedy tokens against llama.cpp's: agreeing prefix / length ("" when either
        is missing)."""
        got = {r.side: r.greedy for r in self.runs if r.greedy}
        if side not in got or "llama.cpp" not in got:
            return ""
        ours, ref = got[side], got["llama.cpp"]
        same = next(
            (i for i, (a, b) in enumerate(zip(ours, ref, strict=False)) if a != b), min(len(ours), len(ref))
        )
        return f"{same}/{len(ref)}"

    def memory_rows(self) -> list[dict[str, Any]]:
        mib = 2**20
        return [
            {
                "side": r.side,
                "peak RSS MiB": r.peak_rss / mib,
                "x file": r.peak_rss / self.model_bytes if self.model_bytes else float("nan"),
                "RSS after 1st token MiB": r.rss_first / mib,
                "cold start s": r.cold_s,
                "greedy vs llama.cpp": self.greedy_agreement(r.side),
                "error": r.error,
            }
            for r in self.runs
        ]

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
        if self.runs:
            lines += [
                "",
                "| side | peak RSS | × file | RSS after 1st token | cold start | greedy vs llama.cpp |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for m in self.memory_rows():
                if m["error"]:
                    lines.append(f"| {m['side']} | failed: {m['error']} | | | | |")
                    continue
                lines.append(
                    f"| {m['side']} | {m['peak RSS MiB']:,.0f} MiB | {m['x file']:.2f} | "
                    f"{m['RSS after 1st token MiB']:,.0f} MiB | {m['cold start s']:.1f} s | "
                    f"{m['greedy vs llama.cpp']} |"
                )
        lines += [f"\nwarning: {w}" for w in self.warnings()]
        lines += [f"\nnote: {n}" for n in self.notes]
        return "\n".join(lines)

    def sides(self) -> list[dict[str, Any]]:
        """One row per side: its speeds, memory, start and greedy agreement (what ``frame`` and
        ``plot_sides`` show)."""
        speed = {(r.side, r.test[:2]): r.mean for r in self.results if r.times_s}
        precision = {r.side: r.precision for r in self.results}
        return [
            {
                "side": m["side"],
                "precision": precision.get(m["side"], ""),
                "prefill tok/s": speed.get((m["side"], "pp"), float("nan")),
                "decode tok/s": speed.get((m["side"], "tg"), float("nan")),
                **{k: v for k, v in m.items() if k != "side"},
            }
            for m in self.memory_rows()
        ]

    def frame(self) -> Any:
        """:meth:`sides` as a pandas DataFrame indexed by side."""
        import pandas as pd

        return pd.DataFrame(self.sides()).set_index("side")

    def to_csv(self) -> str:
        import pandas as pd

        return str(pd.DataFrame(self.rows()).to_csv(index=False))

    def to_json(self) -> str:
        return json.dumps(
            {
                "settings": {**asdict(self.settings), "path": str(self.settings.path)},
                "load_before": self.load_before,
                "load_after": self.load_after,
                "cores": self.cores,
                "model_bytes": self.model_bytes,
                "results": self.rows(),
                "processes": self.memory_rows(),
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


def plot_sides(report: BenchReport, axes: Any = None) -> Any:
    """Peak RSS (with the RSS after the first token) and decode tok/s per side, side by side; a
    side that did not run is drawn as an empty slot with its name marked failed."""
    import matplotlib.pyplot as plt

    rows = report.sides()
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    mem, speed = axes
    names = [r["side"] + (" (failed)" if r["error"] else "") for r in rows]
    xs = range(len(rows))
    mem.bar(xs, [r["peak RSS MiB"] for r in rows], color="#8fb3d9", label="peak")
    mem.bar(
        xs, [r["RSS after 1st token MiB"] for r in rows], width=0.5, color="#2b5d8f", label="after 1st token"
    )
    mem.axhline(report.model_bytes / 2**20, color="k", lw=1, ls="--", label="GGUF file")
    mem.set(ylabel="RSS (MiB)", title="memory of each process")
    speed.bar(xs, [r["decode tok/s"] for r in rows], color="#d9a066")
    speed.set(ylabel="decode tok/s", title="decode speed")
    for ax in axes:
        ax.set_xticks(list(xs), names, rotation=15)
        ax.grid(axis="y", alpha=0.3)
    mem.legend(fontsize=8)
    load = report.load_before[0]
    axes[0].figure.suptitle(f"{report.settings.path.name}, load average {load:.2f}", fontsize=9)
    return axes


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


#: What each baseline computes in, until its child says more precisely.
BASELINE_PRECISION = {
    "llama.cpp": "ggml CPU kernels",
    "upstream": "OpenVINO CPU default",
    "genai": "OpenVINO CPU default",
}


def run_side(
    s: BenchSettings,
    side: str,
    tokens: Sequence[int],
    n_ctx: int,
    progress: Callable[[str], None] = lambda _: None,
    greedy_prompt: Sequence[int] = (),
) -> tuple[list[BenchResult], SideRun]:
    """One side in its own fresh process (crash-isolated, killed after ``CHILD_TIMEOUT_S``)."""
    from ovkit import child
    from ovkit.model.reference import LlamaCppError, run_llama_child

    precision = s.precision if side == "ovkit" else BASELINE_PRECISION[side]
    request = {
        "side": side,
        "n_ctx": n_ctx,
        "path": str(s.path),
        "tests": s.tests(),
        "tokens": list(tokens),
        "reps": s.reps,
        "threads": s.threads,
        "flash_attn": s.flash_attn,
        "precision": s.precision,
        "shapes": s.shapes,
        "n_check": N_CHECK,
        "greedy_prompt": list(greedy_prompt),
        "spawned_at": time.time(),
    }

    def failed(error: str) -> tuple[list[BenchResult], SideRun]:
        return [BenchResult(side, t, n, precision, error=error) for t, n in s.tests()], SideRun(
            side, error=error
        )

    progress(f"{side}: load, warm up and {s.reps} repetitions in a fresh process")
    with tempfile.TemporaryDirectory(prefix="ovkit-bench-") as tmp:
        try:
            stdout = run_llama_child(
                "ovkit.model.bench", request, Path(tmp), upstream=side == "upstream", timeout=CHILD_TIMEOUT_S
            )
        except child.ChildError as exc:  # crashed (the signal named, SIGILL explained) or timed out
            return failed(f"{side} failed: {str(exc).splitlines()[0]}")
        except LlamaCppError as exc:  # no OpenVINO build of llama-cpp-python here
            return failed(str(exc).splitlines()[0])
    got = json.loads(stdout.strip().splitlines()[-1])
    if got.get("error"):
        return failed(got["error"])
    results = [
        BenchResult(side, t, n, got["precision"] or precision, tuple(got["times"][t])) for t, n in s.tests()
    ]
    run = SideRun(side, got["peak_rss"], got["rss_first"], got["cold_s"], tuple(got["greedy"]))
    return results, run


def _greedy_prompt(path: Path, n_ctx: int) -> list[int]:
    """:data:`GREEDY_TEXT` in llama.cpp's tokens of the model; empty when llama.cpp is not here or
    the model has no tokenizer (each side then takes the pp test's ids)."""
    from ovkit.model.reference import tokenize

    try:
        ids = tokenize(path, GREEDY_TEXT)
    except Exception:  # llama.cpp missing, or no vocabulary: the fallback says so in the report
        return []
    return ids if 0 < len(ids) <= n_ctx - N_CHECK else []


def bench(s: BenchSettings, progress: Callable[[str], None] = lambda _: None) -> BenchReport:
    """Every side of ``s`` in turn, each in its own fresh process."""
    from ovkit.gguf import read_gguf
    from ovkit.model.footprint import context_limit
    from ovkit.model.limits import model_hparams

    cores = os.cpu_count() or 1
    hp = model_hparams(read_gguf(s.path))  # a ModelError (not a decoder model) names the file
    limit = context_limit(hp)  # the model's context and the machine's memory, before any compile
    for flag, name, n in (("-p", "n_prompt", s.n_prompt), ("-n", "n_gen", s.n_gen)):
        if n > limit.positions:
            raise BenchError(f"{name}={n} ({flag}) is more than {limit.describe()}")
    n_ctx = min(max(s.n_prompt, s.n_gen) + N_CHECK + 1, limit.positions)
    tokens = s.tokens(hp.n_vocab)  # the same fed ids on every side
    before = os.getloadavg()
    results: list[BenchResult] = []
    runs: list[SideRun] = []
    greedy_prompt = _greedy_prompt(s.path, n_ctx)
    for side in ("ovkit", *s.against):
        got, run = run_side(s, side, tokens, n_ctx, progress, greedy_prompt)
        results += got
        runs.append(run)
    after = os.getloadavg()
    notes = (
        "ovkit reads only the last position's logits in pp, as llama-bench does",
        "peak RSS is each process's high-water mark (VmHWM); cold start: process start to first token",
    )
    return BenchReport(s, tuple(results), before, after, cores, s.path.stat().st_size, notes, tuple(runs))


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
    p.add_argument("--shapes", choices=SHAPE_MODES, help="ovkit's compiled models (Model(shapes=))")


def cli(args: Any) -> int:
    against = tuple(a for a in args.against.split(",") if a and a != "none")
    try:
        s = BenchSettings(
            args.file, args.n_prompt, args.n_gen, args.repetitions, args.threads, args.fa == "on",
            args.precision, against, args.shapes,
        )  # fmt: skip
        report = bench(s, progress=lambda msg: print(f"ovkit bench: {msg}", file=sys.stderr, flush=True))
    except (ValueError, RuntimeError) as exc:  # BenchError, ModelError, a broken GGUF
        print(f"ovkit bench: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(report.format(args.output))
    return 0


# -- the child: one side's process --------------------------------------------------------------


def _status_bytes(key: str) -> int:
    """A size of this process from /proc/self/status in bytes: ``VmRSS`` now, ``VmHWM`` its peak
    (the high-water mark of this process image: ``ru_maxrss`` would keep the forking parent's)."""
    with open("/proc/self/status") as fh:
        return next((int(line.split()[1]) * 1024 for line in fh if line.startswith(f"{key}:")), 0)


class _Side(Protocol):
    """What a side's child runs: ``n`` greedy tokens after ``prompt`` from an empty cache, in ``n``
    forward passes, and the precision it ran at."""

    @property
    def precision(self) -> str | None: ...

    def generate(self, prompt: Sequence[int], n: int) -> list[int]: ...


class _Ovkit:
    """ovkit's :class:`~ovkit.model.runner.Model` on the file's own blocks, as llama.cpp and GenAI
    run them."""

    def __init__(self, r: dict[str, Any]) -> None:
        from ovkit.model.runner import Model

        self.model = Model(
            r["path"],
            n_ctx=r["n_ctx"],
            flash_attn=r["flash_attn"],
            precision=r["precision"],
            n_threads=r["threads"],
            shapes=r["shapes"],
            no_requant=True,
        )

    @property
    def precision(self) -> str:
        return self.model.effective_precision()

    def generate(self, prompt: Sequence[int], n: int) -> list[int]:
        """``n`` tokens in ``n`` forward passes, as the other sides: ``Model.generate``'s last step
        feeds its last token, whose logits pick the n-th."""
        import numpy as np

        g = self.model.generate(prompt, n - 1)
        return [*g.tokens, int(np.argmax(g.decode_logits[-1]))] if n > 1 else list(g.tokens)


class _Llama:
    """llama-cpp-python: its CPU build, or with ``upstream`` its OpenVINO one (the real backend)."""

    precision: str | None = None

    def __init__(self, r: dict[str, Any], upstream: bool) -> None:
        import llama_cpp

        n_ctx = r["n_ctx"]
        self.llm = llama_cpp.Llama(
            r["path"],
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
            n_threads=r["threads"],
            n_threads_batch=r["threads"],
            n_gpu_layers=-1 if upstream else 0,
            flash_attn=bool(r["flash_attn"]),
            logits_all=False,
            verbose=False,
        )
        if upstream:  # what the backend's own OpenVINO core computes in, read in this child
            from ovkit.model.compare import backend_precision

            self.precision = f"OpenVINO CPU default ({backend_precision()})"

    def generate(self, prompt: Sequence[int], n: int) -> list[int]:
        import llama_cpp
        import numpy as np

        def last_pick() -> int:  # the last position's logits (``scores`` holds them only with logits_all)
            ptr = llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
            return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.llm.n_vocab(),))))

        self.llm.reset()  # the next eval removes every cached position (a fresh KV cache)
        self.llm.eval(list(prompt))
        out = [last_pick()]
        for _ in range(n - 1):
            self.llm.eval([out[-1]])
            out.append(last_pick())
        return out


class GenAISide:
    """OpenVINO GenAI's LLMPipeline on the ``.gguf`` itself, fed token ids (no tokenizer pass).
    Each call is a new conversation, with prefix caching off."""

    precision = "OpenVINO CPU default (GenAI)"

    def __init__(self, r: dict[str, Any]) -> None:
        import openvino_genai as genai

        self.genai = genai
        # LLMPipeline's default scheduler caches prompt prefixes across calls: every repetition of
        # the same prompt after the first would skip its prefill
        scheduler = genai.SchedulerConfig()
        scheduler.enable_prefix_caching = False
        self.pipe = genai.LLMPipeline(
            r["path"], "CPU", scheduler_config=scheduler, INFERENCE_NUM_THREADS=r["threads"]
        )

    def generate(self, prompt: Sequence[int], n: int) -> list[int]:
        import numpy as np
        import openvino as ov

        config = self.genai.GenerationConfig()
        config.max_new_tokens = n
        config.min_new_tokens = n
        config.do_sample = False
        config.ignore_eos = True
        ids = ov.Tensor(np.asarray([list(prompt)], np.int64))
        return [int(t) for t in self.pipe.generate(ids, config).tokens[0]]


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    """One side's child: every side is timed through one operation, ``generate(prompt, n)`` from an
    empty cache (a prefill, then n - 1 greedy steps of one token): pp is a prompt and one token,
    tg a one-token prompt and n."""
    side = request["side"]
    try:
        sides: dict[str, Callable[[dict[str, Any]], _Side]] = {"ovkit": _Ovkit, "genai": GenAISide}
        runner = sides.get(side, partial(_Llama, upstream=side == "upstream"))(request)
    except ImportError as exc:
        return {"error": f"{side} is not installed here ({exc}); bash .ci/test installs every side"}
    except Exception as exc:  # the runtime refuses the file (GenAI: Q5_0; the backend: Gemma-3)
        return {"error": f"{side} cannot load {Path(request['path']).name}: {str(exc).splitlines()[0][:300]}"}
    toks = request["tokens"]
    times: dict[str, list[float]] = {}
    first: tuple[float, int] | None = None
    for test, n in request["tests"]:
        fn = partial(runner.generate, *((toks[:n], 1) if test.startswith("pp") else (toks[:1], n)))
        fn()  # warm-up; the first one gives the first token
        if first is None:
            first = (time.time(), _status_bytes("VmRSS"))
        times[test] = [_timed(fn) for _ in range(request["reps"])]
    n_prompt = next((n for t, n in request["tests"] if t.startswith("pp")), 16)
    prompt = request["greedy_prompt"] or toks[: min(n_prompt, request["n_ctx"] - 1)]
    greedy = runner.generate(prompt, min(request["n_check"], request["n_ctx"] - len(prompt)))
    assert first is not None
    return {
        "times": times,
        "precision": runner.precision,
        "peak_rss": _status_bytes("VmHWM"),
        "rss_first": first[1],
        "cold_s": first[0] - request["spawned_at"],
        "greedy": greedy,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    print(json.dumps(_serve(json.loads(Path(args[0]).read_text()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
