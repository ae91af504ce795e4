"""bench/bench_decode.py reports what the cycle keeps back for decoding beside what decoding took.

Why: the reserve's constants (kai_cp/cycle.py) are set from its figures; a tool that printed a
reserve other than the cycle's, or counted other placements or victims, would set them wrong."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kai_cp.actions.pipeline import run_greedy
from kai_cp.cli import _load, _state
from kai_cp.cycle import DECODE_RESERVE, DECODE_SECONDS_PER_POD, DECODE_SECONDS_PER_VICTIM, VALIDATE_SECONDS_PER_POD

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "fragmented-cluster.zip"


def test_bench_decode_reports_the_cycles_reserve_and_what_it_counts() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_decode.py"), str(SNAPSHOT), "--time-limit", "2"],
                         capture_output=True, text=True, check=True).stdout
    row = re.search(r"^examples/fragmented-cluster\.zip\s+(\w+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                    r"\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", out, re.M)
    assert row is not None, out
    tail, decode, evict, short, check, after, reserve = (float(x) for x in row.groups()[1:8])
    placements, victims = int(row.group(9)), int(row.group(10))
    assert check > 0 and decode + evict + short + check + after <= tail + 1e-3
    assert reserve == pytest.approx(DECODE_RESERVE + (DECODE_SECONDS_PER_POD + VALIDATE_SECONDS_PER_POD) * placements
                                    + DECODE_SECONDS_PER_VICTIM * victims, abs=1e-3)
    state = _state(_load(str(SNAPSHOT), views=True))
    assert placements == len(run_greedy(state, time.time(), bounded=True).session.placements)
    assert re.search(r"^largest share of the reserve used: [\d.]+$", out, re.M), out
