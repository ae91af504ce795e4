"""A necessary condition for a consolidation scenario: its victims are moved, never evicted
(spec 6.3), so every victim must fit again, beside the preemptor's step, in what is free on the
scenario's feasible nodes plus what the victims free.

Why: the scenario filter (victims._ScenarioFilter) asks only whether the preemptor fits in the
freed room, which is the whole question for reclaim and preempt. In a full cluster consolidation's
scenarios mostly fail for the other reason: on bench_scale's contended 1,000-node cluster the
bounded search simulated 79 scenarios of 9 preemptors, each moving five 8-GPU pods of a pool with
no free node to make room for 2 GPUs (the pods could only go back where they were), ~2.5 ms and
60 units of the search's work bound each; the search spent its whole bound so and evicted nothing.

Three counts, each necessary alone, over each pod's admitted nodes (its request as a row, the
nodes its predicates and device type admit) among the nodes the simulation may use:
- per kind of victim, its pods against the copies of its request the room holds, node by node;
- all victims go to the nodes some victim is admitted on (`inside`), so what is left there for
  the preemptor is that room less every victim's request; the step's pods that the room outside
  cannot hold (copies node by node, per kind) must fit in what is left, resource by resource;
- inside, per size `g` of a victim, the pods asking for at least `g` whole GPUs against the
  nodes' room for them (`c // g` on a node with `c` free), less the room for one such pod that
  a smaller pod of the step takes wherever it fits (2 GPUs taken from a node with 8 free leave
  it no room for a pod of 8): the case above, where the volume alone leaves room.
What the room holds before any victim is counted once per session state and only over the
feasible nodes, and only once a scenario gets past the preemptor's own room; a scenario corrects
it on the few nodes its victims free. Affinity, ports, volumes and topology only narrow where
pods go, so leaving them out keeps the condition necessary: it never rejects a scenario whose
simulation would succeed (tests/test_repack_bound.py audits that on generated clusters). A
scenario with a shared-GPU pod (room per device) is not judged."""

from __future__ import annotations

from typing import Callable

import numpy as np

from kai_cp.jobs import TaskInfo
from kai_cp.session import Session

_MANY = 1 << 40        # copies of a request of nothing


class _Room:
    """The feasible nodes' room before any victim, the same while the session holds the same
    decisions (every gang step, and every preemptor that found nothing, starts from there);
    counted on first use (`ready`)."""
    __slots__ = ("free", "feasible", "nodes", "at", "room", "kinds", "memo")

    def __init__(self, free: np.ndarray, feasible: np.ndarray):
        self.free, self.feasible = free, feasible
        self.nodes: np.ndarray | None = None
        self.kinds: dict[tuple, Kind] = {}
        self.memo: dict[tuple, object] = {}

    def ready(self) -> None:
        if self.nodes is None:
            self.nodes = np.flatnonzero(self.feasible)                     # the feasible nodes
            self.at = np.full(len(self.feasible), -1, dtype=np.intp)       # node -> its position among them
            self.at[self.nodes] = np.arange(len(self.nodes))
            self.room = np.maximum(self.free[self.nodes], 0)

    def row(self, n: int) -> list[int]:
        return [max(x, 0) for x in self.free[n].tolist()]


class Kind:
    """Pods of one request and one set of admitted nodes (`mask`, over every node), with the
    copies of the request each feasible node's room holds before any victim."""
    __slots__ = ("vec", "need", "mask", "copies0", "total")

    def __init__(self, vec: np.ndarray, mask: np.ndarray, room: _Room):
        cols = np.flatnonzero(vec > 0)
        self.vec = vec.tolist()
        self.need = list(zip(cols.tolist(), vec[cols].tolist()))      # (column, amount) per resource asked
        self.mask = mask
        on = mask[room.nodes]
        self.copies0 = (np.where(on, (room.room[:, cols] // vec[cols]).min(axis=1), 0) if len(cols)
                        else np.where(on, _MANY, 0))
        self.total = int(self.copies0.sum())

    def copies(self, row: list[int]) -> int:
        return min((row[c] // q for c, q in self.need), default=_MANY)

    def before(self, pos: int) -> int:
        """Copies at a feasible node's position (-1: not feasible, none counted)."""
        return int(self.copies0[pos]) if pos >= 0 else 0


class RepackBound:
    def __init__(self, session: Session, free: np.ndarray, feasible: np.ndarray, step: list[tuple[TaskInfo, int]],
                 kind_of: Callable[[TaskInfo], tuple[np.ndarray, Callable[[], np.ndarray]]]):
        """`free`: per node its free capacity (idle and releasing) as the session holds it where
        the step starts; `feasible`: the nodes the simulation places on besides the victims' own
        (spec 6.2.1); `step`: the preemptor's pods, a pod of each kind and how many;
        `kind_of(pod)`: its request as a row and a function giving its admitted nodes."""
        # asked where the step starts, as JobSolver.free_now is (Session.decisions_derived); the
        # counts themselves only once a scenario gets this far (most never do: the preemptor's own
        # room rules them out first)
        self.room: _Room = session.decisions_derived(("repack room", bool(feasible.all())),
                                                     lambda: _Room(free, feasible))
        self.kind_of = kind_of
        self._step = step
        self.step: list[tuple[Kind, int]] | None = None
        self.popped: dict[str, tuple[TaskInfo, int, list[int] | None]] = {}
        # key -> (node, what evicting it frees there or None, its kind); None: not judged
        self.victims: dict[str, tuple[int, list[int] | None, Kind] | None] = {}

    def kind(self, t: TaskInfo) -> Kind:
        vec, mask_of = self.kind_of(t)
        key = (vec.tobytes(), t.predicate_key, t.request.kind)
        k = self.room.kinds.get(key)
        if k is None:
            k = self.room.kinds[key] = Kind(vec, mask_of(), self.room)
        return k

    def add(self, t: TaskInfo, node: int, freed: list[int] | None) -> None:
        """A victim popped: evicting it frees `freed` on `node` (None: nothing, it is releasing
        already)."""
        self.popped[t.key] = (t, node, freed)

    def _counted(self) -> None:
        """The room and the kinds of the step and of the victims popped so far."""
        if self.step is None:
            self.room.ready()
            self.step = [(self.kind(t), n) for t, n in self._step]
        for key, (t, node, freed) in self.popped.items():
            self.victims[key] = None if t.request.is_shared_gpu else (node, freed, self.kind(t))
        self.popped.clear()

    def admits(self, victims: list[TaskInfo]) -> bool:
        self._counted()
        scenario = self._scenario(victims)
        if scenario is None:
            return True
        rows, count, demand = scenario
        if not all(pods <= self._slots(kind, rows) for kind, pods in count.values()):
            return False
        if not self.step:
            return True
        kinds = tuple(sorted((k for k, _ in count.values()), key=id))
        inside, room_in, out = self._inside(kinds)
        room_in, out = list(room_in), list(out)
        at = self.room.at
        for n, row in rows.items():
            pos = int(at[n])
            if inside[n]:
                was = self.room.room[pos].tolist() if pos >= 0 else [0] * len(row)
                room_in = [a + b - c for a, b, c in zip(room_in, row, was)]
            else:
                for i, (k, _) in enumerate(self.step):
                    if k.mask[n]:
                        out[i] += k.copies(row) - k.before(pos)
        forced = [(k, pods - o) for (k, pods), o in zip(self.step, out) if pods > o]     # step pods inside
        if not forced:
            return True
        # what is left inside once every victim is there holds the forced pods, resource by resource
        need = [sum(n * k.vec[c] for k, n in forced) for c in range(len(demand))]
        if any(a > b - d for a, b, d in zip(need, room_in, demand)):
            return False
        return self._gpu_slots_hold(kinds, inside, rows, count, forced)

    def _scenario(self, victims: list[TaskInfo]) -> tuple[dict[int, list[int]], dict[int, list], list[int]] | None:
        """Per victim node its room once the victims are evicted, per kind its victims, and what
        they ask in all; None where it is not judged (a shared-GPU victim, or one never popped)."""
        rows: dict[int, list[int]] = {}
        count: dict[int, list] = {}            # id(kind) -> [kind, pods]
        demand = [0] * self.room.free.shape[1]
        for t in victims:
            v = self.victims.get(t.key)
            if v is None:
                return None
            node, f, kind = v
            row = rows.get(node)
            if row is None:
                row = rows[node] = self.room.row(node)
            if f is not None:
                rows[node] = [a + b for a, b in zip(row, f)]
            hit = count.get(id(kind))
            if hit is None:
                count[id(kind)] = [kind, 1]
            else:
                hit[1] += 1
            demand = [a + b for a, b in zip(demand, kind.vec)]
        return (rows, count, demand) if count else None

    def _slots(self, kind: Kind, rows: dict[int, list[int]]) -> int:
        """Copies of the kind the room holds node by node once the victims are evicted: a
        victim's node is feasible whatever it frees (6.2.1), before only if it was already."""
        slots, at = kind.total, self.room.at
        for n, row in rows.items():
            if kind.mask[n]:
                slots += kind.copies(row) - kind.before(int(at[n]))
        return slots

    def _inside(self, kinds: tuple[Kind, ...]) -> tuple[np.ndarray, list[int], list[int]]:
        """For a set of victim kinds: the nodes one of them is admitted on, the feasible ones'
        room, and per step kind the copies the feasible nodes outside hold."""
        memo = self.room.memo
        key = ("inside", tuple(map(id, kinds)), tuple(id(k) for k, _ in self.step))
        hit = memo.get(key)
        if hit is None:
            inside = kinds[0].mask.copy()
            for k in kinds[1:]:
                inside |= k.mask
            on = inside[self.room.nodes]
            hit = memo[key] = (inside, self.room.room[on].sum(axis=0).tolist(),
                               [int(k.copies0[~on].sum()) for k, _ in self.step])
        return hit

    def _gpu_slots_hold(self, kinds: tuple[Kind, ...], inside: np.ndarray, rows: dict[int, list[int]],
                        count: dict[int, list], forced: list[tuple[Kind, int]]) -> bool:
        """Per size `g` of a victim, the pods inside asking for at least `g` whole GPUs against
        the nodes' room for them (`c // g` on a node with `c` GPUs free), less what one forced pod
        asking for fewer takes wherever it can go: a pod there of 2 GPUs leaves a node with 8 free
        no room for a pod of 8."""
        at, room = self.room.at, self.room.room
        for g in sorted({k.vec[2] for k, _ in count.values() if k.vec[2] > 0}):
            pods = sum(n for k, n in count.values() if k.vec[2] >= g) + sum(n for k, n in forced if k.vec[2] >= g)
            slots = self._gpu_slots(kinds, inside, g)
            for n, row in rows.items():
                if inside[n]:
                    pos = int(at[n])
                    slots += row[2] // g - (int(room[pos, 2]) // g if pos >= 0 else 0)
            loss = max((self._least_loss(kinds, inside, k, g, rows) for k, _ in forced if 0 < k.vec[2] < g), default=0)
            if pods > slots - loss:
                return False
        return True

    def _gpu_slots(self, kinds: tuple[Kind, ...], inside: np.ndarray, g: int) -> int:
        memo = self.room.memo
        key = ("slots", tuple(map(id, kinds)), g)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = int((self.room.room[inside[self.room.nodes], 2] // g).sum())
        return hit

    def _least_loss(self, kinds: tuple[Kind, ...], inside: np.ndarray, k: Kind, g: int,
                    rows: dict[int, list[int]]) -> int:
        """The fewest room for pods of `g` GPUs one pod of `k` takes on a node inside where it fits;
        where it fits on none, more than any node has."""
        a = k.vec[2]
        memo = self.room.memo
        key = ("loss", tuple(map(id, kinds)), id(k), g)
        hit = memo.get(key)
        if hit is None:
            on = np.flatnonzero(inside[self.room.nodes] & (k.copies0 >= 1))
            c = self.room.room[on, 2]
            loss = c // g - (c - a) // g
            order = np.argsort(loss, kind="stable")
            hit = memo[key] = (loss[order].tolist(), self.room.nodes[on[order]].tolist())
        least = _MANY
        for value, n in zip(*hit):
            if n not in rows:          # a victim's node: its room is the scenario's (below)
                least = value
                break
        for n, row in rows.items():
            if inside[n] and k.mask[n] and k.copies(row) >= 1:
                least = min(least, row[2] // g - (row[2] - a) // g)
        return least
