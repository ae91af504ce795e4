"""bench/bench_search.py times KAI's actions at a fixed work bound and hashes their decisions.

Why: the hash is how a change that only speeds the actions up is shown to decide the same
(issue 9's notes compare two trees with it): it must be the same for the same snapshot and bound,
differ when the decisions do, and count what the actions decided."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from bench_search import NOW, measure  # noqa: E402
from kai_cp.actions.allocate import run_allocate  # noqa: E402
from kai_cp.actions.pipeline import EvictionSearch  # noqa: E402
from kai_cp.actions.preemptors import Budget  # noqa: E402
from kai_cp.cli import _load, _state  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = str(ROOT / "examples" / "showcase-cluster.zip")


def test_the_hash_is_the_decisions_and_the_counts_are_the_actions() -> None:
    full, again, none = measure(SNAPSHOT, 40_000, 1), measure(SNAPSHOT, 40_000, 1), measure(SNAPSHOT, 0, 1)
    assert full["hash"] == again["hash"] and (full["placed"], full["evicted"]) == (again["placed"], again["evicted"])
    assert none["evicted"] == 0 < full["evicted"] and none["hash"] != full["hash"]
    state = _state(_load(SNAPSHOT, views=True))
    greedy = run_allocate(state)
    budget = Budget(40_000)
    EvictionSearch(state, greedy.session, NOW).run(budget)
    assert (full["placed"], full["evicted"]) == (len(greedy.session.placements), len(greedy.session.evictions))
    assert full["spent"] == 40_000 - budget.left > 0


def test_the_command_prints_a_row_per_snapshot() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_search.py"), SNAPSHOT, "--work", "2000",
                          "--repeats", "1"], capture_output=True, text=True, check=True).stdout
    row = re.search(r"showcase-cluster\.zip\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([0-9a-f]{16})$", out, re.M)
    assert row is not None, out
    assert 0 < int(row.group(3)) <= 2000    # the search stopped within its bound (3,274 units unbounded)
