"""Many cycles in a row with arrivals and completions: how queue allocation converges to fair
share, and what each cycle bound and evicted.

It applies decisions the way `kai-cp simulate` does (`kai_cp.simulate.apply_decisions`: bound
pods run, evicted pods come back pending, pipelined pods wait) and adds what a notebook
needs on top: new jobs arriving per cycle, jobs finishing after a run time, a progress bar,
and per-cycle tables.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

import pandas as pd

from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.explore.cluster import Cluster
from kai_cp.explore.cycle import Cycle
from kai_cp.loader import dump_snapshot
from kai_cp.progress import progress as progress_bar
from kai_cp.simulate import apply_decisions, schedule_period
from kai_cp.state import POD_GROUP_ANNOTATION, build_cluster_state
from models import Pod, PodGroup

Arrivals = Callable[[int], Iterable[dict]]


@dataclass
class Simulation:
    summaries: pd.DataFrame                    # one row per cycle (Cycle.summary plus arrivals, completions)
    queues: pd.DataFrame                       # long: cycle, queue, fair_share, allocated before/after, requested
    final: Cluster                             # the cluster after the last cycle's decisions
    invalid: list[str] = field(default_factory=list)   # every violation of every cycle, prefixed by cycle

    @classmethod
    def run(cls, cluster: Cluster, cycles: int, settings: CycleSettings, arrivals: Arrivals | None = None,
            runtime: int | None = None, progress: bool = True, resource: str = "gpu") -> "Simulation":
        """`arrivals(i)` returns objects (PodGroups and Pods, e.g. `job_objects(...)`) created
        before cycle i; `runtime`: a job bound during the simulation completes (its pods and
        PodGroup are deleted) that many cycles after its first bind. The clock starts at
        `settings.now` (or the wall clock) and advances by the snapshot's schedule period."""
        loaded = cluster.copy().loaded           # decisions are applied to this copy only
        period = schedule_period(loaded)
        start = settings.now if settings.now is not None else time.time()
        started_at: dict[str, int] = {}
        gone: set[str] = set()
        rows, queue_rows, invalid = [], [], []
        for i in progress_bar(range(cycles), desc=f"simulate ({settings.engine})", enabled=progress):
            arrived = _arrive(loaded, arrivals(i)) if arrivals is not None else 0
            done = _complete(loaded, started_at, i - runtime) if runtime is not None else 0
            result = run_cycle(build_cluster_state(loaded), replace(settings, now=start + i * period))
            cyc = Cycle(result)
            rows.append({"cycle": i, **cyc.summary(), "arrived_jobs": arrived, "completed_jobs": done})
            invalid += [f"cycle {i}: {v}" for v in cyc.invalid()]
            q = cyc.queues(resource)
            queue_rows.append(q.reset_index().assign(cycle=i)[["cycle", "queue", "parent", "leaf", "fair_share",
                                                               "allocated_before", "allocated", "requested",
                                                               "deserved"]])
            for p in result.session.placements.values():
                if not p.pipelined:
                    started_at.setdefault(p.task.job, i)
            gone = apply_decisions(loaded, result, gone)
        final = Cluster(dump_snapshot(loaded.snapshot, loaded.raw_invalid), f"{cluster.name} [after {cycles} cycles]")
        return cls(pd.DataFrame(rows).set_index("cycle"), pd.concat(queue_rows, ignore_index=True), final, invalid)

    def allocation(self, leaves_only: bool = True) -> pd.DataFrame:
        """Allocated per cycle (rows) and queue (columns): what a convergence plot draws."""
        q = self.queues[self.queues["leaf"]] if leaves_only else self.queues
        return q.pivot(index="cycle", columns="queue", values="allocated")

    def fair_share(self, leaves_only: bool = True) -> pd.DataFrame:
        q = self.queues[self.queues["leaf"]] if leaves_only else self.queues
        return q.pivot(index="cycle", columns="queue", values="fair_share")


def _arrive(loaded, objects: Iterable[dict]) -> int:
    raw = loaded.snapshot.raw_objects
    jobs = 0
    for o in objects:
        kind = o.get("kind")
        if kind == "PodGroup":
            raw.pod_groups.append(PodGroup.model_validate(o))
            jobs += 1
        elif kind == "Pod":
            raw.pods.append(Pod.model_validate(o))
        else:
            raise ValueError(f"arrivals may only create PodGroups and Pods, not {kind!r}")
    return jobs


def _complete(loaded, started_at: dict[str, int], before: int) -> int:
    """Delete the jobs first bound at a cycle <= `before` (they ran their course)."""
    done = {job for job, c in started_at.items() if c <= before}
    if not done:
        return 0
    raw = loaded.snapshot.raw_objects
    raw.pods = [p for p in raw.pods if (p.metadata.annotations or {}).get(POD_GROUP_ANNOTATION) not in done]
    raw.pod_groups = [g for g in raw.pod_groups if g.metadata.name not in done]
    for job in done:
        del started_at[job]
    return len(done)
