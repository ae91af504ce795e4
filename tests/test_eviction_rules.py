"""The queue rules reclaim and preempt validate victims with (spec 3.6, 3.7, 6.7).

Why: these rules decide which running pods a user loses. Each test builds a small cluster,
sets the queue numbers the rule reads, and checks the decision on both sides of the boundary,
so that a rule implemented the "obvious" way instead of KAI's way (subtract before testing,
one chunk per job, leaf instead of sibling level, > instead of >=, preempt walk instead of
LCA) fails here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_cp.actions.min_runtime import (elastic_ok, filter_victim, is_elastic, preempt_min_runtime, protected,
                                        reclaim_min_runtime)
from kai_cp.actions.reclaim_rules import (ReclaimValidator, can_reclaim, leveled_queues, moved_victims,
                                          preempt_quota_ok, vector_le)
from kai_cp.config import parse_config
from kai_cp.ordering import request_vector
from kai_cp.session import Session
from snapshot_builder import (DEFAULT_CONFIG, DEFAULT_PARAMS, node, pod, podgroup, queue, resources, snapshot,
                              state_of, ts)

START = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()      # ts(0)


# ------------------------------------------------------------------------------------------------
# builders
# ------------------------------------------------------------------------------------------------

def gq(name: str, parent: str | None = None, quota=0, limit=-1, *, preempt: str | None = None,
       reclaim: str | None = None) -> dict:
    """A queue whose GPU numbers matter; CPU and memory are unlimited and neutral."""
    q = queue(name, parent, gpu=resources(quota, limit, 1))
    if preempt:
        q["spec"]["preemptMinRuntime"] = preempt
    if reclaim:
        q["spec"]["reclaimMinRuntime"] = reclaim
    return q


def job(name: str, q: str, gpus: list[int], *, running: bool = True, min_member: int | None = None,
        priority_class: str = "train", started: str | None = None, sub_groups: list[tuple[str, int, int]] | None = None,
        preemptibility: str | None = None) -> tuple[dict, list[dict]]:
    """A PodGroup and its pods (one per entry of `gpus`), running on n1 or pending.
    `sub_groups`: (name, minMember, pods) per PodSet; then `gpus` gives each pod's GPUs in order."""
    subs = [{"name": n, "minMember": m} for n, m, _ in sub_groups] if sub_groups else None
    pg = podgroup(name, q, min_member if min_member is not None else len(gpus), priority_class=priority_class,
                  sub_groups=subs, preemptibility=preemptibility)
    if started:
        pg["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": started}
    names = [n for n, _, k in sub_groups for _ in range(k)] if sub_groups else [None] * len(gpus)
    pods = [pod(f"{name}-{i}", name, cpu="100m", memory="100Mi", gpu=g or None,
                phase="Running" if running else "Pending", node="n1" if running else None,
                labels={"kai.scheduler/subgroup-name": sg} if sg else None)
            for i, (g, sg) in enumerate(zip(gpus, names))]
    return pg, pods


def world(queues: list[dict], jobs: list[tuple[dict, list[dict]]], *, config: dict | None = None,
          params: dict | str = "default", gpus: int = 32):
    doc = snapshot([node("n1", cpu="64", memory="256Gi", gpu=gpus)], queues, [pg for pg, _ in jobs],
                   [p for _, pods in jobs for p in pods], config=config, params=params)
    st_ = state_of(doc)
    return st_, Session.open(st_)


def share(state, **gpu: int) -> None:
    """Pin the GPU fair share of queues (the rules read it; how it was divided is tested elsewhere)."""
    for name, value in gpu.items():
        state.queues[name].fair_share["gpu"] = Fraction(value)


def gpus_req(n: int) -> dict[str, Fraction]:
    return {"cpu": Fraction(100), "memory": Fraction(100 * 2 ** 20), "gpu": Fraction(n)}


def victims(state, *names: str):
    return [(state.jobs[n], list(state.jobs[n].tasks)) for n in names]


def config_with(**plugin_args: dict) -> dict:
    plugins = [dict(p) for p in DEFAULT_CONFIG["tiers"][0]["plugins"]]
    conf = {"actions": DEFAULT_CONFIG["actions"], "tiers": [{"plugins": plugins}]}
    for name, args in plugin_args.items():
        conf["tiers"][0]["plugins"].append({"name": name, "arguments": args})
    return conf


def over_share_world(n_victim_jobs: int = 6, reclaimer_quota: int = 0, **kw):
    """B runs `n` one-GPU jobs with a fair share of 4; A (quota `reclaimer_quota`) wants 2."""
    jobs = [job(f"b{i}", "B", [1]) for i in range(n_victim_jobs)] + [job("a", "A", [1, 1], running=False)]
    st_, ses = world([gq("A", quota=reclaimer_quota), gq("B", quota=0)], jobs, **kw)
    share(st_, A=4, B=4)
    return st_, ses


# ------------------------------------------------------------------------------------------------
# gate 1 and the preempt pre-check
# ------------------------------------------------------------------------------------------------

def test_vector_le_treats_minus_one_as_infinity():
    one = {"cpu": Fraction(1), "memory": Fraction(1), "gpu": Fraction(1)}
    assert vector_le(one, {"cpu": Fraction(-1), "memory": Fraction(1), "gpu": Fraction(1)})
    assert not vector_le({**one, "gpu": Fraction(-1)}, one)
    assert not vector_le({**one, "memory": Fraction(2)}, one)        # one resource over is enough


def test_gate1_allocated_plus_request_within_fair_share_in_every_resource():
    st_, ses = world([gq("A"), gq("B")], [job("run", "A", [2]), job("a", "A", [1, 1], running=False)])
    share(st_, A=4)
    a = st_.jobs["a"]
    assert can_reclaim(st_, ses, a, request_vector(a.waiting, st_.gpu_memory_divisor))          # 2 + 2 <= 4
    assert not can_reclaim(st_, ses, a, gpus_req(3))                    # 2 + 3 > 4
    st_.queues["A"].fair_share["cpu"] = Fraction(150)                   # gpu fine, cpu 100 + 100 > 150
    assert not can_reclaim(st_, ses, a, gpus_req(1))


def test_gate1_uses_the_sessions_current_allocation():
    st_, ses = world([gq("A"), gq("B")], [job("run", "A", [2]), job("a", "A", [1, 1], running=False)])
    share(st_, A=4)
    assert not can_reclaim(st_, ses, st_.jobs["a"], gpus_req(4))        # 2 + 4 > 4
    ses.evict(st_.jobs["run"].tasks[0], "reclaim", None, "")
    assert can_reclaim(st_, ses, st_.jobs["a"], gpus_req(4))            # 0 + 4 <= 4 after the eviction


def test_gate1_non_preemptible_job_must_also_fit_quota():
    jobs = [job("np", "A", [1], priority_class="build"), job("a", "A", [1], running=False, priority_class="build"),
            job("p", "A", [1], running=False)]
    st_, ses = world([gq("A", quota=2), gq("B")], jobs)
    share(st_, A=6)
    assert not st_.jobs["a"].preemptible and st_.jobs["p"].preemptible
    assert ses.allocated_np["A"]["gpu"] == 1
    assert can_reclaim(st_, ses, st_.jobs["a"], gpus_req(1))            # np 1 + 1 <= quota 2
    assert not can_reclaim(st_, ses, st_.jobs["a"], gpus_req(2))        # np 1 + 2 > 2 (fair share would allow)
    assert can_reclaim(st_, ses, st_.jobs["p"], gpus_req(2))            # preemptible: quota not asked


def test_gate1_looks_at_the_leaf_queue_only():
    jobs = [job("sib", "A2", [4]), job("a", "A", [1], running=False)]
    st_, ses = world([queue("D"), gq("A", "D"), gq("A2", "D")], jobs)
    share(st_, D=2, A=2)                                                # D is over its share, A is not
    assert can_reclaim(st_, ses, st_.jobs["a"], gpus_req(1))


def test_preempt_quota_precheck_walks_every_ancestor_for_non_preemptible_jobs():
    jobs = [job("np", "A2", [2], priority_class="build"), job("a", "A", [1], running=False, priority_class="build"),
            job("p", "A", [1], running=False)]
    st_, ses = world([gq("D", quota=3), gq("A", "D", quota=4), gq("A2", "D", quota=4)], jobs)
    a, p = st_.jobs["a"], st_.jobs["p"]
    assert preempt_quota_ok(st_, ses, a, gpus_req(1))                   # D: 2 + 1 <= 3
    assert not preempt_quota_ok(st_, ses, a, gpus_req(2))               # A fits (2 <= 4), D does not (4 > 3)
    assert preempt_quota_ok(st_, ses, p, gpus_req(10))                  # preemptible preemptors always pass
    st_.queues["D"].deserved["gpu"] = Fraction(-1)
    assert preempt_quota_ok(st_, ses, a, gpus_req(4))                   # -1 quota is unlimited
    assert not preempt_quota_ok(st_, ses, a, gpus_req(5))               # A: 0 + 5 > 4


def test_preempt_quota_precheck_ignores_resources_not_requested():
    jobs = [job("a", "A", [0], running=False, priority_class="build")]
    st_, ses = world([gq("A", quota=0)], jobs)
    req = {"cpu": Fraction(100), "memory": Fraction(1), "gpu": Fraction(0)}
    assert preempt_quota_ok(st_, ses, st_.jobs["a"], req)               # gpu quota 0, but no gpu asked
    assert not preempt_quota_ok(st_, ses, st_.jobs["a"], {**req, "gpu": Fraction(1, 2)})


# ------------------------------------------------------------------------------------------------
# gate 2
# ------------------------------------------------------------------------------------------------

def test_gate2_fair_share_reclaim_stops_at_the_victims_allocatable_share():
    st_, ses = over_share_world()
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is None       # 6 > 4, 5 > 4
    reason = v.check(victims(st_, "b0", "b1", "b2"), set(), gpus_req(2))       # third chunk tested at 4
    assert reason is not None and "queue B" in reason and "fair share" in reason


def test_gate2_allocatable_share_is_quota_when_above_fair_share_and_capped_by_limit():
    st_, ses = over_share_world()
    st_.queues["B"].deserved["gpu"] = Fraction(5)                      # allocatable = max(5, 4) = 5
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0"), set(), gpus_req(2)) is None
    assert v.check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is not None
    st_.queues["B"].limit["gpu"] = Fraction(3)                         # allocatable = min(3, 5) = 3
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0", "b1", "b2"), set(), gpus_req(2)) is None


def test_gate2_quota_reclaim_needs_the_reclaimer_within_quota_and_the_victim_over_quota():
    st_, ses = over_share_world(reclaimer_quota=2)
    share(st_, B=6)                                                     # B is not above its fair share
    st_.queues["B"].deserved["gpu"] = Fraction(4)
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is None       # A 0 + 2 <= 2; B 6, 5 > 4
    assert v.check(victims(st_, "b0", "b1", "b2"), set(), gpus_req(2)) is not None   # third tested at 4
    reason = v.check(victims(st_, "b0"), set(), gpus_req(3))            # A 0 + 3 > quota 2
    assert reason is not None and "queue B" in reason and "queue A" in reason


def test_gate2_tests_before_subtracting_so_the_last_chunk_may_go_below_share():
    jobs = [job("big", "B", [3]), job("small", "B", [2]), job("a", "A", [1, 1, 1], running=False)]
    st_, ses = world([gq("A"), gq("B")], jobs)
    share(st_, A=4, B=4)
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "big"), set(), gpus_req(3)) is None            # 5 > 4, leaves B at 2
    assert v.check(victims(st_, "big", "small"), set(), gpus_req(3)) is not None   # then 2 <= 4


def test_gate2_elastic_surplus_pods_are_chunks_of_their_own_and_the_core_is_one_chunk():
    jobs = [job("elastic", "B", [1, 1, 1, 1], min_member=2), job("gang", "C", [1, 1, 1, 1]),
            job("a", "A", [1, 1, 1, 1], running=False)]
    st_, ses = world([gq("A"), gq("B"), gq("C")], jobs)
    share(st_, A=8, B=2, C=2)
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert [c["gpu"] for c in v.chunks(st_.jobs["elastic"], st_.jobs["elastic"].tasks, set())] == [1, 1, 2]
    assert [c["gpu"] for c in v.chunks(st_.jobs["gang"], st_.jobs["gang"].tasks, set())] == [4]
    # elastic: 4 > 2, 3 > 2, then the core chunk at 2 <= 2 fails; the gang is one chunk tested at 4.
    assert v.check(victims(st_, "elastic"), set(), gpus_req(4)) is not None
    assert v.check(victims(st_, "gang"), set(), gpus_req(4)) is None
    # two victim tasks alone are the first minAvailable of the list: one core chunk, not two elastic ones
    assert [c["gpu"] for c in v.chunks(st_.jobs["elastic"], st_.jobs["elastic"].tasks[2:], set())] == [2]


def test_gate2_chunks_are_split_per_podset():
    subs = [("w", 1, 2), ("x", 1, 2)]
    jobs = [job("multi", "B", [1, 2, 3, 4], min_member=None, sub_groups=subs), job("a", "A", [1], running=False)]
    st_, ses = world([gq("A"), gq("B")], jobs)
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    multi = st_.jobs["multi"]
    assert {ps.name: len(ps.tasks) for ps in multi.podsets.values()} == {"w": 2, "x": 2}
    # per PodSet the first task is core: w-0 (1) + x-2 (3) = 4; surplus w-1 (2) and x-3 (4) alone.
    assert [c["gpu"] for c in v.chunks(multi, multi.tasks, set())] == [2, 4, 4]


def test_gate2_moved_victims_are_not_reclaimed_with_allow_consolidating_reclaim():
    st_, ses = over_share_world()
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    three = victims(st_, "b0", "b1", "b2")
    assert v.check(three, set(), gpus_req(2)) is not None
    assert v.check(three, {st_.jobs["b0"].tasks[0].key}, gpus_req(2)) is None   # only 2 chunks count
    for _, tasks in three:                                              # the simulation: b0 moves to n1
        for t in tasks:
            ses.evict(t, "reclaim", "a", "")
    ses.place(st_.jobs["b0"].tasks[0], 0, pipelined=True)
    assert moved_victims(ses, three) == {st_.jobs["b0"].tasks[0].key}
    params = dict(DEFAULT_PARAMS, allowConsolidatingReclaim=False)
    st2, ses2 = over_share_world(params=params)
    v2 = ReclaimValidator(st2, ses2, st2.jobs["a"])
    assert v2.check(victims(st2, "b0", "b1", "b2"), {st2.jobs["b0"].tasks[0].key}, gpus_req(2)) is not None


def test_gate2_moved_task_still_takes_its_core_place():
    jobs = [job("elastic", "B", [1, 1, 1], min_member=1), job("a", "A", [1], running=False)]
    st_, ses = world([gq("A"), gq("B")], jobs)
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    tasks = st_.jobs["elastic"].tasks
    # the first victim task is the core one even though it moved: no core chunk, two elastic ones
    assert [c["gpu"] for c in v.chunks(st_.jobs["elastic"], tasks, {tasks[0].key})] == [1, 1]


def test_gate2_uses_the_allocation_frozen_when_the_attempt_started():
    st_, ses = over_share_world()
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    for t in st_.jobs["b0"].tasks + st_.jobs["b1"].tasks:
        ses.evict(t, "reclaim", "a", "")                                # the scenario's virtual evictions
    assert ses.allocated["B"]["gpu"] == 4
    assert v.check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is None


def test_leveled_queues_are_the_siblings_under_the_lowest_common_ancestor():
    queues = [queue("D1"), queue("D2"), gq("A", "D1"), gq("A2", "D1"), gq("B", "D2"), gq("T")]
    st_, _ = world(queues, [])
    names = lambda pair: tuple(q.name for q in pair)  # noqa: E731
    assert names(leveled_queues(st_, "A", "B")) == ("D1", "D2")
    assert names(leveled_queues(st_, "A", "A2")) == ("A", "A2")
    assert names(leveled_queues(st_, "T", "B")) == ("T", "D2")           # top-level queues are siblings


def _departments(d2_share: int, b_share: int, b_alloc: int = 4):
    queues = [gq("D1"), gq("D2"), gq("A", "D1"), gq("B", "D2")]
    jobs = [job(f"b{i}", "B", [1]) for i in range(b_alloc)] + [job("a", "A", [1], running=False)]
    st_, ses = world(queues, jobs)
    share(st_, D1=8, A=8, D2=d2_share, B=b_share)
    return st_, ses


def test_gate2_is_judged_at_the_department_level_not_the_leaf():
    st_, ses = _departments(d2_share=4, b_share=1)                      # leaf B over, department D2 not
    reason = ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0"), set(), gpus_req(1))
    assert reason is not None and "queue D2" in reason
    st_, ses = _departments(d2_share=2, b_share=8)                      # leaf B within, D2 over
    assert ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0"), set(), gpus_req(1)) is None


# ------------------------------------------------------------------------------------------------
# gate 3
# ------------------------------------------------------------------------------------------------

def _saturation_world(b_alloc: int, multiplier: str | None = None):
    """A holds 2 with a fair share of 3 and asks 2 more (saturation 4/3); B has a share of 3."""
    jobs = ([job("a-run", "A", [2]), job("a", "A", [1, 1], running=False)]
            + [job(f"b{i}", "B", [1]) for i in range(b_alloc)])
    config = config_with(proportion={"relcaimerSaturationMultiplier": multiplier}) if multiplier else None
    st_, ses = world([gq("A"), gq("B")], jobs, config=config)
    share(st_, A=3, B=3)
    return st_, ses


def test_gate3_reclaimer_above_share_must_stay_strictly_poorer():
    st_, ses = _saturation_world(b_alloc=8)
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is None       # 4/3 < 6/3
    reason = v.check(victims(st_, "b0", "b1", "b2", "b3"), set(), gpus_req(2))  # 4/3 >= 4/3: equal rejects
    assert reason is not None and "queue A" in reason and "queue B" in reason and "gpu" in reason


def test_gate3_multiplier_above_one_is_more_conservative():
    st_, ses = _saturation_world(b_alloc=8, multiplier="2")
    assert st_.config.reclaimer_saturation_multiplier == 2
    reason = ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0", "b1"), set(), gpus_req(2))
    assert reason is not None and "queue B" in reason                    # 4/3 * 2 >= 2


def test_gate3_reclaimer_within_its_share_is_always_allowed():
    st_, ses = _saturation_world(b_alloc=8, multiplier="100")
    share(st_, A=4)                                                     # (2 + 2) / 4 = 1: not above share
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0", "b1", "b2", "b3"), set(), gpus_req(2)) is None


def test_gate3_sibling_with_zero_fair_share_never_blocks():
    st_, ses = _saturation_world(b_alloc=8)
    share(st_, B=0)                                                     # B's saturation is infinite, fs 0
    v = ReclaimValidator(st_, ses, st_.jobs["a"])
    assert v.check(victims(st_, "b0", "b1", "b2", "b3", "b4", "b5"), set(), gpus_req(2)) is None


def _hierarchy(d2_alloc: int):
    """A (share 4, holding 0) under D1 (share 4, holding 4 through A2); B under D2 (share 4)."""
    queues = [gq("D1"), gq("D2"), gq("A", "D1"), gq("A2", "D1"), gq("B", "D2")]
    jobs = ([job("a2", "A2", [4]), job("a", "A", [1, 1], running=False)]
            + [job(f"b{i}", "B", [1]) for i in range(d2_alloc)])
    st_, ses = world(queues, jobs)
    share(st_, D1=4, D2=4, A=4, A2=4, B=4)
    return st_, ses


def test_gate3_is_checked_at_every_level_of_the_reclaimers_path():
    st_, ses = _hierarchy(d2_alloc=8)                                   # D1: 6/4 vs D2 after: 6/4
    reason = ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0", "b1"), set(), gpus_req(2))
    assert reason is not None and "queue D1" in reason and "queue D2" in reason
    st_, ses = _hierarchy(d2_alloc=10)                                  # D1 6/4 < D2 8/4
    assert ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is None


def test_gate3_non_preemptible_reclaimer_must_fit_quota_at_every_level():
    queues = [gq("D1", quota=1), gq("D2"), gq("A", "D1", quota=4), gq("B", "D2")]
    jobs = [job(f"b{i}", "B", [1]) for i in range(6)] + [job("a", "A", [1, 1], running=False, priority_class="build")]
    st_, ses = world(queues, jobs)
    share(st_, D1=4, A=4, D2=2, B=2)
    reason = ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0", "b1"), set(), gpus_req(2))
    assert reason is not None and "non-preemptible" in reason and "queue D1" in reason
    st_.queues["D1"].deserved["gpu"] = Fraction(2)
    assert ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0", "b1"), set(), gpus_req(2)) is None


def test_gate3_compares_only_involved_resources():
    """The victims free only CPU and the reclaimer asks only CPU: a GPU saturation gap is ignored."""
    jobs = [job("a-run", "A", [4]), job("a", "A", [0], running=False)] + [job(f"b{i}", "B", [0]) for i in range(4)]
    st_, ses = world([gq("A"), gq("B")], jobs)
    share(st_, A=2, B=8)                                                # A is far above its GPU share
    st_.queues["B"].deserved["cpu"] = Fraction(0)                       # B above its CPU share (400 > 100):
    st_.queues["B"].fair_share["cpu"] = Fraction(100)                   # reclaimable
    req = {"cpu": Fraction(100), "memory": Fraction(0), "gpu": Fraction(0)}
    assert ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0"), set(), req) is None
    req["gpu"] = Fraction(1)                                            # now GPU is involved: 5/2 vs 0/8
    assert ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, "b0"), set(), req) is not None


# ------------------------------------------------------------------------------------------------
# gate 2 against a closed form, over generated victim sets
# ------------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 3), min_size=1, max_size=6), fair=st.integers(0, 12),
       take=st.integers(1, 6))
def test_gate2_passes_exactly_when_the_victim_is_over_share_before_each_chunk(sizes, fair, take):
    """Top-level B runs one-pod jobs of `sizes` GPUs; A (quota 0, share large) reclaims the first
    `take` of them. KAI's rule: before each chunk B still holds more than its share."""
    jobs = [job(f"b{i}", "B", [g]) for i, g in enumerate(sizes)] + [job("a", "A", [1], running=False)]
    st_, ses = world([gq("A"), gq("B")], jobs)
    share(st_, A=64, B=fair)
    chosen = [f"b{i}" for i in range(min(take, len(sizes)))]
    held, expected = sum(sizes), True
    for i in range(len(chosen)):
        expected &= held > fair
        held -= sizes[i]
    got = ReclaimValidator(st_, ses, st_.jobs["a"]).check(victims(st_, *chosen), set(), gpus_req(1))
    assert (got is None) == expected, got


# ------------------------------------------------------------------------------------------------
# min-runtime (6.7)
# ------------------------------------------------------------------------------------------------

MR_CONFIG = config_with(minruntime={})


def test_last_start_annotation_is_read_and_a_bad_one_warned_about():
    jobs = [job("ok", "A", [1], started=ts(30)), job("bad", "A", [1], started="yesterday"), job("none", "A", [1])]
    st_, _ = world([gq("A")], jobs)
    assert st_.jobs["ok"].last_start == START + 30
    assert st_.jobs["bad"].last_start is None and st_.jobs["none"].last_start is None
    assert any(w.object == "PodGroup/default/bad" and "last-start" in w.field for w in st_.warnings)
    assert not st_.jobs["bad"].problems                                  # still scheduled


def test_queue_min_runtimes_are_read_in_seconds():
    st_, _ = world([gq("A", preempt="10m", reclaim="1h30m"), gq("B")], [])
    assert (st_.queues["A"].preempt_min_runtime, st_.queues["A"].reclaim_min_runtime) == (600, 5400)
    assert (st_.queues["B"].preempt_min_runtime, st_.queues["B"].reclaim_min_runtime) == (None, None)


@pytest.mark.parametrize("args,expected", [
    ({}, (0, 0, "lca")),
    ({"defaultPreemptMinRuntime": "5m", "defaultReclaimMinRuntime": "90s", "reclaimResolveMethod": "queue"},
     (300, 90, "queue")),
    ({"defaultPreemptMinRuntime": "soon", "defaultReclaimMinRuntime": "-5m", "reclaimResolveMethod": "nearest"},
     (0, 0, "lca")),
])
def test_minruntime_plugin_arguments(args, expected):
    warnings: list = []
    cfg = parse_config(config_with(minruntime=args), None, warnings)
    assert (cfg.default_preempt_min_runtime, cfg.default_reclaim_min_runtime, cfg.reclaim_resolve_method) == expected
    assert cfg.min_runtime_enabled
    assert bool(warnings) == any(v in ("soon", "nearest") for v in args.values())   # absent or negative: silent


def test_minruntime_is_off_when_the_plugin_is_not_configured():
    assert not parse_config(DEFAULT_CONFIG, None).min_runtime_enabled
    assert parse_config(None, None).min_runtime_enabled                 # no tiers: KAI's fallback lists it
    st_, _ = world([gq("A", preempt="1h")], [job("v", "A", [1], started=ts(0))])
    assert not protected(st_, st_.jobs["v"], "preempt", "A", START + 1)


def _mr_world(args: dict | None = None, **queue_runtimes: tuple[str | None, str | None]):
    """Root R0 {D1 {A, A2}, D2 {B}} and top-level T; victims v-<queue> started at ts(0)."""
    layout = {"R0": None, "D1": "R0", "D2": "R0", "A": "D1", "A2": "D1", "B": "D2", "T": None}
    queues = []
    for name, parent in layout.items():
        pre, rec = queue_runtimes.get(name, (None, None))
        queues.append(gq(name, parent, preempt=pre, reclaim=rec))
    jobs = [job(f"v-{q}", q, [1], started=ts(0)) for q in ("A", "A2", "B", "T")]
    st_, _ = world(queues, jobs, config=config_with(minruntime=args or {}))
    return st_


def test_preempt_min_runtime_walks_from_the_victims_queue_up_then_the_default():
    st_ = _mr_world({"defaultPreemptMinRuntime": "2m"}, D1=("10m", None), A2=("1m", None))
    assert preempt_min_runtime(st_, "A") == 600                         # from D1
    assert preempt_min_runtime(st_, "A2") == 60                         # its own beats D1's
    assert preempt_min_runtime(st_, "B") == 120                         # nothing set: default
    v = st_.jobs["v-A"]
    assert protected(st_, v, "preempt", "A", START + 599)
    assert not protected(st_, v, "preempt", "A", START + 600)           # now < start + runtime, strictly


def test_reclaim_min_runtime_lca_and_queue_methods():
    runtimes = dict(R0=(None, "1h"), D2=(None, "20m"), B=(None, "5m"))
    st_ = _mr_world({"defaultReclaimMinRuntime": "30s"}, **runtimes)
    assert reclaim_min_runtime(st_, "B", "A") == 1200                   # LCA R0, one step down: D2
    assert reclaim_min_runtime(st_, "B", "T") == 3600                   # other top level: victim's top (R0)
    assert reclaim_min_runtime(st_, "A", "A2") == 3600                  # LCA D1 -> A unset -> D1 unset -> R0
    assert reclaim_min_runtime(st_, "T", "A") == 30                     # T unset: default
    st_ = _mr_world({"defaultReclaimMinRuntime": "30s", "reclaimResolveMethod": "queue"}, **runtimes)
    assert reclaim_min_runtime(st_, "B", "A") == 300                    # the victim's own queue first
    assert reclaim_min_runtime(st_, "A", "B") == 3600


def test_reclaim_protection_uses_the_reclaimers_position():
    st_ = _mr_world(None, D2=(None, "20m"), B=(None, "5m"))
    v = st_.jobs["v-B"]
    assert protected(st_, v, "reclaim", "A", START + 600)               # 20m from D2
    assert not protected(st_, v, "reclaim", "A", START + 1200)
    assert not protected(st_, v, "preempt", "B", START + 1)             # preempt reads preemptMinRuntime


def test_jobs_without_last_start_are_never_protected():
    st_ = _mr_world({"defaultPreemptMinRuntime": "1h"})
    st_.jobs["v-A"].last_start = None
    assert not protected(st_, st_.jobs["v-A"], "preempt", "A", START)


def _elastic_world():
    subs = [("w", 1, 3), ("x", 2, 2)]
    jobs = [job("el", "B", [1] * 5, sub_groups=subs, started=ts(0)), job("gang", "B", [1, 1], started=ts(0))]
    st_, ses = world([gq("A"), gq("B", preempt="1h", reclaim="1h")], jobs, config=MR_CONFIG)
    return st_, ses


def test_filter_leaves_out_protected_non_elastic_victims_only():
    st_, _ = _elastic_world()
    el, gang = st_.jobs["el"], st_.jobs["gang"]
    assert is_elastic(el) and not is_elastic(gang)
    assert not filter_victim(st_, gang, "reclaim", "A", START + 10)
    assert filter_victim(st_, gang, "reclaim", "A", START + 3600)       # protection over
    assert filter_victim(st_, el, "preempt", "B", START + 10)           # elastic: checked per scenario


@pytest.mark.parametrize("now", [START - 1, START + 10, START + 3599, START + 3600, START + 7200])
def test_the_guards_victim_filter_is_filter_victim_per_job(now):
    """RuntimeGuard.passing filters a queue's victims at once; it keeps exactly (and in order)
    the jobs filter_victim passes, for both actions, around the protection's end."""
    from kai_cp.actions.pipeline import RuntimeGuard
    from kai_cp.actions.victims import preemptible_running
    jobs = [job("el", "B", [1] * 5, sub_groups=[("w", 1, 3), ("x", 2, 2)], started=ts(0)),
            job("gang", "B", [1, 1], started=ts(0)), job("late", "B", [1], started=ts(1800)),
            job("fresh", "B", [1])]
    st_, ses = world([gq("A"), gq("B", preempt="1h", reclaim="1h")], jobs, config=MR_CONFIG)
    assert st_.jobs["fresh"].last_start is None
    guard = RuntimeGuard(st_, ses, now)
    victims = preemptible_running(ses)["B"]
    assert {v.job.name for v in victims} == {"el", "gang", "late", "fresh"}
    for action, queue in (("reclaim", "A"), ("preempt", "B")):
        want = [v for v in victims if filter_victim(st_, v.job, action, queue, now)]
        got = guard.passing(victims, action, queue)
        assert [v.job.name for v in got] == [v.job.name for v in want]
        assert guard.passing(victims, action, queue) is got         # memoised per list
    if now == START + 10:      # the elastic job and the one never started pass; the others are protected
        assert {v.job.name for v in guard.passing(victims, "reclaim", "A")} == {"el", "fresh"}


def test_protected_elastic_victims_only_lose_their_surplus_per_podset():
    st_, ses = _elastic_world()
    el = st_.jobs["el"]
    w = el.podsets["w"].tasks
    x = el.podsets["x"].tasks
    now = START + 10
    assert elastic_ok(st_, el, w[1:], "reclaim", "A", now)              # w keeps 1 = its minimum
    assert not elastic_ok(st_, el, w, "reclaim", "A", now)              # w would drop to 0
    assert not elastic_ok(st_, el, x[:1], "reclaim", "A", now)          # x has no surplus at all
    assert elastic_ok(st_, el, w + x, "reclaim", "A", START + 3600)     # unprotected: anything goes
    assert elastic_ok(st_, el, w, "preempt", "B", START + 3600)


def test_elastic_check_counts_pods_placed_this_cycle_with_a_session():
    subs = [("w", 1, 3)]
    pg, pods = job("el", "B", [1, 1, 1], sub_groups=subs, started=ts(0))
    pods[2]["status"]["phase"] = "Pending"
    pods[2]["spec"].pop("nodeName")
    st_, ses = world([gq("A"), gq("B", reclaim="1h")], [(pg, pods)], config=MR_CONFIG)
    el = st_.jobs["el"]
    running = [t for t in el.tasks if t.status == "Running"]
    pending = [t for t in el.tasks if t.status == "Pending"][0]
    assert not elastic_ok(st_, el, running, "reclaim", "A", START + 1, ses)
    ses.place(pending, 0, pipelined=False)
    assert elastic_ok(st_, el, running, "reclaim", "A", START + 1, ses)  # the new pod keeps the minimum
    assert not elastic_ok(st_, el, running, "reclaim", "A", START + 1)   # without a session: snapshot counts
