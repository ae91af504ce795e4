"""Plain reference for KAI's fair-share division: a literal transliteration of the pseudo-code
of kai-semantics.md 3.3 and 3.4, used as an oracle by the property tests.

It is deliberately written differently from kai_cp/fairshare.py: queues are mutable records
carrying their own ``fairShare``, the hierarchy is walked by recursion, and every loop that KAI
runs over a Go map is visited in an order chosen by a caller-supplied ``random.Random`` (Go map
order is random). Since the implementation uses one fixed order, agreement over random orders
also checks the claim that, in exact arithmetic, the order cannot change the result.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

RESOURCES = ("cpu", "memory", "gpu")


class RefQueue:
    """Mutable queue record: inputs copied from a ShareQueue-like object, plus fairShare."""

    def __init__(self, src) -> None:
        self.name = src.name
        self.parent = src.parent or None
        self.priority = src.priority
        self.creationTimestamp = src.creation
        self.deserved = {r: Fraction(src.deserved.get(r, 0)) for r in RESOURCES}
        self.maxAllowed = {r: Fraction(src.limit.get(r, 0)) for r in RESOURCES}
        self.overQuotaWeight = {r: Fraction(src.weight.get(r, 0)) for r in RESOURCES}
        self.request = {r: Fraction(src.request.get(r, 0)) for r in RESOURCES}
        self.usage = {r: Fraction(src.usage.get(r, 0)) for r in RESOURCES}
        self.fairShare = {r: Fraction(0) for r in RESOURCES}


def requestable(q: RefQueue, r: str) -> Fraction:
    if q.maxAllowed[r] == -1:
        return q.request[r]
    return min(q.maxAllowed[r], q.request[r])


def remaining_request(q: RefQueue, r: str) -> Fraction:
    return max(Fraction(0), requestable(q, r) - q.fairShare[r])


def satisfied(q: RefQueue, r: str) -> bool:
    return q.request[r] <= q.fairShare[r] or (q.maxAllowed[r] != -1 and q.maxAllowed[r] <= q.fairShare[r])


def map_order(items, rng: random.Random) -> list:
    """Go map iteration: some order, different each time."""
    items = list(items)
    rng.shuffle(items)
    return items


def divide(T: Fraction, siblings: list[RefQueue], r: str, k: Fraction, rng: random.Random) -> Fraction:
    """Spec 3.3 ``divide``; mutates fairShare; returns what was left undistributed."""
    # Phase 1 - deserved quota (no priority, no weights)
    remaining = T
    for q in map_order(siblings, rng):
        d = T if q.deserved[r] == -1 else q.deserved[r]
        give = min(d, requestable(q, r))
        q.fairShare[r] += give
        remaining -= give
    if remaining <= 0:
        return Fraction(0)

    # Phase 2 - over-quota, by queue priority (highest first)
    leftovers = {}
    for p in sorted({q.priority for q in siblings}, reverse=True):
        remaining, leftovers[p] = split_by_weight(remaining, [q for q in siblings if q.priority == p], r, k, rng)

    # Phase 3 - hand out what flooring kept back, one unit per queue
    for p in sorted(leftovers, reverse=True):
        if remaining <= 0:
            break
        for q in sorted(leftovers[p], key=lambda q: (-leftovers[p][q], q.creationTimestamp, q.name)):
            if remaining == 0:
                break
            g = min(Fraction(1), remaining)
            q.fairShare[r] += g
            remaining -= g
    return remaining


def split_by_weight(amount: Fraction, queues: list[RefQueue], r: str, k: Fraction, rng: random.Random):
    leftover = {}
    while True:
        W = sum((q.overQuotaWeight[r] for q in queues if remaining_request(q, r) > 0), Fraction(0))
        if W == 0:
            break
        w = {}
        for q in map_order(queues, rng):
            if satisfied(q, r):
                continue
            nw = q.overQuotaWeight[r] / W
            w[q] = max(Fraction(0), nw + k * (nw - q.usage[r]))
        S = sum(w.values(), Fraction(0))
        if S == 0:
            break
        pot = amount
        another_round = False
        for q in map_order(queues, rng):
            if amount == 0:
                break
            if satisfied(q, r) or q.overQuotaWeight[r] == 0:
                continue
            want = remaining_request(q, r)
            share = pot * (w[q] / S)
            if want <= share:
                give = want
                leftover.pop(q, None)
            else:
                give = math.floor(share) if math.floor(share) > 0 else 0
                if share - give > 0:
                    leftover[q] = share - give
            if give == 0:
                continue
            q.fairShare[r] += give
            amount -= give
            another_round |= (want < share)
        if not another_round or amount == 0:
            break
    return amount, leftover


def set_fair_share(total: dict, queues_at_level: list[RefQueue], all_queues: list[RefQueue],
                   k: Fraction, rng: random.Random) -> None:
    """Spec 3.4, recursively: a parent's fairShare is its children's T."""
    if not queues_at_level:
        return
    for r in RESOURCES:
        divide(Fraction(total.get(r, 0)), queues_at_level, r, k, rng)
    for q in map_order(queues_at_level, rng):
        children = [c for c in all_queues if c.parent == q.name]
        set_fair_share(q.fairShare, children, all_queues, k, rng)


def reference_fair_share(queues, total, k=1, seed: int = 0) -> dict[str, dict[str, Fraction]]:
    """Fair share of every queue, by name; queues not reachable from the top get 0."""
    rng = random.Random(seed)
    refs = [RefQueue(q) for q in queues]
    set_fair_share(dict(total), [q for q in refs if q.parent is None], refs, Fraction(k), rng)
    return {q.name: dict(q.fairShare) for q in refs}


def reference_divide(T, siblings, r: str, k=1, seed: int = 0) -> tuple[dict[str, Fraction], Fraction]:
    """One level, one resource: ({name: fairShare}, undistributed)."""
    rng = random.Random(seed)
    refs = [RefQueue(q) for q in siblings]
    rest = divide(Fraction(T), refs, r, Fraction(k), rng)
    return {q.name: q.fairShare[r] for q in refs}, rest
