"""The queue capacity check (kai_cp/capacity.py) on whole amounts as ints, against the check
on Fractions throughout.

Why: `check` runs per task and per job attempt (over 10,000 per 10,000-node hint) and turns
whole amounts into ints, looking only at the requested resources, to skip Fraction arithmetic.
It must find the same first violation with the same message, whatever mix of ints, whole and
non-whole Fractions and -1 (unlimited) the queues, allocations and requests hold."""

from __future__ import annotations

import random
from fractions import Fraction

from kai_cp import capacity
from kai_cp.capacity import CapacityFailure, over_limit, over_quota
from kai_cp.jobs import JobInfo
from kai_cp.queues import RESOURCES, QueueInfo


def reference(job: JobInfo, req: dict, path: list[QueueInfo], allocated: dict, allocated_np: dict) -> CapacityFailure | None:
    """The plain definition: every resource, every value as a Fraction (the messages are the
    module's own builders: what is checked is the comparisons on ints)."""
    req = {r: Fraction(req[r]) for r in RESOURCES}
    for q in path:
        a = {r: Fraction(v) for r, v in allocated[q.name].items()}
        for r in RESOURCES:
            m = Fraction(q.limit[r])
            if m != -1 and req[r] > 0 and m < a[r] + req[r]:
                return over_limit(q, r, m, a[r], req[r])
        if not job.preemptible:
            anp = {r: Fraction(v) for r, v in allocated_np[q.name].items()}
            for r in RESOURCES:
                d = Fraction(q.deserved[r])
                if d != -1 and req[r] > 0 and d < anp[r] + req[r]:
                    return over_quota(q, r, d, anp[r], req[r])
    return None


SCALE = {"cpu": 1000, "memory": 10 ** 9, "gpu": 1}


def amount(rng: random.Random, r: str, bound: bool):
    """An int, a whole Fraction, a non-whole Fraction or (for a bound) -1, of the resource's scale."""
    kind = rng.randrange(5 if bound else 4)
    if kind == 4:
        return rng.choice([-1, Fraction(-1)])
    whole = rng.randrange(0, 8) * SCALE[r] + rng.choice([0, 0, 1, 333])
    if kind == 0:
        return whole
    if kind == 1:
        return Fraction(whole)
    return Fraction(whole * 7 + rng.randrange(1, 7), 7) if r == "gpu" else Fraction(whole, rng.choice([3, 9]))


def test_same_failure_as_on_fractions() -> None:
    seen: set = set()
    for seed in range(40):
        check_seed(random.Random(seed), seen)
    assert seen == {None, "OverLimit", "NonPreemptibleOverQuota"}     # every outcome exercised


def check_seed(rng: random.Random, seen: set) -> None:
    path = [QueueInfo(name=f"q{i}", display_name=rng.choice(["", f"Q{i}"]), parent=None, priority=0, creation=(),
                      deserved={r: amount(rng, r, True) for r in RESOURCES},
                      limit={r: amount(rng, r, True) for r in RESOURCES},
                      weight={r: Fraction(1) for r in RESOURCES}) for i in range(3)]
    for _ in range(200):
        job = JobInfo(name="j", namespace="ns", uid="u", queue="q0", priority=0,
                      preemptible=rng.random() < 0.5, creation=0.0, podsets={})
        req = {r: (0 if rng.random() < 0.3 else amount(rng, r, False)) for r in RESOURCES}
        allocated = {q.name: {r: amount(rng, r, False) for r in RESOURCES} for q in path}
        allocated_np = {q.name: {r: amount(rng, r, False) for r in RESOURCES} for q in path}
        want = reference(job, req, path, allocated, allocated_np)
        assert capacity.check(job, req, path, allocated, allocated_np) == want
        seen.add(want.reason if want else None)
