"""KAI's fair-share division (the `proportion` plugin), reproduced exactly.

Spec: kai-semantics.md 3.1 (per-queue helpers), 3.3 (division among siblings), 3.4
(hierarchy), 3.9 (time-based usage weights) and parity note 12.2.

Why exact arithmetic
--------------------
KAI computes in float64 and iterates Go maps, whose order changes from run to run. On
near-ties the rounding noise then decides whole units (e.g. T=21, k=0, A/B/C with
deserved/request/weight 1/7/1, 1/10/2, 1/28/7 gives 3/5/13 or 3/4/14 from one KAI run to the
next). Everything here is therefore computed with :class:`fractions.Fraction`: the result is
the one KAI would produce with perfect arithmetic, it is deterministic, and every KAI unit
test of the division passes with it. Floats are rejected on input so that no binary rounding
can slip in (``Fraction(0.1) != Fraction(1, 10)``); pass ints, Fractions, Decimals or strings.

Why the iteration order does not matter
---------------------------------------
KAI visits sibling queues in Go map order. Phase 1 gives each queue an amount that depends
only on that queue. In a Phase-2 round, the weights and the pot are frozen when the round
starts and a queue's gift depends only on its own state, so order could only matter through
the ``amount == 0`` early exit; but the shares of a round sum to exactly the pot and nobody
takes more than its share, so the amount reaches 0 only once every queue with a non-zero share
has been served: the queues left over would have received nothing anyway. Phase 3 is sorted.
We nevertheless iterate in a fixed order, oldest queue first (``creation`` key, then name),
so that the code is deterministic even for inputs that break this argument (negative usage).

Units: 1 "unit" (the granularity of over-quota flooring and of Phase-3 hand-outs) is one of
the resource's internal units: 1 GPU device, 1 CPU millicore, 1 byte of memory. The caller
converts queue quantities before building :class:`ShareQueue` (memory MB * 10**6, ``-1``
kept as unlimited) and aggregates ``request`` over each queue's descendants (spec 3.2.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Mapping, Sequence, Union

RESOURCES: tuple[str, ...] = ("cpu", "memory", "gpu")  # cpu millicores, memory bytes, gpu devices
UNLIMITED = -1
#: Dominant-share penalty per allocated unit of a resource whose allocatable share is 0
#: (KAI's ``noFairShareDrfMultiplier``, spec 3.1).
NO_FAIR_SHARE_DRF_MULTIPLIER = 1000

Number = Union[int, Fraction, Decimal, str]

_ZERO = Fraction(0)
_ONE = Fraction(1)


def to_fraction(value: Number) -> Fraction:
    """Convert *value* to an exact Fraction; floats are refused (see module docstring)."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise TypeError("booleans are not quantities")
    if isinstance(value, float):
        raise TypeError(f"float {value!r} given: fair share is computed exactly, pass int/Fraction/str")
    if isinstance(value, (int, Decimal, str)):
        return Fraction(value)
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as a quantity")


def _vector(values: Mapping[str, Number] | None) -> dict[str, Fraction]:
    """Exact per-resource vector; a resource that is not given is 0 (spec 12.1: omitted
    quota/limit/weight fields are zeros, never "unlimited")."""
    values = values or {}
    unknown = set(values) - set(RESOURCES)
    if unknown:
        raise ValueError(f"unknown resources {sorted(unknown)}; expected {RESOURCES}")
    return {r: to_fraction(values.get(r, 0)) for r in RESOURCES}


def _zeros() -> dict[str, Fraction]:
    return {r: _ZERO for r in RESOURCES}


@dataclass
class ShareQueue:
    """One queue's inputs to the division (spec 3.1), all resources in internal units.

    ``name`` must be the queue's metadata.name: KAI breaks Phase-3 ties by the queue UID,
    which is its metadata.name (not the display name). ``creation`` is any sortable key
    where smaller means older, e.g. ``(creation_timestamp_seconds, name)``.
    """

    name: str
    parent: str | None            # None (or "") = top level
    priority: int                 # spec.priority, default 100 (resolved by the caller)
    creation: tuple               # "older first" tie-break key
    deserved: dict[str, Fraction]  # quota, -1 = unlimited
    limit: dict[str, Fraction]    # maxAllowed, -1 = unlimited
    weight: dict[str, Fraction]   # overQuotaWeight
    request: dict[str, Fraction]  # demand of the queue and all its descendants
    usage: dict[str, Fraction] = field(default_factory=_zeros)  # normalised usage (3.9)

    def __post_init__(self) -> None:
        self.deserved = _vector(self.deserved)
        self.limit = _vector(self.limit)
        self.weight = _vector(self.weight)
        self.request = _vector(self.request)
        self.usage = _vector(self.usage)
        if self.parent == "":
            self.parent = None


# ---------------------------------------------------------------------------------------------
# Per-queue helpers (spec 3.1). They take plain values so the engine can use them with
# in-session `allocated` figures.
# ---------------------------------------------------------------------------------------------

def requestable_amount(request: Number, limit: Number) -> Fraction:
    """``request`` capped by ``maxAllowed`` (unless unlimited): what a queue can use at most."""
    request, limit = to_fraction(request), to_fraction(limit)
    return request if limit == UNLIMITED else min(limit, request)


def requestable(q: ShareQueue, r: str) -> Fraction:
    """Queue-level :func:`requestable_amount` for resource *r*."""
    return requestable_amount(q.request[r], q.limit[r])


def remaining_request(q: ShareQueue, r: str, fair_share: Number) -> Fraction:
    """How much more *q* could use given its current *fair_share*: max(0, requestable - fs)."""
    return max(_ZERO, requestable(q, r) - to_fraction(fair_share))


def is_satisfied(q: ShareQueue, r: str, fair_share: Number) -> bool:
    """KAI's ``isQueueSatisfied``: request reached, or a finite limit reached."""
    fs = to_fraction(fair_share)
    return q.request[r] <= fs or (q.limit[r] != UNLIMITED and q.limit[r] <= fs)


def allocatable(deserved: Number, limit: Number, fair_share: Number) -> Fraction:
    """What a queue may hold before it is over its share (spec 3.1); may be -1 (unlimited).

    deserved == -1 -> limit (itself possibly -1); otherwise max(deserved, fair_share),
    capped by the limit when the limit is finite.
    """
    deserved, limit, fair_share = to_fraction(deserved), to_fraction(limit), to_fraction(fair_share)
    if deserved == UNLIMITED:
        return limit
    share = max(deserved, fair_share)
    return share if limit == UNLIMITED else min(limit, share)


def saturation(allocated: Number, fair_share: Number) -> Fraction | float:
    """``allocated / fairShare`` (spec 3.1), used by reclaim and queue order.

    fair_share == 0: ``math.inf`` when something is allocated, else 0; fair_share == -1: 0.
    """
    allocated, fair_share = to_fraction(allocated), to_fraction(fair_share)
    if fair_share == UNLIMITED:
        return _ZERO
    if fair_share == 0:
        return math.inf if allocated > 0 else _ZERO
    return allocated / fair_share


def dominant_share(allocated: Mapping[str, Number], allocatable_share: Mapping[str, Number],
                   total: Mapping[str, Number]) -> Fraction:
    """KAI's ``GetDominantResourceShare`` (spec 3.1): max over resources of allocated/A.

    A is the allocatable share, replaced by the cluster ``total`` when unlimited (-1); when A
    is 0 the resource costs ``allocated * 1000`` instead of dividing by zero.
    """
    best = _ZERO
    for r in RESOURCES:
        alloc = to_fraction(allocated.get(r, 0))
        a = to_fraction(allocatable_share.get(r, 0))
        if a == UNLIMITED:
            a = to_fraction(total.get(r, 0))
        value = alloc * NO_FAIR_SHARE_DRF_MULTIPLIER if a == 0 else alloc / a
        best = max(best, value)
    return best


# ---------------------------------------------------------------------------------------------
# Division among siblings, one resource (spec 3.3)
# ---------------------------------------------------------------------------------------------

@dataclass
class DivisionResult:
    """Outcome of :func:`divide_detailed`.

    ``undistributed`` is what KAI's ``setResourceShare`` returns: the amount nobody could take
    (0 when the quotas alone used up or over-committed the amount).
    """

    shares: dict[str, Fraction]
    undistributed: Fraction


def _creation_order(queues: Sequence[ShareQueue]) -> list[ShareQueue]:
    return sorted(queues, key=lambda q: (q.creation, q.name))


class _Level:
    """Mutable state of one sibling set for one resource while it is being divided."""

    def __init__(self, siblings: Sequence[ShareQueue], r: str, k: Fraction) -> None:
        self.r = r
        self.k = k
        self.queues = _creation_order(siblings)
        self.fair: dict[str, Fraction] = {q.name: _ZERO for q in self.queues}

    def want(self, q: ShareQueue) -> Fraction:
        return remaining_request(q, self.r, self.fair[q.name])

    def satisfied(self, q: ShareQueue) -> bool:
        return is_satisfied(q, self.r, self.fair[q.name])

    # Phase 1 -------------------------------------------------------------------------------
    def give_quotas(self, amount: Fraction) -> Fraction:
        """Every queue gets min(quota, requestable); -1 quota means the whole amount. Not capped
        by *amount*: the result may be negative (quotas over-committed)."""
        remaining = amount
        for q in self.queues:
            d = q.deserved[self.r]
            give = min(amount if d == UNLIMITED else d, requestable(q, self.r))
            self.fair[q.name] += give
            remaining -= give
        return remaining

    # Phase 2 -------------------------------------------------------------------------------
    def share_weights(self, group: list[ShareQueue]) -> dict[str, Fraction]:
        """``max(0, nw + k*(nw - usage))`` per unsatisfied queue, nw = weight normalised over
        the unsatisfied queues (KAI ``calcShareWeights``); empty when nobody wants more."""
        total_weight = sum((q.weight[self.r] for q in group if self.want(q) > 0), _ZERO)
        if total_weight == 0:
            return {}
        weights = {}
        for q in group:
            if self.satisfied(q):
                continue
            nw = q.weight[self.r] / total_weight
            weights[q.name] = max(_ZERO, nw + self.k * (nw - q.usage[self.r]))
        return weights

    def split_by_weight(self, amount: Fraction, group: list[ShareQueue]
                        ) -> tuple[Fraction, dict[str, Fraction]]:
        """KAI ``divideUpToFairShare`` for one priority level: rounds of weighted shares of a
        pot frozen at the start of the round; a queue that cannot be satisfied by its share
        gets it floored to whole units and its fractional rest is remembered (overwriting an
        earlier one) for Phase 3. Another round runs only when someone needed less than its
        share. Returns the amount left and {queue: fractional leftover}."""
        leftover: dict[str, Fraction] = {}
        while True:
            weights = self.share_weights(group)
            weight_sum = sum(weights.values(), _ZERO)
            if weight_sum == 0:
                break
            pot = amount
            another_round = False
            for q in group:
                if amount == 0:
                    break
                if self.satisfied(q) or q.weight[self.r] == 0:
                    continue
                want = self.want(q)
                share = pot * (weights[q.name] / weight_sum)
                if want <= share:
                    give = want
                    leftover.pop(q.name, None)
                else:
                    give = Fraction(math.floor(share))  # floor(share) >= 0 since share >= 0
                    if share - give > 0:
                        leftover[q.name] = share - give
                if give == 0:
                    continue
                self.fair[q.name] += give
                amount -= give
                another_round = another_round or want < share
            if not another_round or amount == 0:
                break
        return amount, leftover

    # Phase 3 -------------------------------------------------------------------------------
    def hand_out_leftovers(self, amount: Fraction, leftover: dict[str, Fraction]) -> Fraction:
        """KAI ``divideRemainingResource``: min(1, amount) to each queue with a fractional
        leftover, largest leftover first, ties older queue then name. Request and limit are
        NOT re-checked (quirk: a share may end up < 1 unit above request/limit)."""
        by_name = {q.name: q for q in self.queues}
        order = sorted(leftover, key=lambda n: (-leftover[n], by_name[n].creation, n))
        for name in order:
            if amount == 0:
                break
            give = min(_ONE, amount)
            self.fair[name] += give
            amount -= give
        return amount


def divide_detailed(amount: Number, siblings: Sequence[ShareQueue], resource: str,
                    k: Number = 1, *, phase3_per_level: bool = False) -> DivisionResult:
    """Divide *amount* of *resource* among *siblings* (spec 3.3), returning shares and the rest.

    ``phase3_per_level=False`` (default) is the spec's order: Phase 2 for every priority level,
    then Phase 3 for every level. ``True`` reproduces another KAI revision that hands out a
    level's floor losses right after that level's Phase 2, before lower levels are served
    (kept for parity experiments; not what the spec's target commit does).
    """
    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}")
    names = [q.name for q in siblings]
    if len(set(names)) != len(names):
        raise ValueError("sibling queue names must be unique")
    amount, k = to_fraction(amount), to_fraction(k)
    level = _Level(siblings, resource, k)

    remaining = level.give_quotas(amount)
    if remaining <= 0:
        return DivisionResult(dict(level.fair), _ZERO)

    priorities = sorted({q.priority for q in level.queues}, reverse=True)
    groups = {p: [q for q in level.queues if q.priority == p] for p in priorities}
    if phase3_per_level:
        for p in priorities:
            if remaining <= 0:
                break
            remaining, leftover = level.split_by_weight(remaining, groups[p])
            if remaining > 0 and leftover:
                remaining = level.hand_out_leftovers(remaining, leftover)
    else:
        leftovers: dict[int, dict[str, Fraction]] = {}
        for p in priorities:
            remaining, leftovers[p] = level.split_by_weight(remaining, groups[p])
        for p in priorities:
            if remaining <= 0:
                break
            remaining = level.hand_out_leftovers(remaining, leftovers[p])
    return DivisionResult(dict(level.fair), remaining)


def divide(amount: Number, siblings: Sequence[ShareQueue], resource: str, k: Number = 1,
           *, phase3_per_level: bool = False) -> dict[str, Fraction]:
    """Fair share of each sibling (by name) for one resource at one level (spec 3.3)."""
    return divide_detailed(amount, siblings, resource, k, phase3_per_level=phase3_per_level).shares


# ---------------------------------------------------------------------------------------------
# Hierarchy (spec 3.4)
# ---------------------------------------------------------------------------------------------

def compute_fair_share(queues: Sequence[ShareQueue], total: Mapping[str, Number], k: Number = 1,
                       *, phase3_per_level: bool = False) -> dict[str, dict[str, Fraction]]:
    """fairShare of every queue (leaf or not) per resource; hierarchy per spec 3.4.

    Top-level queues (parent None) divide *total*; the children of a queue divide that
    queue's fair share, with their own quotas/limits/weights/priorities. A child's quota is
    not checked against its parent's share (children may over-commit, as in Phase 1).
    Queues that are not reachable from the top (parent missing, or a parent cycle) are never
    divided in KAI and get 0 here as well. *k* is KAI's ``kValue`` (3.9), default 1.
    """
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        raise ValueError("queue names must be unique")
    total_vec = _vector(total)
    k = to_fraction(k)
    children: dict[str | None, list[ShareQueue]] = {}
    for q in queues:
        children.setdefault(q.parent, []).append(q)

    result: dict[str, dict[str, Fraction]] = {q.name: _zeros() for q in queues}
    pending: list[tuple[dict[str, Fraction], list[ShareQueue]]] = [(total_vec, children.get(None, []))]
    while pending:
        available, siblings = pending.pop()
        if not siblings:
            continue
        for r in RESOURCES:
            shares = divide(available[r], siblings, r, k, phase3_per_level=phase3_per_level)
            for name, value in shares.items():
                result[name][r] = value
        for q in siblings:
            pending.append((result[q.name], children.get(q.name, [])))
    return result
