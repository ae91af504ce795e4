"""kai_cp.ordering.JobQueue against KAI's queue order worked out from scratch at every pop.

The queue keeps a lot between pops (each subtree's best job, each queue's rank while its
allocation holds, job order keys, init resources, tree paths) so that an eviction search can pop
tens of thousands of jobs per cycle. Whatever it keeps, each pop must return the job a full
evaluation of spec 3.8 returns: from the roots down, at each level the first child in creation
order that no later sibling beats (rank_less over queue_rank: rules 1-8 with the child's best
job), and in a leaf the first job in job order. Pops interleave with placements (allocations
change, so do ranks and elastic order keys) and re-pushes, as the allocate action does.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustergen import clusters, contended_clusters
from kai_cp.ordering import JobQueue, job_order_key, queue_rank, queue_tree, rank_less, request_vector, \
    tasks_to_allocate
from kai_cp.queues import RESOURCES
from kai_cp.session import Session
from snapshot_builder import state_of


class Reference:
    """Spec 3.8 evaluated afresh at every pop; leaves hold (order key when pushed, push count, job)."""

    def __init__(self, session: Session, jobs: list, real: bool = True):
        self.session, self.real = session, real
        self.views, self.children, self.roots = queue_tree(session.state)
        self.leaves: dict[str, list] = {}
        self.seq = 0
        for j in jobs:
            self.push(j)

    def push(self, job) -> None:
        self.seq += 1
        self.leaves.setdefault(job.queue, []).append((job_order_key(job, self.session), self.seq, job))

    def _init(self, job) -> list[float]:
        s = self.session
        req = request_vector(tasks_to_allocate(job, s, self.real), s.state.gpu_memory_divisor)
        return [float(req[r]) for r in RESOURCES]

    def best(self, queue: str):
        if not self.children[queue]:
            entries = self.leaves.get(queue)
            return min(entries, key=lambda e: e[:2])[2] if entries else None
        return self.pick(self.children[queue])

    def pick(self, names: list[str]):
        best_j = best_rank = None
        for name in names:
            j = self.best(name)
            if j is None:
                continue
            a = self.session.allocated[name]
            rank = queue_rank(self.views[name], [float(a["cpu"]), float(a["memory"]), float(a["gpu"])], self._init(j))
            if best_rank is None or rank_less(rank, best_rank):
                best_j, best_rank = j, rank
        return best_j

    def pop(self):
        job = self.pick(self.roots)
        if job is not None:
            entries = self.leaves[job.queue]
            entries.remove(min(entries, key=lambda e: e[:2]))
        return job


def run_both(doc: dict[str, Any], data, real: bool) -> None:
    st_ = state_of(doc)
    queues = st_.queues
    jobs = sorted((j for j in st_.jobs.values() if j.queue in queues and queues[j.queue].is_leaf and j.waiting),
                  key=lambda j: j.name)
    s = Session.open(st_)
    fast, ref = JobQueue(s, jobs, real=real), Reference(s, jobs, real=real)
    pops = 0
    out: list = []             # popped and not queued again: their placements may come any time
    while pops < 60:
        got, want = fast.pop(), ref.pop()
        assert (got and got.name) == (want and want.name), f"pop {pops}"
        if got is None:
            break
        pops += 1
        # Place some of its pending pods on any node (the order reads allocations, not fit),
        # then maybe queue it again, as allocate does for an elastic job.
        if place_some(s, got, data) and data.draw(st.booleans(), label="push again"):
            fast.push(got)
            ref.push(got)
        else:
            out.append(got)
        # An allocation changing away from the last pop's queues (another job placed later,
        # as an eviction scenario re-places its victims): ranks must follow it.
        if len(out) > 1 and data.draw(st.booleans(), label="place another"):
            place_some(s, data.draw(st.sampled_from(out[:-1]), label="which"), data)


def place_some(s: Session, job, data) -> bool:
    pending = [t for t in tasks_to_allocate(job, s) if t.key not in s.placements]
    if not pending or not s.state.nodes or not data.draw(st.booleans(), label="place"):
        return False
    for t in pending[:data.draw(st.integers(1, len(pending)), label="how many")]:
        s.place(t, data.draw(st.integers(0, len(s.state.nodes) - 1), label="node"), pipelined=False)
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=clusters(max_jobs=12), data=st.data(), real=st.booleans())
def test_every_pop_is_the_one_a_full_evaluation_gives(doc: dict[str, Any], data, real: bool) -> None:
    run_both(doc, data, real)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=contended_clusters(max_nodes=4, max_pending=6), data=st.data())
def test_every_pop_is_the_one_a_full_evaluation_gives_on_contended_clusters(doc: dict[str, Any], data) -> None:
    run_both(doc, data, True)



def test_a_queue_placed_into_after_its_pop_is_ranked_on_its_new_allocation() -> None:
    """Queues a and b deserve 8 GPUs each; the smaller dominant share with the head job goes
    first. b1 (2 GPUs) beats a1 (3), a1 beats b2 (4); then b1 is placed after the fact (as an
    eviction scenario re-places a victim popped earlier), so b with b2 stands at 6/8 and a2 (5/8)
    must pop before it. b's rank from before the placement (4/8) would have put b2 first."""
    from snapshot_builder import node, pod, podgroup, queue, resources, snapshot
    queues = [queue("a", gpu=resources(quota=8), created=0), queue("b", gpu=resources(quota=8), created=1)]
    groups = [podgroup(n, n[0], created=c) for c, n in enumerate(("a1", "a2", "b1", "b2"))]
    pods = [pod(f"{n}-0", n, gpu=g) for n, g in (("a1", 3), ("a2", 5), ("b1", 2), ("b2", 4))]
    st_ = state_of(snapshot([node("n", cpu="64", memory="256Gi", gpu=16)], queues, groups, pods))
    s = Session.open(st_)
    q = JobQueue(s, [st_.jobs[n] for n in ("a1", "a2", "b1", "b2")])
    assert [q.pop().name, q.pop().name] == ["b1", "a1"]
    s.place(st_.jobs["b1"].waiting[0], 0, pipelined=False)
    assert [q.pop().name, q.pop().name] == ["a2", "b2"]


def test_a_department_placed_into_outside_the_pops_path_picks_on_its_new_allocation() -> None:
    """Root queue a (priority 200) pops first; meanwhile department d works out its best job:
    b0 (2 of b's 8 GPUs) before c1 (3 of c's 8). Then 6 GPUs are placed in b (an eviction
    scenario re-placing a victim popped earlier): b0 would take b to 8 of 8, so c1 must pop
    next. d's best job kept from before the placement gave b0 (found by the generated test
    above on a department of two queues)."""
    from snapshot_builder import node, pod, podgroup, queue, resources, snapshot
    queues = [queue("a", gpu=resources(quota=8), priority=200, created=0), queue("d", priority=100, created=1),
              queue("b", "d", gpu=resources(quota=8), created=2), queue("c", "d", gpu=resources(quota=8), created=3)]
    groups = [podgroup("a1", "a", created=0), podgroup("b0", "b", created=1), podgroup("c1", "c", created=2),
              podgroup("bx", "b", created=3)]
    pods = [pod("a1-0", "a1", gpu=1), pod("b0-0", "b0", gpu=2), pod("c1-0", "c1", gpu=3), pod("bx-0", "bx", gpu=6)]
    st_ = state_of(snapshot([node("n", cpu="64", memory="256Gi", gpu=16)], queues, groups, pods))
    s = Session.open(st_)
    q = JobQueue(s, [st_.jobs[n] for n in ("a1", "b0", "c1")])
    ref = Reference(s, [st_.jobs[n] for n in ("a1", "b0", "c1")])
    assert q.pop().name == ref.pop().name == "a1"
    s.place(st_.jobs["bx"].waiting[0], 0, pipelined=False)
    assert ref.pop().name == "c1"
    assert q.pop().name == "c1"


def test_equal_shares_with_the_head_job_go_by_the_allocation_alone() -> None:
    """Rule 6 after a placement: a0 (2 GPUs) pops and is placed; a with a1 (2 GPUs) and b with b1
    (4 GPUs) then stand at 4/8 each with their head jobs, and b, which holds nothing, goes first.
    a's share of its allocation from before the placement (0) would have tied and let a, the
    older queue, go first."""
    from snapshot_builder import node, pod, podgroup, queue, resources, snapshot
    queues = [queue("a", gpu=resources(quota=8), created=0), queue("b", gpu=resources(quota=8), created=1)]
    groups = [podgroup(n, n[0], created=c) for c, n in enumerate(("a0", "a1", "b1"))]
    pods = [pod(f"{n}-0", n, gpu=g) for n, g in (("a0", 2), ("a1", 2), ("b1", 4))]
    st_ = state_of(snapshot([node("n", cpu="64", memory="256Gi", gpu=16)], queues, groups, pods))
    s = Session.open(st_)
    q = JobQueue(s, [st_.jobs[n] for n in ("a0", "a1", "b1")])
    assert q.pop().name == "a0"
    s.place(st_.jobs["a0"].waiting[0], 0, pipelined=False)
    assert [q.pop().name, q.pop().name] == ["b1", "a1"]
