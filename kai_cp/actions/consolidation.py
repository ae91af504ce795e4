"""KAI's consolidation action (spec 6.3): make room for a pending preemptible job by moving
running preemptible pods elsewhere (bin packing). A solution is valid only if every victim is
re-placed: nothing is really evicted."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from kai_cp.actions.preemptors import ActionPass, pending_jobs
from kai_cp.arrays import distinct
from kai_cp.actions.victims import Solution, Victim, VictimQueue, preemptible_running, victim_heads
from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.ordering import tasks_to_allocate
from kai_cp.session import Session
from kai_cp.state import ClusterState

ACTION = "consolidation"
NOT_READY = "node has NotReady condition"     # kai_cp.nodes.not_ready_reason


class ConsolidationPolicy:
    action = ACTION
    moves_victims = True          # every victim is placed again (6.3): nothing is really evicted

    def __init__(self, state: ClusterState, session: Session):
        self.state, self.session = state, session
        self.max_jobs = state.config.max_consolidation_preemptees
        self._first: tuple | None = None          # (session version, victims in victim order)
        self._free: tuple | None = None           # (session version, _available())

    def eligible(self, job: JobInfo) -> str | None:
        if not job.preemptible:
            return "consolidation: only preemptible jobs are placed by moving others"
        # Pre-check (6.1): enough idle + releasing GPU in the cluster for the step, counting the
        # free parts of shared GPUs, and enough GPU memory for GPU-memory requests.
        need, need_mem = Fraction(0), 0
        for t in tasks_to_allocate(job, self.session):
            r = t.request
            if r.kind == "Fraction":
                need += r.gpu_portion * max(r.devices, 1)
            elif r.kind == "GpuMemory":
                need_mem += r.gpu_memory * max(r.devices, 1)
            elif not r.is_shared_gpu:
                need += r.gpus
        if not need and not need_mem:
            return None
        gpus, mem = self._available()
        if need > gpus or need_mem > mem:
            return (f"consolidation: the cluster has {float(gpus):g} free GPUs ({mem} MiB) and the job "
                    f"needs {float(need):g} ({need_mem} MiB); moving pods cannot make room")
        return None

    def _available(self) -> tuple[Fraction, int]:
        """Idle + releasing GPUs of the cluster's Ready nodes (KAI's getSumOfAvailableGPUs): whole
        ones, plus the free part of each shared GPU. Kept while the session holds the same
        committed decisions: every pending job the action pops asks it again."""
        s = self.session
        key = s.version
        if self._free is not None and self._free[0] == key:
            return self._free[1]
        ready = self._ready()
        whole = np.where(ready, np.maximum(s.free[:, 2], 0), 0)
        gpus = Fraction(int(whole.sum()))
        mem = int((whole * s.shared.capacity).sum())
        # each shared GPU's room as a fraction of its node's device memory, summed exactly per
        # distinct device size (a Fraction per device was most of this at 10,000 nodes)
        nodes, rooms = s.shared.rooms()
        joinable = (rooms > 0) & ready[nodes]
        if joinable.any():
            caps = np.maximum(s.shared.capacity[nodes[joinable]], 1)
            rooms = rooms[joinable]
            mem += int(rooms.sum())
            for cap in distinct(caps).tolist():
                gpus += Fraction(int(rooms[caps == cap].sum()), cap)
        self._free = (key, (gpus, mem))
        return gpus, mem

    def _ready(self) -> np.ndarray:
        """Nodes without a NotReady condition (fixed for the state)."""
        ready = self.state.__dict__.get("_consolidation_ready")
        if ready is None:
            ready = self.state.__dict__["_consolidation_ready"] = np.array(
                [n.not_ready_reason != NOT_READY for n in self.state.nodes], dtype=bool)
        return ready

    def victim_jobs(self, preemptor: JobInfo) -> list[Victim]:
        key = self.session.version
        if self._first is None or self._first[0] != key:
            out = None
            if self.max_jobs >= 0:
                # KAI accepts while counter <= max (quirk: max + 1 jobs), counting in Go map order,
                # so which jobs it considers is random; kai-cp keeps the first max + 1 in victim
                # order (3.8), the jobs KAI's search would try first had they all been accepted
                # (one spare, for when the preemptor itself is among them).
                pops = self.max_jobs + 2
                heads, total = victim_heads(self.session, pops)
                if total > self.max_jobs + 1:
                    vq = VictimQueue(self.session, heads, pops)
                    out = [v for v in (vq.pop() for _ in range(pops)) if v is not None]
            if out is None:           # every victim, in job order per queue
                out = [v for vs in preemptible_running(self.session).values() for v in vs]
            self._first = (key, out)
        out = [v for v in self._first[1] if v.job is not preemptor]
        return out[:self.max_jobs + 1] if self.max_jobs >= 0 else out

    def fewest_victims(self, preemptor: JobInfo) -> int:
        return 0        # (a few: maxConsolidationPreemptees, or every victim of a small cluster)

    def message(self, victim: TaskInfo, preemptor: JobInfo) -> str:
        return (f"Pod {victim.key} was preempted and rescheduled due to bin packing (resource consolidation) "
                f"procedure")

    def validate(self, preemptor: JobInfo, tasks: list[TaskInfo], solution: Solution) -> str | None:
        if solution.evicted:
            return f"consolidation would really evict {solution.evicted[0].key}"
        return None

    def failure(self, preemptor: JobInfo) -> str:
        return "consolidation: no set of running preemptible pods could be moved elsewhere to make room for it"


def enabled(state: ClusterState) -> bool:
    cfg = state.config
    return cfg.max_consolidation_preemptees != 0 and cfg.gpu_placement != "spread" and cfg.cpu_placement != "spread"


def consolidation_pass(state: ClusterState, session: Session) -> ActionPass | None:
    """None where the configuration disables consolidation."""
    if not enabled(state):
        return None
    policy = ConsolidationPolicy(state, session)
    return ActionPass(state, session, policy, policy.eligible,
                      [j for j in pending_jobs(state, session) if j.preemptible], per_queue_signatures=False)
