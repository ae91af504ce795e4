"""Cycle defaults shared by the CLI and the cycle.

A module of its own so that `kai-cp --help` (and argument errors) need no engine import:
the engine pulls in pydantic models, numpy and OR-Tools, most of a second at start-up."""

ENGINES = ("cp-sat", "greedy")
DEFAULT_TIME_LIMIT = 1.0
DEFAULT_SEED = 0
DEFAULT_WORKERS = 1   # measured (bench/): one deterministic search beats 2-4 interleaved workers on these models

# The solver's seed is a 32-bit signed integer (CP-SAT's random_seed): a larger one failed in
# every cycle's model, which then fell back to KAI's decisions.
SEED_MIN, SEED_MAX = -2**31, 2**31 - 1


def positive_seconds(text: str) -> float:
    """argparse type of a time limit: a finite number > 0 (inf ran a cycle, then failed to write
    its clock; 0 or less left no cycle at all)."""
    import argparse
    import math
    v = float(text)
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError("must be a finite number > 0")
    return v


def solver_seed(text: str) -> int:
    import argparse
    v = int(text)
    if not SEED_MIN <= v <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be a 32-bit integer ({SEED_MIN} to {SEED_MAX})")
    return v


def positive_int(text: str) -> int:
    import argparse
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v
