"""Queue capacity policy: limits and the non-preemptible quota, at every level (spec 3.6).

Shared by the greedy engine (per attempt and per task) and by the explanations of jobs left
pending; the CP-SAT model encodes the same rules as linear constraints in model/quota.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from kai_cp.jobs import JobInfo
from kai_cp.queues import RESOURCES, QueueInfo

_UNIT = {"gpu": ("GPUs", 1), "cpu": ("CPU cores", 1000), "memory": ("memory", 10 ** 9)}
_NP_UNIT = {"gpu": ("GPUs", "GPUs"), "cpu": ("CPU cores", "cores"), "memory": ("GB memory", "GB")}


def human(value: Fraction, r: str) -> str:
    """KAI's message rendering: cores and GB, 3 significant decimals, -1 as Unlimited (1.10)."""
    if value == -1:
        return "Unlimited"
    v = float(value / _UNIT[r][1])
    return f"{round(v, 3):g}"


def room(bound: Fraction, used: Fraction) -> int:
    """Whole units still allowed under a quota or limit (0 once it is reached or exceeded)."""
    return max(0, exact_room(bound, used))


def exact_room(bound: Fraction, used: Fraction) -> int:
    """Whole units left under a quota or limit, negative once it is exceeded (what evictions
    must return before anything more may be placed)."""
    return math.floor(bound - used)


@dataclass(frozen=True)
class CapacityFailure:
    reason: str            # OverLimit | NonPreemptibleOverQuota
    message: str
    queue: str
    resource: str


def check(job: JobInfo, req: dict[str, int | Fraction], path: Sequence[QueueInfo],
          allocated: dict[str, dict[str, Fraction]], allocated_np: dict[str, dict[str, Fraction]]) -> CapacityFailure | None:
    """First violation walking leaf -> root: limit first, then non-preemptible quota."""
    # Whole amounts as ints, and only the requested resources: this runs per task and per job
    # attempt, and Fraction arithmetic was most of its time (the same comparisons, exactly).
    req = {r: _whole(req[r]) for r in RESOURCES}
    asked = [r for r in RESOURCES if req[r] > 0]
    if not asked:
        return None
    for q in path:
        a = allocated[q.name]
        for r in asked:
            m = _whole(q.limit[r])
            if m != -1 and m < a[r] + req[r]:
                return over_limit(q, r, m, a[r], req[r])
        if not job.preemptible:
            anp = allocated_np[q.name]
            for r in asked:
                d = _whole(q.deserved[r])
                if d != -1 and d < anp[r] + req[r]:
                    return over_quota(q, r, d, anp[r], req[r])
    return None


def over_limit(q: QueueInfo, r: str, limit: int | Fraction, allocated: int | Fraction,
               req: int | Fraction) -> CapacityFailure:
    """KAI's OverLimit failure of queue `q` in resource `r`."""
    unit = _UNIT[r][0] if r != "memory" else "GB"
    what = {"gpu": "GPUs", "cpu": "CPU cores", "memory": "memory"}[r]
    return CapacityFailure(
        "OverLimit",
        f"{q.label} quota has reached the allowable limit of {what}. Limit is {human(limit, r)} {unit}, "
        f"currently {human(allocated, r)} {unit} allocated and workload requested {human(req, r)} {unit}",
        q.name, r)


def over_quota(q: QueueInfo, r: str, deserved: int | Fraction, allocated_np: int | Fraction,
               req: int | Fraction) -> CapacityFailure:
    """KAI's NonPreemptibleOverQuota failure of queue `q` in resource `r`."""
    what, unit = _NP_UNIT[r]
    return CapacityFailure(
        "NonPreemptibleOverQuota",
        f"Non-preemptible workload is over quota. Workload requested {human(req, r)} {what}, "
        f"but {q.label} quota is {human(deserved, r)} {unit}, while {human(allocated_np, r)} {unit} are already "
        f"allocated for non-preemptible pods. Use a preemptible workload to go over quota.",
        q.name, r)


def _whole(v: int | Fraction) -> int | Fraction:
    """`v` as an int when whole (int arithmetic and comparisons are exact and far cheaper)."""
    return v.numerator if type(v) is Fraction and v.denominator == 1 else v
