"""The `kai-cp` command line (interfaces.md sections 2-4).

File-level problems end with exit code 2 and one message on stderr; nothing is written then.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import traceback
from typing import Sequence

from kai_cp.defaults import (DEFAULT_SEED, DEFAULT_TIME_LIMIT, DEFAULT_WORKERS, ENGINES, positive_int, positive_seconds,
                             solver_seed)
from kai_cp.errors import SnapshotError

# The engine (pydantic models, numpy, OR-Tools) is imported by the commands that use it, not
# here: `kai-cp --help` and argument errors answer without it.

# Set by `console_main`: a finished solve/simulate keeps its cluster alive and the process
# exits without freeing it (for 100,000 pods, ~1 s of deallocation the OS does for free).
_FAST_EXIT = False
_KEEP: list = []


def _instant(text: str) -> float:
    """An RFC 3339 time with its offset (2025-01-01T12:00:00Z) or epoch seconds."""
    from datetime import datetime
    try:
        v = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"not a finite number of epoch seconds: {text!r}")
        return v
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        ts = None
    if ts is None or ts.tzinfo is None:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time with offset (e.g. 2025-01-01T12:00:00Z): {text!r}")
    return ts.timestamp()


def _solver_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default="cp-sat", help="decision engine (default cp-sat)")
    p.add_argument("--time-limit", type=positive_seconds, default=DEFAULT_TIME_LIMIT,
                   help=f"seconds for the whole cycle; the solver gets what building left (default {DEFAULT_TIME_LIMIT})")
    p.add_argument("--seed", type=solver_seed, default=DEFAULT_SEED, help=f"solver random seed (default {DEFAULT_SEED})")
    p.add_argument("--workers", type=positive_int, default=DEFAULT_WORKERS,
                   help=f"solver worker threads (default {DEFAULT_WORKERS}); fixed so decisions are reproducible")
    p.add_argument("-v", "--verbose", action="store_true", help="solver log and timings on stderr")
    p.add_argument("--now", type=_instant, default=None, metavar="TIME",
                   help="the cycle's clock for time-based rules (stale-gang grace period), RFC 3339 or epoch "
                        "seconds, to replay a snapshot as of then; simulate advances it by schedulePeriod "
                        "(default 1s) per cycle (default: the current time)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kai-cp", description="KAI-Scheduler compatible scheduler: one CP-SAT model per cycle")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("solve", help="run one scheduling cycle on a snapshot and print its decisions")
    s.add_argument("snapshot", help="KAI snapshot: the ZIP served at /get-snapshot, or its snapshot.json; - reads "
                                    "standard input")
    s.add_argument("-o", "--output", help="write the decisions here instead of stdout (- is stdout)")
    _solver_options(s)
    m = sub.add_parser("simulate", help="run several cycles, applying each cycle's decisions")
    m.add_argument("snapshot", help="as for solve")
    m.add_argument("--cycles", type=positive_int, required=True)
    m.add_argument("--output", required=True, help="RESULT.json: final pods and every cycle's decisions")
    m.add_argument("--snapshot-out", help="also write the final cluster state as a snapshot")
    m.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr for runs longer than 2 s (auto: when stderr is a terminal)")
    _solver_options(m)
    # `kai-cp run` has its own parser (integration/run.py): it must accept KAI's flags and warn on unknown ones.
    sub.add_parser("run", add_help=False, help="schedule a live cluster in place of KAI's scheduler (kai-cp run --help)")
    return ap


def _settings(args: argparse.Namespace):
    from kai_cp.cycle import CycleSettings
    return CycleSettings(engine=args.engine, time_limit=args.time_limit, seed=args.seed, workers=args.workers,
                         log=args.verbose, now=args.now)


def _load(path: str, *, views: bool = False):
    """`views`: objects as lean views (kai_cp/podview.py, kai_cp/objectviews.py), for a run
    that never writes the snapshot back (solve); simulate writes snapshots and keeps full models."""
    from kai_cp.loader import load_snapshot
    loaded = load_snapshot(path, views=views)
    # The snapshot's objects live for the whole run and hold no garbage cycles: keep the
    # collector from rescanning them (a full scan of a 100k-pod snapshot costs ~1.5 s).
    gc.freeze()
    return loaded


def _state(loaded):
    """The cycle's cluster state. Like the snapshot it lives for the whole (one-cycle) run: a big
    one is frozen too, so the collector does not rescan it (at 10,000 nodes ~0.2 s for the
    first pass after the build alone)."""
    from kai_cp.gcpause import gc_paused
    from kai_cp.loader import _FREEZE_MIN_OBJECTS
    from kai_cp.state import build_cluster_state
    with gc_paused(freeze_min_objects=_FREEZE_MIN_OBJECTS):
        return build_cluster_state(loaded)


class OutputError(Exception):
    """An output path that cannot be written: said before any work is done."""


def _check_output(path: str | None, flag: str) -> None:
    """Refuse an output path that cannot be written before the cycles run, so a long simulation
    is not lost to a typo, and a command with two outputs never writes one of them alone (the
    write can still fail later, on a full disk: it then leaves no file, loader.write_json_atomic)."""
    if path is None or path == "-":
        return
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise OutputError(f"{flag} {path}: is a folder; give a file name")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise OutputError(f"{flag} {path}: folder {os.path.dirname(path) or folder} does not exist")
    if not os.path.exists(target) and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: folder {os.path.dirname(path) or folder} is not writable")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise OutputError(f"{flag} {path}: file is not writable")


def _solve(args: argparse.Namespace) -> int:
    from kai_cp.cycle import run_cycle
    from kai_cp.loader import write_json_atomic
    _check_output(args.output, "-o")
    loaded = _load(args.snapshot, views=True)
    state = _state(loaded)
    result = run_cycle(state, _settings(args))
    if _FAST_EXIT:
        _KEEP.append((loaded, state, result))
    if args.verbose:
        print(result.solver_log, file=sys.stderr)
    doc = result.to_json()
    if args.output and args.output != "-":
        write_json_atomic(args.output, doc)
    else:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from kai_cp.loader import write_json_atomic
    from kai_cp.simulate import simulate
    _check_output(args.output, "--output")
    _check_output(args.snapshot_out, "--snapshot-out")
    if args.output == "-" and args.snapshot_out == "-":
        raise OutputError("--output and --snapshot-out cannot both be standard output")
    loaded = _load(args.snapshot)
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    result, final = simulate(loaded, args.cycles, _settings(args), progress=show)
    if _FAST_EXIT:
        _KEEP.append((loaded, result, final))
    for path, doc in ((args.output, result), (args.snapshot_out, final)):
        if path == "-":
            json.dump(doc, sys.stdout, indent=2)
            sys.stdout.write("\n")
        elif path:
            write_json_atomic(path, doc)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        from integration.run import main as run_main   # lazy: integration builds on kai_cp, never the reverse
        return run_main(argv[1:])
    args = parser().parse_args(argv)
    try:
        return _solve(args) if args.command == "solve" else _simulate(args)
    except SnapshotError as e:
        print(f"kai-cp: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of stdout left (`kai-cp solve X | head`): quiet, as a tool killed by SIGPIPE
        # is; stdout is pointed at the null device so the interpreter's last flush fails no more
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 128 + 13
    except OutputError as e:
        print(f"kai-cp: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        print(f"kai-cp: error: cannot write output{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: say so in one line; details only with -v
        if getattr(args, "verbose", False):
            traceback.print_exc()
        print(f"kai-cp: internal error: {type(e).__name__}: {e} (run with -v for details)", file=sys.stderr)
        return 1


def console_main() -> None:
    """The `kai-cp` script: `main`, then an exit that skips freeing a finished command's
    cluster (output is flushed first; nothing else is pending at that point)."""
    global _FAST_EXIT
    _FAST_EXIT = True
    from kai_cp.pydantic_plugins import skip_plugin_search
    skip_plugin_search()
    code = main()
    if _KEEP:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):   # a closed pipe: main already reported what it could
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console_main()
