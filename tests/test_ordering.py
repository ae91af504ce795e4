"""KAI's order of work: job order (spec 4.2), task order (4.3), tasks to allocate (4.4),
PodSet order (4.6)."""

from __future__ import annotations

import random
from fractions import Fraction
from types import SimpleNamespace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clustergen import clusters
from kai_cp.ordering import job_order_key, request_floats, request_vector, tasks_to_allocate
from kai_cp.resources import PodRequest
from kai_cp.session import Session
from snapshot_builder import node, pod, podgroup, queue, snapshot, solve_doc, state_of

SG = "kai.scheduler/subgroup-name"


def _session(doc):
    st = state_of(doc)
    return st, Session.open(st)


def _names(tasks) -> list[str]:
    return [t.name for t in tasks]


def running(name, group, **kw):
    return pod(name, group, phase="Running", node="n1", **kw)


BIG = [node("n1", cpu="64", memory="256Gi")]


# ====================================================================== job order (4.2)


def _order(doc) -> list[str]:
    st, s = _session(doc)
    return [j.name for j in sorted(st.jobs.values(), key=lambda j: job_order_key(j, s))]


def test_higher_priority_first():
    doc = snapshot(BIG, None, [podgroup("low", priority_class="train", created=0),
                               podgroup("high", priority_class="inference", created=9),
                               podgroup("mid", priority_class="build", created=5)],
                   [pod("l", "low"), pod("h", "high"), pod("m", "mid")])
    assert _order(doc) == ["high", "mid", "low"]


def test_elastic_state_below_exactly_above():
    pgs = [podgroup("above", min_member=1, created=0), podgroup("exactly", min_member=1, created=1),
           podgroup("below", min_member=2, created=2)]
    pods = [running("a1", "above"), running("a2", "above"), pod("a3", "above"),
            running("e1", "exactly"), pod("e2", "exactly"),
            pod("b1", "below"), pod("b2", "below")]
    assert _order(snapshot(BIG, None, pgs, pods)) == ["below", "exactly", "above"]


def test_elastic_state_is_after_priority():
    pgs = [podgroup("above-high", min_member=1, priority_class="build"), podgroup("below-low", min_member=1)]
    pods = [running("a1", "above-high"), running("a2", "above-high"), pod("a3", "above-high"), pod("b1", "below-low")]
    assert _order(snapshot(BIG, None, pgs, pods)) == ["above-high", "below-low"]


def test_creation_then_name():
    pgs = [podgroup("b", created=5), podgroup("c", created=1), podgroup("a", created=5)]
    pods = [pod("pb", "b"), pod("pc", "c"), pod("pa", "a")]
    assert _order(snapshot(BIG, None, pgs, pods)) == ["c", "a", "b"]


def test_elastic_state_follows_in_session_placements():
    """After placing a job's gang in this cycle it is 'exactly' and goes after 'below' jobs."""
    pgs = [podgroup("first", min_member=1, created=0), podgroup("second", min_member=1, created=1)]
    pods = [pod("f1", "first"), pod("f2", "first"), pod("s1", "second")]
    st, s = _session(snapshot(BIG, None, pgs, pods))
    f, sec = st.jobs["first"], st.jobs["second"]
    assert job_order_key(f, s) < job_order_key(sec, s)
    s.added[("first", "default")] = 1
    assert job_order_key(sec, s) < job_order_key(f, s)


def test_job_order_decides_who_gets_a_scarce_node_end_to_end():
    pgs = [podgroup("old-low", created=0), podgroup("new-high", priority_class="build-preemptible", created=9)]
    doc = snapshot([node("n1", cpu="1")], None, pgs, [pod("o", "old-low"), pod("n", "new-high")])
    assert [b["pod"] for b in solve_doc(doc)["binds"]] == ["default/n"]
    pgs = [podgroup("zz", created=0), podgroup("aa", created=9)]
    doc = snapshot([node("n1", cpu="1")], None, pgs, [pod("z", "zz"), pod("a", "aa")])
    assert [b["pod"] for b in solve_doc(doc)["binds"]] == ["default/z"]
    pgs = [podgroup("zz", created=3), podgroup("aa", created=3)]
    doc = snapshot([node("n1", cpu="1")], None, pgs, [pod("z", "zz"), pod("a", "aa")])
    assert [b["pod"] for b in solve_doc(doc)["binds"]] == ["default/a"]


def test_elastic_jobs_grow_round_robin_end_to_end():
    """Every job first reaches its minimum; extra pods go to jobs exactly at the minimum first."""
    pgs = [podgroup("a", min_member=1, created=0), podgroup("b", min_member=1, created=1)]
    pods = [pod(f"a{i}", "a", cpu="1") for i in range(3)] + [pod(f"b{i}", "b", cpu="1") for i in range(3)]
    out = solve_doc(snapshot([node("n1", cpu="4")], None, pgs, pods))
    groups = sorted(b["podGroup"] for b in out["binds"])
    assert groups == ["a", "a", "b", "b"]


# ====================================================================== task order (4.3)


def _first_task(pods, min_member=1) -> str:
    st, s = _session(snapshot(BIG, None, [podgroup("j", min_member=min_member)], pods))
    return _names(tasks_to_allocate(st.jobs["j"], s))[0]


def test_task_order_kubeflow_master_and_launcher_first():
    pods = [pod("w", "j", created=0), pod("m", "j", created=5, labels={"training.kubeflow.org/job-role": "master"})]
    assert _first_task(pods) == "m"
    pods = [pod("w", "j", created=0), pod("l", "j", created=5, labels={"training.kubeflow.org/job-role": "launcher"})]
    assert _first_task(pods) == "l"
    pods = [pod("w", "j", created=0), pod("x", "j", created=5, labels={"training.kubeflow.org/job-role": "worker"})]
    assert _first_task(pods) == "w"


def test_task_order_ray_head_first():
    pods = [pod("w", "j", created=0, labels={"ray.io/node-type": "worker"}),
            pod("h", "j", created=5, labels={"ray.io/node-type": "head"})]
    assert _first_task(pods) == "h"


def test_task_order_kubeflow_before_ray():
    pods = [pod("h", "j", created=0, labels={"ray.io/node-type": "head"}),
            pod("m", "j", created=5, labels={"training.kubeflow.org/job-role": "master"})]
    assert _first_task(pods) == "m"


def test_task_order_task_priority_label():
    tp = "kai.scheduler/task-priority"
    pods = [pod("none", "j", created=0), pod("low", "j", created=1, labels={tp: "1"}),
            pod("high", "j", created=2, labels={tp: "10"}), pod("bad", "j", created=3, labels={tp: "x"})]
    st, s = _session(snapshot(BIG, None, [podgroup("j", min_member=4)], pods))
    assert _names(tasks_to_allocate(st.jobs["j"], s)) == ["high", "low", "bad", "none"]


def test_task_order_creation_then_uid():
    pods = [pod("late", "j", created=9, uid="a"), pod("early-b", "j", created=1, uid="b"),
            pod("early-a", "j", created=1, uid="a2")]
    st, s = _session(snapshot(BIG, None, [podgroup("j", min_member=3)], pods))
    assert _names(tasks_to_allocate(st.jobs["j"], s)) == ["early-a", "early-b", "late"]


# ====================================================================== tasks to allocate (4.4)


def _tta(pgs, pods) -> list[str]:
    st, s = _session(snapshot(BIG, None, pgs, pods))
    return _names(tasks_to_allocate(st.jobs["j"], s))


def test_gang_asks_for_exactly_its_missing_members():
    pods = [pod(f"p{i}", "j", created=i) for i in range(5)]
    assert _tta([podgroup("j", min_member=3)], pods) == ["p0", "p1", "p2"]


def test_partially_running_gang_asks_for_the_rest():
    pods = [running("r0", "j")] + [pod(f"p{i}", "j", created=i) for i in range(4)]
    assert _tta([podgroup("j", min_member=3)], pods) == ["p0", "p1"]


def test_satisfied_job_asks_for_one_more():
    pods = [running("r0", "j"), running("r1", "j")] + [pod(f"p{i}", "j", created=i) for i in range(3)]
    assert _tta([podgroup("j", min_member=2)], pods) == ["p0"]


def test_non_pending_tasks_are_never_candidates():
    pods = [pod("gated", "j", gates=["g"], created=0), pod("done", "j", phase="Succeeded", created=1),
            pod("p", "j", created=2)]
    assert _tta([podgroup("j", min_member=1)], pods) == ["p"]


def _sg(name, group="j", **kw):
    return pod(name, group, labels={SG: name.rstrip("0123456789")}, **kw)


def test_every_unsatisfied_podset_asks_for_its_missing_members():
    subs = [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 1}]
    pods = [_sg("a0", created=0), _sg("a1", created=1), _sg("a2", created=2), _sg("b0", created=3), _sg("b1", created=4)]
    assert sorted(_tta([podgroup("j", sub_groups=subs)], pods)) == ["a0", "a1", "b0"]


def test_only_unsatisfied_podsets_ask_while_one_is_below_minimum():
    subs = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 2}]
    pods = [_sg("a0", phase="Running", node="n1"), _sg("a1"), _sg("a2"), _sg("b0"), _sg("b1"), _sg("b2")]
    assert _tta([podgroup("j", sub_groups=subs)], pods) == ["b0", "b1"]


def test_satisfied_job_takes_one_from_the_podset_with_the_lowest_ratio():
    subs = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]
    pods = [_sg("a0", phase="Running", node="n1"), _sg("a1", phase="Running", node="n1"), _sg("a2"),
            _sg("b0", phase="Running", node="n1"), _sg("b1")]
    assert _tta([podgroup("j", sub_groups=subs)], pods) == ["b1"]


def test_satisfied_podsets_with_equal_ratio_go_by_name():
    subs = [{"name": "b", "minMember": 1}, {"name": "a", "minMember": 1}]
    pods = [_sg("a0", phase="Running", node="n1"), _sg("a1"), _sg("b0", phase="Running", node="n1"), _sg("b1")]
    assert _tta([podgroup("j", sub_groups=subs)], pods) == ["a1"]


def test_podset_without_candidates_does_not_consume_the_limit():
    subs = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]
    pods = [_sg("a0", phase="Running", node="n1"), _sg("b0", phase="Running", node="n1"), _sg("b1")]
    assert _tta([podgroup("j", sub_groups=subs)], pods) == ["b1"]


def test_placed_tasks_are_not_asked_for_again():
    pods = [pod(f"p{i}", "j", created=i) for i in range(4)]
    st, s = _session(snapshot(BIG, None, [podgroup("j", min_member=2)], pods))
    job = st.jobs["j"]
    first = tasks_to_allocate(job, s)
    assert _names(first) == ["p0", "p1"]
    for t in first:
        s.placements[t.key] = object()  # type: ignore[assignment]
    s.added[("j", "default")] = 2
    assert _names(tasks_to_allocate(job, s)) == ["p2"]


def test_request_vector_gpu_memory_counts_over_the_divisor_or_zero():
    pods = [pod("a", "j", cpu="2", annotations={"gpu-memory": "500"}), pod("b", "j", cpu="1", gpu=1)]
    st, s = _session(snapshot([node("n1", gpu=4)], None, [podgroup("j", min_member=2)], pods))
    tasks = tasks_to_allocate(st.jobs["j"], s)
    assert request_vector(tasks, 100)["gpu"] == 6          # 1 whole + 500/100
    assert request_vector(tasks, st.gpu_memory_divisor)["gpu"] == 1 + Fraction(500, 40000)
    assert request_vector(tasks, None)["gpu"] == 1
    assert request_vector(tasks, 100)["cpu"] == 3000


def test_gang_is_all_or_nothing_end_to_end():
    doc = snapshot([node("n1", cpu="2")], None, [podgroup("gang", min_member=3), podgroup("solo")],
                   [pod(f"g{i}", "gang", cpu="1") for i in range(3)] + [pod("s", "solo", cpu="1")])
    out = solve_doc(doc)
    assert [b["pod"] for b in out["binds"]] == ["default/s"]


# ============================================ the victim search's order of the jobs it simulates


def _pop_order(state, todo, others) -> list[str]:
    """The order in which `todo` jobs pop from KAI's job queue with `others` competing, each
    todo job taking one pod on the first node when it pops (as a simulation allocates them)."""
    from kai_cp.ordering import JobQueue
    s = Session.open(state)
    order = JobQueue(s, [*todo, *others], real=False)
    left, out = {j.name for j in todo}, []
    while order and left:
        job = order.pop()
        if job is None:
            break
        if job.name in left:
            left.discard(job.name)
            out.append(job.name)
            pending = [t for ps in job.podsets.values() for t in ps.pending]
            if pending and state.nodes:
                s.place(pending[0], 0, pipelined=False)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=clusters(max_jobs=10), data=st.data())
def test_victim_search_orders_its_jobs_the_same_without_the_jobs_it_leaves_out(doc, data):
    """kai_cp.actions.victims.order_relevant drops the pending jobs that cannot change where the
    preemptor and the victims pop (subtrees outside their queues' common ancestor, and its
    children holding none of them); the order of those jobs must be the one KAI's queue order
    gives with every pending job taking part."""
    from kai_cp.actions.victims import order_relevant
    st_ = state_of(doc)
    jobs = sorted((j for j in st_.jobs.values() if j.queue in st_.queues and st_.queues[j.queue].is_leaf),
                  key=lambda j: j.name)
    assume(len(jobs) >= 2)
    todo = data.draw(st.lists(st.sampled_from(jobs), min_size=1, max_size=3, unique_by=lambda j: j.name))
    others = [j for j in jobs if j not in todo]
    kept = order_relevant(st_, others, [j.queue for j in todo])
    assert set(j.name for j in kept) <= set(j.name for j in others)
    assert _pop_order(st_, todo, kept) == _pop_order(st_, todo, others)


def test_a_sibling_queues_job_changes_the_order_so_it_is_kept():
    """A's best job is o (queue a1, priority 150, 8 GPUs) while ta (a2) waits: A(o) loses to
    B(tb) on dominant share, so tb pops before ta; without o, A(ta) and B(tb) tie up to creation
    and ta pops first. o is in neither queue of the simulated jobs but must take part."""
    from kai_cp.actions.victims import order_relevant
    queues = [queue("A", created=0), queue("a1", "A", priority=150, created=1), queue("a2", "A", created=2),
              queue("B", created=3), queue("b1", "B", created=4)]
    doc = snapshot([node("n", cpu="64", memory="256Gi", gpu=8)], queues,
                   [podgroup("o", "a1", created=0), podgroup("ta", "a2", created=1), podgroup("tb", "b1", created=2)],
                   [pod("o-0", "o", gpu=8), pod("ta-0", "ta", gpu=1), pod("tb-0", "tb", gpu=1)])
    st_ = state_of(doc)
    todo, others = [st_.jobs["ta"], st_.jobs["tb"]], [st_.jobs["o"]]
    assert _pop_order(st_, todo, []) == ["ta", "tb"]
    assert _pop_order(st_, todo, others) == ["tb", "ta"]
    assert [j.name for j in order_relevant(st_, others, ["a2", "b1"])] == ["o"]


def test_request_floats_are_the_request_vectors_floats() -> None:
    """The queue order's init resources as floats straight from the sums: the same floats as the
    exact request vector's (memory past 2**53 bytes, GPU fractions and GPU memory included)."""
    rnd = random.Random(7)
    kinds = [lambda: PodRequest(cpu=rnd.randrange(10**6), memory=rnd.randrange(2**60), gpus=rnd.randrange(9)),
             lambda: PodRequest(cpu=1, memory=2**53 + 1, kind="Fraction", gpu_portion=Fraction(rnd.randrange(1, 100), 100),
                                devices=rnd.randrange(1, 3)),
             lambda: PodRequest(memory=3, kind="GpuMemory", gpu_memory=rnd.randrange(1, 80_000), devices=1)]
    for _ in range(200):
        tasks = [SimpleNamespace(request=rnd.choice(kinds)()) for _ in range(rnd.randrange(0, 6))]
        for divisor in (None, 100, 81_920):
            assert request_floats(tasks, divisor) == [float(v) for v in request_vector(tasks, divisor).values()]
