"""``python -m ovkit.upstream info | agreement | drift SOURCE``: the real backend (its devices:
``ovkit list-devices --upstream``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    from ovkit.upstream import UpstreamCallError, UpstreamUnavailableError, detect

    parser = argparse.ArgumentParser(prog="python -m ovkit.upstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="which real backend build is installed")
    p = sub.add_parser("agreement", help="its live supports_op against ovkit's policy")
    p.add_argument("--verdicts", type=Path, help="a test-backend-ops verdict CSV (default: the shipped one)")
    p.add_argument("--no-catalogue", action="store_true", help="only the test-backend-ops rows")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    d = sub.add_parser("drift", help="a backend source (checkout or sdist) against ovkit's tables")
    d.add_argument("source", type=Path, help="a llama.cpp checkout or an sdist vendoring one")
    d.add_argument("--revision", help="the ovkit policy revision to compare with (default: the closest)")
    args = parser.parse_args(argv)
    if args.command == "drift":  # reads files only: no installed backend needed
        from ovkit.upstream.drift import SourceError, drift

        try:
            report = drift(args.source, args.revision)
        except (SourceError, OSError, ValueError) as exc:
            print(f"ovkit: error: {exc}", file=sys.stderr)
            return 2
        print("\n".join(report.lines()))
        return 1 if report.drifted else 0
    try:
        if args.command == "info":
            from ovkit.upstream.devices import ggml_info

            print(detect().describe())
            info = ggml_info()
            print(f"vendored ggml {info['ggml_version']} (commit {info['ggml_commit']}), "
                  f"backend registries: {info['registries']}")  # fmt: skip
            return 0
        from ovkit.ops.verdict_csv import read_verdicts
        from ovkit.upstream import agreement

        rows = read_verdicts(args.verdicts) if args.verdicts else None
        result = agreement(
            rows, catalogue=not args.no_catalogue, progress=False if args.no_progress else None
        )
        print("\n".join(result.lines()))
        return 0 if not result.differences else 1
    except (UpstreamUnavailableError, UpstreamCallError) as exc:
        print(f"ovkit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
