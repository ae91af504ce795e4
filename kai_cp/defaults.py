"""Cycle defaults shared by the CLI and the cycle.

A module of its own so that `kai-cp --help` (and argument errors) need no engine import:
the engine pulls in pydantic models, numpy and OR-Tools, most of a second at start-up."""

ENGINES = ("cp-sat", "greedy")
DEFAULT_TIME_LIMIT = 1.0
DEFAULT_SEED = 0
DEFAULT_WORKERS = 1   # measured (bench/): one deterministic search beats 2-4 interleaved workers on these models
