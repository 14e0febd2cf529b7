"""``ovkit`` on the command line: ``list-devices`` (byte-for-byte as llama.cpp's, without pandas,
matplotlib or ipywidgets) and friends.  Exit codes: 0 ok, 1 checks failed, 2 bad usage or runtime."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ovkit.runtime import RuntimeUnavailableError
from ovkit.usage import UsageError, make_core


@contextlib.contextmanager
def _stderr_logging() -> Iterator[None]:
    """ovkit's log lines and warnings as plain stderr lines while a command runs; restored after,
    so calling ``main()`` in-process (tests, notebooks) leaves the caller's logging as it was."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("ovkit")
    saved = (log.handlers[:], log.level, log.propagate, warnings.showwarning)
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False

    def show(message: Any, category: Any, *_: Any, **__: Any) -> None:
        print(f"ovkit: warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        log.handlers[:], level, log.propagate, warnings.showwarning = saved
        log.setLevel(level)


def _add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _add_list_devices_args(p: argparse.ArgumentParser) -> None:
    from ovkit.layouts import DEFAULT_LAYOUT, LAYOUTS

    p.add_argument("--simulate", metavar="PROFILE", help="use a simulated device set (e.g. laptop)")
    _add_json_arg(p)
    p.add_argument(
        "--layout",
        choices=list(LAYOUTS),
        default=DEFAULT_LAYOUT,
        help="which backend's device layout to show: "
        + "; ".join(f"{k}: {v.title}" for k, v in LAYOUTS.items())
        + f" (default {DEFAULT_LAYOUT})",
    )
    p.add_argument(
        "--upstream",
        action="store_true",
        help="the real backend's devices, as llama-bench --list-devices prints them (scripts/install-upstream)",
    )


def cmd_list_devices(args: argparse.Namespace) -> int:
    if args.upstream:
        return _upstream_list_devices(args)
    from ovkit.devices import format_device_list, list_devices
    from ovkit.layouts import BackendAbort
    from ovkit.selection import resolve_device

    core = make_core(args.simulate)
    try:
        selection = resolve_device(layout=args.layout, core=core)
    except BackendAbort as exc:  # the fork stops here, listing the devices to choose from
        raise UsageError(str(exc)) from None
    devices = list_devices(args.layout, core=core)
    if args.json:
        payload = {
            "layout": args.layout,
            "selected": selection.device,
            "requested": selection.requested,
            "fell_back": selection.fell_back,
            "hint": selection.hint,
            "simulated": bool(getattr(core, "simulated", False)),
            "devices": [d.to_dict() for d in devices],
        }
        print(json.dumps(payload, indent=2))
    else:
        print(format_device_list(devices))
    return 0


def _upstream_list_devices(args: argparse.Namespace) -> int:
    from ovkit.layouts import DEFAULT_LAYOUT
    from ovkit.upstream import build, devices

    if args.simulate:
        raise UsageError("--upstream lists the installed backend's devices; it cannot be simulated")
    if args.layout != DEFAULT_LAYOUT:
        raise UsageError(
            "--upstream lists what the installed backend registers (its own layout, master); "
            f"--layout {args.layout} is ovkit's model of a layout: use one or the other"
        )
    try:
        found = devices.list_devices()
    except (build.UpstreamUnavailableError, devices.UpstreamCallError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        from dataclasses import asdict

        payload = {"upstream": build.detect().describe(), "devices": [asdict(d) for d in found]}
        print(json.dumps(payload, indent=2))
    else:
        print(devices.format_list_devices(found))
    return 0


def _test_ops_args(p: argparse.ArgumentParser) -> None:
    importlib.import_module("ovkit.testops").add_cli_args(p)
    p.add_argument(
        "--upstream",
        action="store_true",
        help="run each case three ways: ovkit, the real backend, ggml's CPU backend (scripts/install-upstream)",
    )


def _test_ops(args: argparse.Namespace) -> int:
    if not getattr(args, "upstream", False):
        return int(importlib.import_module("ovkit.testops").cli(args))
    from ovkit.upstream import build, ops

    try:
        return ops.cli(args)
    except build.UpstreamUnavailableError as exc:
        raise UsageError(str(exc)) from None


def _add_config_args(p: argparse.ArgumentParser) -> None:
    _add_json_arg(p)
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) when a value reads otherwise than written or a name is unknown, listing each",
    )


def cmd_config(args: argparse.Namespace) -> int:
    """Every variable the backend reads, as parsed; a value read otherwise than written or an
    unknown name is a warning, with ``--strict`` an error (exit 1)."""
    from ovkit.config import read_config, readable, shown

    config = read_config(warn=not args.strict)
    rows = config.as_rows()
    if args.json:
        payload = {"variables": rows, "problems": list(config.problems), "unknown": list(config.unknown)}
        print(json.dumps(payload, indent=2, default=str))
    else:
        print(f"{'variable':44} {'type':16} {'value':28} ovkit: what it changes")
        for row in rows:
            raw = row["raw"]  # raw and parsed value escaped and cut: no stray value floods the table
            text = f"(default {row['default']})" if raw is None else f"{shown(str(raw), 24)} -> "
            text += "" if raw is None else readable(str(row["value"]), 24)
            status = "modelled" if str(row["ovkit"]).startswith("modelled") else "reported only"
            flag = "!" if row["problem"] else " "
            print(
                f"{row['variable']:44} {str(row['type'])[:16]:16} {text:28}{flag}{status}: {row['changes']}"
            )
        for cls in ("CPU", "GPU", "NPU"):
            on = ", ".join(f"{k}={'on' if v else 'off'}" for k, v in config.effective(cls).items())
            print(f"on the {cls} class: {on}")
        if npu := config.npu_compile_properties():
            print(f"NPU compile properties from the environment: {readable(str(npu), 200)}")
        if config.issues:
            print(
                f"! marks a value read otherwise than written ({len(config.issues)}; each is listed on stderr)"
            )
    if args.strict:
        for problem in config.problems:
            print(f"ovkit: error: {problem}", file=sys.stderr)
        return 1 if config.problems else 0
    return 0


def _module_command(
    module: str,
) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    """``(add_args, run)`` of a sub-command whose module (``add_cli_args``/``cli``) loads on use."""

    def add_args(p: argparse.ArgumentParser) -> None:
        importlib.import_module(module).add_cli_args(p)

    def run(args: argparse.Namespace) -> int:
        return int(importlib.import_module(module).cli(args))

    return add_args, run


@dataclass(frozen=True, slots=True)
class Command:
    """One sub-command: its help, how it adds arguments and what it runs."""

    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "list-devices": Command(
        "list the OpenVINO devices as llama.cpp --list-devices does", _add_list_devices_args, cmd_list_devices
    ),
    "config": Command(
        "every GGML_OPENVINO_* variable: type, default, parsed value, modelled or reported",
        _add_config_args,
        cmd_config,
    ),
    "gguf": Command(
        "a GGUF file's tensors and whether its weights fit each device", *_module_command("ovkit.gguf")
    ),
    "check": Command(
        "will a GGUF run on each device as the real backend runs it, and what will it take (header only)",
        *_module_command("ovkit.preflight"),
    ),
    "run-model": Command(
        "run a GGUF model: prefill + greedy decode, tokens/s, --compare with llama.cpp",
        *_module_command("ovkit.model.cli"),
    ),
    "compare-model": Command(
        "node by node: ovkit and the real backend against llama.cpp CPU on the same tokens",
        *_module_command("ovkit.model.compare"),
    ),
    "bench": Command(
        "llama-bench's pp/tg table and each process's memory: ovkit against llama.cpp CPU, the real backend and OpenVINO GenAI",
        *_module_command("ovkit.model.bench"),
    ),
    "test-ops": Command(
        "run the op catalogue against ggml (test-backend-ops style): mode test | perf",
        _test_ops_args,
        _test_ops,
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that sub-command's arguments are built (its module is
    imported then), so ``ovkit list-devices`` never loads the test-ops or GGUF machinery."""
    parser = argparse.ArgumentParser(
        prog="ovkit", description="Explore OpenVINO devices as ggml-openvino sees them."
    )
    parser.add_argument("--list-devices", action="store_true", help="alias of the list-devices command")
    sub = parser.add_subparsers(dest="command")
    for name, entry in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=entry.help, description=entry.help)
        if command is None or name == command:
            entry.add_args(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-devices" in argv:
        argv = ["list-devices"] + [a for a in argv if a != "--list-devices"]
    parser = build_parser(next((a for a in argv if a in COMMANDS), None))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    with _stderr_logging():
        try:
            return COMMANDS[args.command].run(args)
        except (UsageError, RuntimeUnavailableError) as exc:
            print(f"ovkit: error: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:  # the runtime broke while being queried
            print(f"ovkit: error: OpenVINO runtime failed: {exc}".splitlines()[0], file=sys.stderr)
            return 2


if __name__ == "__main__":
    raise SystemExit(main())
