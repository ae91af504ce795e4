"""The victim jobs' pods on nodes as arrays, made once per state (issue 9).

The victim pool (kai_cp/model/victim_pool.py) looks at every victim job of the cluster each cycle
(30,000 jobs and 78,000 pods at 10,000 nodes); what it reads of them (queue, priority, last start,
PodSet sizes and minimums, each pod's node and request) is the snapshot's, so it is gathered once
per state, by the first pool that asks: made with the state, it cost every greedy-only run
0.16 s at 10,000 nodes for arrays only the model reads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from kai_cp.jobs import JobInfo, TaskInfo

if TYPE_CHECKING:
    from kai_cp.state import ClusterState

# Priorities beyond any PriorityClass's int32 (a corrupt value) are kept in int64 at this bound.
PRIORITY_BOUND = 1 << 62


def bounded(priority: int) -> int:
    """A priority as the arrays hold it (order kept among all but corrupt values)."""
    return min(max(priority, -PRIORITY_BOUND), PRIORITY_BOUND)


def priorities(values: Iterable[int], count: int) -> np.ndarray:
    """`bounded` of each, as int64: read at once, one by one only when some value is beyond int64."""
    values = list(values)
    try:
        out = np.fromiter(values, dtype=np.int64, count=count)
    except OverflowError:
        return np.fromiter(map(bounded, values), dtype=np.int64, count=count)
    return np.clip(out, -PRIORITY_BOUND, PRIORITY_BOUND)


@dataclass(eq=False)
class VictimPods:
    """The victim jobs (state.victims) and their pods on nodes as arrays, once per state: what the
    pool's rules read of every victim, for all of them at once."""
    jobs: list[JobInfo]
    at: dict[str, int]                 # job name -> its index in jobs
    queue_names: list[str]             # the state's queues, sorted
    queue: np.ndarray                  # per job: index into queue_names, -1 for a queue the state lacks
    priority: np.ndarray
    last_start: np.ndarray             # nan: never started
    elastic: np.ndarray                # some PodSet has more pods than its minimum (jobs.is_elastic)
    single: np.ndarray                 # one pod, minimums at most 1 (victim_pool._single_pod)
    first_pod: np.ndarray              # per job: its first pod's index in the pod arrays (and the end)
    first_podset: np.ndarray           # per job: its first PodSet's index (and the end)
    podset_min: np.ndarray             # per PodSet (every job's, in job order): its minimum
    podset_job: np.ndarray
    tasks: list[TaskInfo]              # the pods on nodes, job by job, PodSet by PodSet, in pod order
    pod_job: np.ndarray
    pod_podset: np.ndarray
    pod_node: np.ndarray
    pod_request: np.ndarray            # index into requests
    requests: dict                     # request -> its index (equal requests share one)
    request_vecs: np.ndarray           # per request: table.vector's row
    request_shared: np.ndarray
    request_centi: np.ndarray          # GPUs x 100 (whole GPUs)


def victim_pods(state: ClusterState) -> VictimPods:
    """Made when first asked for and kept on the state."""
    cached = state.__dict__.get("_victim_pods")
    if cached is not None:
        return cached
    index, jobs = state.table.index, state.jobs
    names = sorted(state.queues)
    victims = [jobs[name] for name in state.victims]
    count = len(victims)
    podsets = [ps for job in victims for ps in job.podsets.values()]
    on = [ps.on_nodes(index) for ps in podsets]
    tasks = [t for ts in on for t in ts]
    per_ps = np.fromiter(map(len, on), dtype=np.int64, count=len(on))
    podsets_of = np.fromiter(map(len, map(attrgetter("podsets"), victims)), dtype=np.int64, count=count)
    ps_job = np.repeat(np.arange(count, dtype=np.int64), podsets_of)
    ps_min = np.fromiter(map(attrgetter("min_available"), podsets), dtype=np.int64, count=len(podsets))
    ps_size = np.fromiter(map(len, map(attrgetter("tasks"), podsets)), dtype=np.int64, count=len(podsets))
    per_job = np.bincount(ps_job, weights=per_ps, minlength=count).astype(np.int64)
    # Requests by object first (most pods share theirs), then equal ones merged: hashing every
    # pod's request was a third of this.
    ids = np.fromiter(map(id, map(attrgetter("request"), tasks)), dtype=np.int64, count=len(tasks))
    _, firsts, inverse = np.unique(ids, return_index=True, return_inverse=True)
    requests: dict = {}
    merged = np.array([requests.setdefault(tasks[k].request, len(requests)) for k in firsts.tolist()],
                      dtype=np.int64)
    pod_request = merged[inverse.reshape(-1)] if len(tasks) else np.zeros(0, dtype=np.int64)
    one = np.unique(pod_request, return_index=True)[1].tolist()      # per request, a pod asking for it
    reqs = list(requests)
    vector = state.table.vector
    width = state.table.allocatable.shape[1]
    out = VictimPods(
        jobs=victims, at=dict(zip(state.victims, range(count))), queue_names=names,
        queue=_codes(names, map(attrgetter("queue"), victims), count),
        priority=priorities(map(attrgetter("priority"), victims), count),
        last_start=np.fromiter((np.nan if job.last_start is None else job.last_start for job in victims),
                               dtype=np.float64, count=count),
        # jobs.is_elastic and _single_pod, from the PodSets' sizes and minimums
        elastic=np.bincount(ps_job, weights=ps_size > ps_min, minlength=count) > 0,
        single=(np.bincount(ps_job, weights=ps_min > 1, minlength=count) == 0)
        & (np.bincount(ps_job, weights=ps_size, minlength=count) == 1),
        first_pod=np.concatenate([[0], np.cumsum(per_job)]).astype(np.int64),
        first_podset=np.concatenate([[0], np.cumsum(podsets_of)]).astype(np.int64),
        podset_min=ps_min, podset_job=ps_job, tasks=tasks,
        pod_job=np.repeat(np.arange(count, dtype=np.int64), per_job),
        pod_podset=np.repeat(np.arange(len(podsets), dtype=np.int64), per_ps),
        pod_node=np.fromiter(map(index.__getitem__, map(attrgetter("node"), tasks)), dtype=np.int64, count=len(tasks)),
        pod_request=pod_request, requests=requests,
        request_vecs=np.array([vector(tasks[k]) for k in one], dtype=np.int64).reshape(len(reqs), width),
        request_shared=np.fromiter((r.is_shared_gpu for r in reqs), dtype=bool, count=len(reqs)),
        request_centi=np.fromiter((100 * r.gpus for r in reqs), dtype=np.int64, count=len(reqs)))
    state.__dict__["_victim_pods"] = out
    return out


def _codes(names: list[str], values: Iterable[str], count: int) -> np.ndarray:
    """Each value's index in `names`, -1 where it is not one of them."""
    code: defaultdict[str, int] = defaultdict(lambda: -1, zip(names, range(len(names))))
    return np.fromiter(map(code.__getitem__, values), dtype=np.int64, count=count)
