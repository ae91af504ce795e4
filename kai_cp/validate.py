"""Independent check of a cycle's decisions against the invariants every engine must keep:
node resources, static predicates, gang minimums, queue limits and the non-preemptible quota.

It shares no code with the engines' constraint logic, so tests (and a paranoid caller) can use
it to catch a model or greedy bug rather than repeat it.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from kai_cp.gpu_sharing import task_memory
from kai_cp.jobs import ACTIVE_ALLOCATED, JobInfo, queue_gpu_of_accepted
from kai_cp.queues import RESOURCES
from kai_cp.session import Session
from kai_cp.state import ClusterState


def _topology_violations(state: ClusterState, session: Session, job: JobInfo) -> list[str]:
    out = []
    index = state.table.index
    for scope in job.scope.walk():
        c = scope.constraint
        if c is None or c.required is None:
            continue
        dom = c.tree.domain_of(c.required)
        new, running = set(), set()
        for ps in scope.podsets:
            for t in job.podsets[ps].tasks:
                p = session.placements.get(t.key)
                if p is not None:
                    new.add(int(dom[p.node]))
                elif t.status in ACTIVE_ALLOCATED and t.node in index:
                    running.add(int(dom[index[t.node]]))
        running.discard(-1)                  # pods outside the topology do not pin the scope
        if -1 in new:
            out.append(f"job {job.name} {scope.label}: a pod is placed on a node outside topology {c.tree.name}")
        # KAI (8.3): new pods go to one domain, or, where the scope's pods already run, to the
        # domains hosting them (a scope that runs in two racks may grow in either)
        if (not new <= running) if running else len(new) > 1:
            names = sorted(c.tree.domain_name(c.required, d) for d in new if d >= 0)
            out.append(f"job {job.name} {scope.label}: new pods span {', '.join(names)} at required level "
                       f"{c.required_name} (running pods in {len(running)} domain(s))")
    return out


assert RESOURCES == ("cpu", "memory", "gpu")        # the order the queue sums below use


def _exact(v: int | Fraction) -> int | Fraction:
    """An int where the value is whole: int sums are ~100x cheaper than Fraction ones."""
    return v.numerator if isinstance(v, Fraction) and v.denominator == 1 else v


def violations(state: ClusterState, session: Session) -> list[str]:
    out: list[str] = []
    table = state.table
    # Node resources and predicates.
    load = np.zeros_like(table.allocatable)
    for p in session.placements.values():
        vec = p.vec if p.vec is not None else table.vector(p.task)
        load[p.node] += vec
        if not state.predicates.mask(p.task.predicate_key)[p.node] and not p.task.request.best_effort:
            out.append(f"{p.task.key} placed on {state.nodes[p.node].name}, which fails its predicates")
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
    # Queue limits and non-preemptible quota, at every level: each job's change summed at its
    # leaf queue (whole numbers as ints, the rare fractional GPU as a Fraction), then carried up.
    leaf: dict[tuple[str, bool], list] = {}
    nodes = state.nodes
    for sign, tasks in ((1, session.placements.values()), (-1, session.evictions.values())):
        for p in tasks:
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
    out += eviction_violations(state, session)
    for qname, add in added.items():
        q = state.queues[qname]
        for i, r in enumerate(RESOURCES):
            if add[i] > 0 and q.limit[r] != -1 and q.allocated[r] + add[i] > max(q.limit[r], q.allocated[r]):
                out.append(f"queue {qname}: {r} {q.allocated[r] + add[i]} over limit {q.limit[r]}")
    for qname, add in added_np.items():
        q = state.queues[qname]
        for i, r in enumerate(RESOURCES):
            if add[i] > 0 and q.deserved[r] != -1 and q.allocated_np[r] + add[i] > max(q.deserved[r], q.allocated_np[r]):
                out.append(f"queue {qname}: non-preemptible {r} {q.allocated_np[r] + add[i]} over quota {q.deserved[r]}")
    return out


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
