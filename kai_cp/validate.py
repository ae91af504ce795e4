"""Independent check of a cycle's decisions against the invariants every engine must keep:
node resources, static predicates, host ports, in-cycle pod anti-affinity, gang minimums, queue
limits and the non-preemptible quota, shared GPUs, and the eviction rules (who may lose pods to
which action, min-runtime protection, reclaim's gates 1 and 2).

It shares no code with the engines' constraint logic, so tests (and a paranoid caller) can use
it to catch a model or greedy bug rather than repeat it. (The one thing it reads from the
engine is which queue's min-runtime applies, `min_runtime_seconds`, a lookup, not a rule.)
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from kai_cp import host_ports
from kai_cp.actions.min_runtime import min_runtime_seconds
from kai_cp.gpu_sharing import task_memory
from kai_cp.jobs import ACTIVE_ALLOCATED, ACTIVE_USED, PENDING, JobInfo, TaskInfo, queue_gpu_of_accepted
from kai_cp.pod_affinity import anti_terms_of, labels_of
from kai_cp.queues import RESOURCES, UNLIMITED, QueueInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState


def _topology_violations(state: ClusterState, session: Session, job: JobInfo) -> list[str]:
    """KAI's rule (8.3) at each placement, replayed in the session's order: a new pod goes to a
    required-level domain hosting one of the scope's active pods at that moment (running, not
    evicted, or placed earlier this cycle), or anywhere while there is none; a pod outside the
    topology pins nothing. In order because a final-state check cannot tell a pod placed beside
    a running pod that a later eviction took (fine) from one placed where the scope's only pod
    had already been evicted (the bug of
    tests/fixtures/evictions/greedy_move_into_a_zone_an_evicted_pod_left.json)."""
    out = []
    index = state.table.index
    for scope in job.scope.walk():
        c = scope.constraint
        if c is None or c.required is None:
            continue
        dom = c.tree.domain_of(c.required)
        keys = {t.key for ps in scope.podsets for t in job.podsets[ps].tasks}
        active = {t.key: int(dom[index[t.node]]) for ps in scope.podsets for t in job.podsets[ps].tasks
                  if t.status in ACTIVE_ALLOCATED and t.node in index}
        for change, task, node in session.pod_changes():
            if task.key not in keys:
                continue
            if change == "gone":
                active.pop(task.key, None)
                continue
            d = int(dom[node])
            if change == "placed":
                if d < 0:
                    out.append(f"job {job.name} {scope.label}: a pod is placed on a node outside topology {c.tree.name}")
                    continue
                pinned = {v for v in active.values() if v >= 0}
                if pinned and d not in pinned:
                    names = sorted(c.tree.domain_name(c.required, v) for v in pinned)
                    out.append(f"job {job.name} {scope.label}: {task.key} placed in "
                               f"{c.tree.domain_name(c.required, d)} at required level {c.required_name} while the "
                               f"scope's active pods are in {', '.join(names)}")
            active[task.key] = d
    return out


def host_port_violations(state: ClusterState, session: Session) -> list[str]:
    """No two pods on a node with the same host port and protocol: the placed pods among
    themselves and against every pod on the node at cycle start (a terminating one keeps its
    port). The placed pods' ports are read from their specs, not from the anti-affinity terms the
    engines derive from them; the pods at cycle start are the state's record of them."""
    wanting = [(p, host_ports.wanted(p.task.pod.spec)) for p in session.placements.values() if p.task.pod is not None]
    wanting = [(p, w) for p, w in wanting if w]
    if not wanting:
        return []
    out: list[str] = []
    holders: dict[tuple[int, str, int], str] = {}
    index = state.predicates.pod_index
    for e in (index.pods if index is not None else ()):
        for proto, port in host_ports.ports_of(e.labels):
            holders.setdefault((e.node, proto, port), "a pod running there")
    for p, ports in wanting:
        for proto, port in ports:
            other = holders.setdefault((p.node, proto, port), p.task.key)
            if other != p.task.key:
                out.append(f"{p.task.key} placed on {state.nodes[p.node].name}: host port {proto}/{port} is "
                           f"held by {other}")
    return out


def anti_affinity_violations(state: ClusterState, session: Session) -> list[str]:
    """Required pod anti-affinity among the pods this cycle places (pending ones and moved
    victims): no placed pod in the topology domain of a placed pod whose term selects it. (Against
    pods on nodes at cycle start the terms are the static predicates, checked above.) Pairs are
    only compared within one domain of the term's key."""
    index = state.predicates.pod_index
    placed = list(session.placements.values())
    carriers = [p for p in placed if anti_terms_of(p.task)]
    if index is None or not carriers:
        return []
    out: list[str] = []
    by_domain: dict[str, dict[int, list]] = {}           # topology key -> domain -> placements there
    for c in carriers:
        for term in anti_terms_of(c.task):
            codes, _ = index.codes(term.topology_key)
            here = codes[c.node]
            if here < 0:
                continue
            domains = by_domain.get(term.topology_key)
            if domains is None:
                domains = by_domain[term.topology_key] = {}
                for p in placed:
                    domains.setdefault(int(codes[p.node]), []).append(p)
            for o in domains.get(int(here), ()):
                if o is c:
                    continue
                if term.selects(labels_of(o.task), o.task.namespace, c.task.namespace):
                    out.append(f"{o.task.key} placed on {state.nodes[o.node].name} in the {term.topology_key} domain "
                               f"of {c.task.key}, whose required anti-affinity keeps it away")
    return out


assert RESOURCES == ("cpu", "memory", "gpu")        # the order the queue sums below use


def _exact(v: int | Fraction) -> int | Fraction:
    """An int where the value is whole: int sums are ~100x cheaper than Fraction ones."""
    return v.numerator if isinstance(v, Fraction) and v.denominator == 1 else v


def violations(state: ClusterState, session: Session, now: float | None = None) -> list[str]:
    """Every rule the decisions break, as messages ([] when none). `now`, the cycle's clock,
    enables the min-runtime check."""
    out: list[str] = []
    table = state.table
    # Node resources and predicates.
    load = np.zeros_like(table.allocatable)
    for p in session.placements.values():
        vec = p.vec if p.vec is not None else table.vector(p.task)
        load[p.node] += vec
        if not state.predicates.mask(p.task.predicate_key)[p.node] and not p.task.request.best_effort:
            out.append(f"{p.task.key} placed on {state.nodes[p.node].name}, which fails its predicates")
        if p.task.volume_problem is not None:
            out.append(f"{p.task.key} placed although its volumes stop it: {p.task.volume_problem}")
    free = table.free.copy()
    for e in session.evictions.values():
        free[e.node] += e.vec
    # only what the decisions ask for: a node already past its capacity (a corrupt allocatable, a
    # pod the kubelet admitted over it) takes pods that do not ask for that resource, as the
    # engines' fit does (kai_cp/fit.py rows_fit)
    over = (load > free) & (load > 0)
    for n, r in zip(*np.nonzero(over)):
        out.append(f"node {state.nodes[n].name}: {table.resources[r]} placed {load[n, r]} > free {free[n, r]}")
    out += shared_gpu_violations(state, session)
    out += host_port_violations(state, session)
    out += anti_affinity_violations(state, session)
    # Gangs.
    placed_jobs = {p.task.job for p in session.placements.values()}
    for name in placed_jobs:
        job = state.jobs[name]
        for ps in job.podsets.values():
            n = (ps.count(ACTIVE_ALLOCATED) + sum(1 for t in ps.tasks if t.key in session.placements)
                 - sum(1 for t in ps.tasks if t.key in session.evictions))
            if n < ps.min_available:
                out.append(f"job {name} podset {ps.name}: {n} pods < minMember {ps.min_available}")
    # Topology: every constrained scope's active pods inside one domain of its required level.
    for name in placed_jobs:
        job = state.jobs[name]
        if job.scope is not None:
            out += _topology_violations(state, session, job)
    # Queue limits and non-preemptible quota, at every level.
    added, added_np = _queue_sums(state, [(1, p) for p in session.placements.values()]
                                  + [(-1, e) for e in session.evictions.values()])
    out += eviction_violations(state, session)
    if now is not None:
        out += min_runtime_violations(state, session, now)
    out += gate1_violations(state, session)
    out += gate2_violations(state, session)
    # KAI's job-level check counts a GPU-memory pod as no GPU and its per-task check a whole-GPU
    # pod as one GPU whatever its count (spec 3.6, quirk): a gang of a 2-GPU pod and a 0.25-GPU
    # memory pod may end at 2.25 in a queue limited to 2. What holds is the limit with GPU-memory
    # pods counted as none, and each of them within it beside what its queue held at least.
    memory, memory_np, largest, lost = _memory_pod_gpus(state, session)
    for qname, add in added.items():
        q = state.queues[qname]
        for i, r in enumerate(RESOURCES):
            counted = add[i] - (memory.get(qname, 0) if r == "gpu" else 0)
            if add[i] > 0 and q.limit[r] != -1 and q.allocated[r] + counted > max(q.limit[r], q.allocated[r]):
                out.append(f"queue {qname}: {r} {q.allocated[r] + add[i]} over limit {q.limit[r]}")
    for qname, add in added_np.items():
        q = state.queues[qname]
        for i, r in enumerate(RESOURCES):
            counted = add[i] - (memory_np.get(qname, 0) if r == "gpu" else 0)
            if add[i] > 0 and q.deserved[r] != -1 and q.allocated_np[r] + counted > max(q.deserved[r], q.allocated_np[r]):
                out.append(f"queue {qname}: non-preemptible {r} {q.allocated_np[r] + add[i]} over quota {q.deserved[r]}")
    for qname, portion in largest.items():
        q = state.queues[qname]
        least = q.allocated["gpu"] - lost.get(qname, 0)       # what the queue held at least when it was placed
        if q.limit["gpu"] != -1 and least + portion > q.limit["gpu"]:
            out.append(f"queue {qname}: a GPU-memory pod of {portion} GPU placed beside at least {least} "
                       f"over limit {q.limit['gpu']}")
    return out


def _memory_pod_gpus(state: ClusterState, session: Session) -> tuple[dict, dict, dict, dict]:
    """Per queue of the tree: the GPUs of the GPU-memory pods placed (all jobs', non-preemptible
    jobs'), the largest one, and the GPUs the queue lost to evictions this cycle."""
    memory: dict[str, int | Fraction] = {}
    memory_np: dict[str, int | Fraction] = {}
    largest: dict[str, int | Fraction] = {}
    lost: dict[str, int | Fraction] = {}
    nodes = state.nodes
    for p in session.placements.values():
        if p.task.request.kind != "GpuMemory" or p.task.key in session.evictions:
            continue
        job = state.jobs[p.task.job]
        gpu = queue_gpu_of_accepted(p.task, nodes[p.node].gpu_memory)
        for q in state.queue_path(job.queue):
            memory[q.name] = memory.get(q.name, 0) + gpu
            if not job.preemptible:
                memory_np[q.name] = memory_np.get(q.name, 0) + gpu
            largest[q.name] = max(largest.get(q.name, 0), gpu)
    if largest:
        for e in session.evictions.values():
            job = state.jobs[e.task.job]
            gpu = queue_gpu_of_accepted(e.task, nodes[e.node].gpu_memory)
            for q in state.queue_path(job.queue):
                lost[q.name] = lost.get(q.name, 0) + gpu
    return memory, memory_np, largest, lost


def eviction_violations(state: ClusterState, session: Session) -> list[str]:
    """Spec 6.8: who may lose pods to which action, and gangs lose pods whole or only above their
    minimum (stale gangs excepted: they are evicted because they are below it)."""
    out: list[str] = []
    for e in session.evictions.values():
        t, victim = e.task, state.jobs[e.task.job]
        if t.status not in ACTIVE_ALLOCATED or t.node is None:
            out.append(f"{t.key} evicted by {e.action} but it is not running")
        if e.action == "stalegangeviction":
            continue
        pre = state.jobs.get(e.for_job) if e.for_job else None
        if not victim.preemptible:
            out.append(f"{t.key}: non-preemptible job {victim.name} lost a pod to {e.action}")
        if pre is None:
            out.append(f"{t.key}: evicted by {e.action} for no preemptor")
            continue
        if e.action == "preempt" and (victim.queue != pre.queue or victim.priority >= pre.priority):
            out.append(f"{t.key}: preempted by {pre.name} but not a lower-priority job of its queue")
        if e.action == "reclaim" and victim.queue == pre.queue:
            out.append(f"{t.key}: reclaimed by {pre.name} of the same queue")
        if e.action == "consolidation" and t.key not in session.placements:
            out.append(f"{t.key}: consolidation evicted it without re-placing it")
    for name in {e.task.job for e in session.evictions.values() if e.action != "stalegangeviction"}:
        job = state.jobs[name]
        for ps in job.podsets.values():
            # active after the cycle: running and kept, or placed this cycle (a moved victim, or a
            # pending pod of the victim job the simulation pipelined in an evicted pod's stead)
            left = sum(1 for t in ps.tasks if t.key in session.placements
                       or (t.status in ACTIVE_ALLOCATED and t.node is not None and t.key not in session.evictions))
            if 0 < left < ps.min_available:
                out.append(f"job {name} podset {ps.name}: eviction left {left} pods < minMember {ps.min_available}")
    return out


def _queue_sums(state: ClusterState, entries: list) -> tuple[dict[str, list], dict[str, list]]:
    """(All jobs', non-preemptible jobs') cpu, memory and GPUs per queue of the tree, from
    (sign, placement or eviction) pairs: each summed at its job's leaf queue (whole numbers as
    ints, the rare fractional GPU as a Fraction), then carried up."""
    leaf: dict[tuple[str, bool], list] = {}
    nodes = state.nodes
    for sign, p in entries:
        job = state.jobs[p.task.job]
        gpu = queue_gpu_of_accepted(p.task, nodes[p.node].gpu_memory if p.node is not None else None)
        acc = leaf.setdefault((job.queue, job.preemptible), [0, 0, 0])
        acc[0] += sign * p.task.request.cpu
        acc[1] += sign * p.task.request.memory
        acc[2] += sign * _exact(gpu)
    added: dict[str, list] = {}
    added_np: dict[str, list] = {}
    for (qname, preemptible), acc in leaf.items():
        for q in state.queue_path(qname):
            for into in ((added,) if preemptible else (added, added_np)):
                total = into.setdefault(q.name, [0, 0, 0])
                for i in range(len(RESOURCES)):
                    total[i] += acc[i]
    return added, added_np


def _by_commit(state: ClusterState, session: Session,
               actions: tuple[str, ...]) -> dict[tuple[str, str], list[TaskInfo]]:
    """The evicted pods per (action, preemptor): the decisions record no commit order. (An
    eviction for no known preemptor is eviction_violations' to report.)"""
    out: dict[tuple[str, str], list[TaskInfo]] = {}
    for e in session.evictions.values():
        if e.action in actions and e.for_job in state.jobs:
            out.setdefault((e.action, e.for_job), []).append(e.task)
    return out


def _elastic(job: JobInfo) -> bool:
    return any(len(ps.tasks) > ps.min_available for ps in job.podsets.values())


def min_runtime_violations(state: ClusterState, session: Session, now: float) -> list[str]:
    """Spec 6.7: a job within its min-runtime loses no pod to preempt or reclaim, unless it is
    elastic, and then each of its PodSets keeps its minimum of the pods active at cycle start."""
    if not state.config.min_runtime_enabled:
        return []
    out: list[str] = []
    for (action, pre), victims in _by_commit(state, session, ("preempt", "reclaim")).items():
        lost: dict[str, dict[str | None, int]] = {}
        for t in victims:
            per = lost.setdefault(t.job, {})
            per[t.podset] = per.get(t.podset, 0) + 1
        for name, per in lost.items():
            job = state.jobs[name]
            if job.last_start is None:
                continue
            runtime = min_runtime_seconds(state, action, job.queue, state.jobs[pre].queue)
            if now >= job.last_start + runtime:
                continue
            if not _elastic(job):
                out.append(f"job {name}: within its {action} min-runtime ({runtime:g} s) and not elastic, "
                           f"yet lost {sum(per.values())} pod(s) to {action} for {pre}")
                continue
            for ps in job.podsets.values():
                active = sum(1 for t in ps.tasks if t.status in ACTIVE_USED and t.node is not None)
                if per.get(ps.name, 0) and active - per[ps.name] < ps.min_available:
                    out.append(f"job {name} podset {ps.name}: within its {action} min-runtime, {pre} took "
                               f"{per[ps.name]} of {active} active pods, fewer than minMember {ps.min_available} left")
    return out


def _leveled(state: ClusterState, reclaimer: str, victim: str) -> str:
    """The victim's side of the first differing queues on the two root->leaf paths."""
    mine = [q.name for q in reversed(state.queue_path(reclaimer))]
    theirs = [q.name for q in reversed(state.queue_path(victim))]
    for a, b in zip(mine, theirs):
        if a != b:
            return b
    return theirs[min(len(mine), len(theirs)) - 1]


def _may_lose_below(q: QueueInfo) -> list:
    """A queue may lose a chunk only while above this in some resource (spec 3.7.2): fair-share
    reclaim needs it above its allocatable share, max(quota, fair share) capped by the limit;
    quota reclaim above its quota. None: unlimited."""
    out = []
    for r in RESOURCES:
        quota, limit, fair = q.deserved[r], q.limit[r], q.fair_share[r]
        share = None if quota == UNLIMITED or fair == UNLIMITED else max(quota, fair)
        if limit != UNLIMITED:
            share = limit if share is None else min(share, limit)
        out.append(share if quota == UNLIMITED else quota if share is None else min(share, quota))
    return out


def gate1_violations(state: ClusterState, session: Session) -> list[str]:
    """Spec 3.7.1 as a bound that holds whatever ran before the reclaim: a job reclaims only while
    its leaf queue, the job's request added, stays within the queue's fair share in every
    resource (and a non-preemptible job within the queue's quota). When it asked, the queue held
    at least its snapshot allocation less every pod it lost this cycle, and the job asked for at
    least one of its pending pods."""
    reclaimers = {e.for_job for e in session.evictions.values() if e.action == "reclaim" and e.for_job in state.jobs}
    if not reclaimers:
        return []
    lost = _queue_sums(state, [(1, e) for e in session.evictions.values()])
    out: list[str] = []
    divisor = state.gpu_memory_divisor
    for name in sorted(reclaimers):
        job = state.jobs[name]
        asks = [(t.request.cpu, t.request.memory, t.request.pending_gpus(divisor))
                for t in job.tasks if t.status == PENDING]
        if not asks:
            continue
        least = [min(a[i] for a in asks) for i in range(len(RESOURCES))]
        q = state.queues[job.queue]
        checks = [("fair share", q.allocated, lost[0], q.fair_share)]
        if not job.preemptible:
            checks.append(("non-preemptible quota", q.allocated_np, lost[1], q.deserved))
        for what, held, gone, cap in checks:
            gone = gone.get(q.name, [0, 0, 0])
            for i, r in enumerate(RESOURCES):
                at_least = held[r] - gone[i] + least[i]
                if cap[r] != UNLIMITED and at_least > cap[r]:
                    out.append(f"reclaim for {name}: queue {q.name} would hold at least {r} {at_least} "
                               f"with it, over its {what} {cap[r]}")
    return out


def gate2_violations(state: ClusterState, session: Session) -> list[str]:
    """Spec 3.7.2 as a bound that holds in any commit order: the last chunk a reclaimer took from
    a queue V (at the level where their branches meet) was taken while V held at most its
    snapshot allocation plus every pod placed in it this cycle, less the reclaimer's other chunks
    from V; a chunk is at most one victim job's whole loss. So if even that leaves V at or below
    what it may keep in every resource, no order of commits let KAI take it. Victims re-placed
    this cycle (moved) count for nothing (allowConsolidatingReclaim)."""
    out: list[str] = []
    commits = _by_commit(state, session, ("reclaim",))
    # the cycle's new pods (a moved victim is in its queue's allocation already)
    placed = _queue_sums(state, [(1, p) for p in session.placements.values()
                                 if p.task.key not in session.evictions])[0] if commits else {}
    for (_, pre), victims in commits.items():
        r_queue = state.jobs[pre].queue
        jobs: dict[str, dict[str, list]] = {}           # level queue -> victim job -> its loss
        for t in victims:
            if t.key in session.placements:
                continue
            e = session.evictions[t.key]
            level = _leveled(state, r_queue, state.jobs[t.job].queue)
            acc = jobs.setdefault(level, {}).setdefault(t.job, [0, 0, 0])
            acc[0] += t.request.cpu
            acc[1] += t.request.memory
            acc[2] += _exact(queue_gpu_of_accepted(t, state.nodes[e.node].gpu_memory))
        for level, losses in jobs.items():
            q = state.queues[level]
            keep = _may_lose_below(q)
            new = placed.get(level, [0, 0, 0])
            before = []
            for i, r in enumerate(RESOURCES):
                total = sum(loss[i] for loss in losses.values())
                before.append(q.allocated[r] + new[i] - total + max(loss[i] for loss in losses.values()))
            if not any(keep[i] is not None and before[i] > keep[i] for i in range(len(RESOURCES))):
                held = ", ".join(f"{r} {before[i]}" for i, r in enumerate(RESOURCES))
                kept = ", ".join(f"{r} {'unlimited' if keep[i] is None else keep[i]}" for i, r in enumerate(RESOURCES))
                out.append(f"reclaim for {pre} took from queue {level}, which held at most {held} before its "
                           f"last chunk and may lose nothing at or below {kept}")
    return out


def shared_gpu_violations(state: ClusterState, session: Session) -> list[str]:
    """Shared GPUs, recomputed from the snapshot's pods and the decisions alone: no device over
    its memory, no group on two nodes, a shared device never also handed out whole (whole GPUs
    plus shared devices in use within the node's GPUs), fractional pods only with groups."""
    out: list[str] = []
    table = state.table
    mem: dict[tuple[int, str], int] = {}
    group_node: dict[str, int] = {}
    whole = np.zeros(len(state.nodes), dtype=np.int64)
    placed = list(session.placements.values())
    # devices already in use at cycle start (from the node ledger built from the pods); their
    # memory matters only where shared pods are placed
    touched = {p.node for p in placed if p.task.request.is_shared_gpu}
    for n in state.nodes:
        for g, d in n.gpu_groups.items():
            if d.used > 0:
                if g in group_node and group_node[g] != n.index:
                    out.append(f"GPU group {g} is on two nodes")
                group_node[g] = n.index
                if n.index not in touched:
                    continue
                mem[(n.index, g)] = d.allocated - d.releasing   # what stays; pipelined pods may use the rest
                for key in d.tasks:
                    e = session.evictions.get(key)
                    if e is not None:
                        mem[(n.index, g)] -= e.shared_mem
    for p in placed:
        r = p.task.request
        if r.is_shared_gpu:
            if len(p.gpu_groups) != max(r.devices, 1) or len(set(p.gpu_groups)) != len(p.gpu_groups):
                out.append(f"{p.task.key}: {len(p.gpu_groups)} distinct GPU groups for {max(r.devices, 1)} devices")
            need = task_memory(r, state.nodes[p.node].gpu_memory)
            for g in p.gpu_groups:
                if group_node.setdefault(g, p.node) != p.node:
                    out.append(f"GPU group {g} is on two nodes ({state.nodes[group_node[g]].name}, {state.nodes[p.node].name})")
                mem[(p.node, g)] = mem.get((p.node, g), 0) + need
        else:
            whole[p.node] += r.gpus
    in_use: dict[int, int] = {}
    new_devices: dict[int, int] = {}
    for (n, g), m in mem.items():
        cap = state.nodes[n].gpu_memory
        if m > cap:
            out.append(f"node {state.nodes[n].name}: GPU group {g} holds {m} MiB > {cap} MiB")
        if g not in state.nodes[n].gpu_groups:
            new_devices[n] = new_devices.get(n, 0) + 1
        in_use[n] = in_use.get(n, 0) + 1
    freed = np.zeros(len(state.nodes), dtype=np.int64)
    for e in session.evictions.values():
        freed[e.node] += e.vec[2]
    for n in set(new_devices) | set(np.nonzero(whole)[0].tolist()):
        free = int(table.free[n, 2] + freed[n])
        if whole[n] + new_devices.get(n, 0) > free:
            out.append(f"node {state.nodes[n].name}: {whole[n]} whole GPUs and {new_devices.get(n, 0)} new shared GPUs "
                       f"placed, {free} GPUs free")
    return out
