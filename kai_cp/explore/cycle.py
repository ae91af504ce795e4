"""One cycle's decisions as tables: what was bound, pipelined, evicted, why the rest waits, and
the queues, shared GPUs and topology domains as they will be once the decisions take effect.

Why not just the decisions JSON: a person tuning queues asks "how far is each queue from its
fair share now" and "which rack did the gang land in"; those need the decisions joined with
the state they were made on, which this module does once for every notebook.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

import pandas as pd

from kai_cp.cycle import CycleResult
from kai_cp.explore import tables
from kai_cp.gpu_sharing import task_memory
from kai_cp.jobs import queue_gpu_of_accepted
from kai_cp.queues import ancestors
from kai_cp.reasons import unschedulable
from kai_cp.validate import eviction_violations, shared_gpu_violations, violations


@dataclass
class Cycle:
    result: CycleResult

    # ------------------------------------------------------------------ headline

    def summary(self) -> dict:
        r = self.result
        binds, piped, evs = self.binds(), self.pipelined(), self.evictions()
        gap = None
        if r.objective is not None and r.bound is not None:
            gap = abs(r.bound - r.objective) / max(1.0, abs(r.bound))
        started = {p.task.job for p in r.session.placements.values()}
        return {
            "engine": r.engine, "status": r.status, "objective": r.objective, "bound": r.bound, "gap": gap,
            "greedy_objective": r.stats.get("greedyObjective"), "fallback_reason": r.stats.get("fallbackReason"),
            "seconds": r.wall_seconds, "time_limit": r.settings.time_limit,
            "pods_bound": len(binds), "pods_pipelined": len(piped), "pods_evicted": len(evs),
            "gpus_placed": float(binds["gpus"].sum() + piped["gpus"].sum()) if len(binds) + len(piped) else 0.0,
            "gpus_evicted": float(evs["gpus"].sum()) if len(evs) else 0.0,
            "jobs_placed": len(started), "jobs_pending": len(self.pending()),
            "invalid": len(self.invalid()),
        }

    def invalid(self) -> list[str]:
        """Every rule a decision breaks, by the engine-independent checker (`kai_cp/validate.py`)."""
        s, st = self.result.session, self.result.state
        return violations(st, s) + eviction_violations(st, s) + shared_gpu_violations(st, s)

    def decisions(self) -> dict:
        """The same document `kai-cp solve` prints."""
        return self.result.to_json()

    # ------------------------------------------------------------------ decisions

    def _placements(self, pipelined: bool) -> pd.DataFrame:
        st = self.result.state
        rows = []
        for p in sorted(self.result.session.placements.values(), key=lambda p: p.task.key):
            if p.pipelined != pipelined:
                continue
            node = st.nodes[p.node]
            job = st.jobs.get(p.task.job)
            rows.append({"pod": p.task.key, "job": p.task.job, "queue": job.queue if job else None,
                         "node": node.name, "gpus": float(queue_gpu_of_accepted(p.task, node.gpu_memory)),
                         "shared": p.task.request.is_shared_gpu, "gpu_groups": ",".join(p.gpu_groups)})
        return pd.DataFrame(rows, columns=["pod", "job", "queue", "node", "gpus", "shared", "gpu_groups"])

    def binds(self) -> pd.DataFrame:
        return self._placements(False)

    def pipelined(self) -> pd.DataFrame:
        """Pods placed on capacity that is being released (they bind once it is free)."""
        return self._placements(True)

    def evictions(self) -> pd.DataFrame:
        st = self.result.state
        rows = []
        for e in sorted(self.result.session.evictions.values(), key=lambda e: e.task.key):
            job = st.jobs.get(e.task.job)
            node = st.nodes[e.node]
            rows.append({"pod": e.task.key, "job": e.task.job, "queue": job.queue if job else None,
                         "node": node.name, "action": e.action, "for_job": e.for_job,
                         "gpus": float(queue_gpu_of_accepted(e.task, node.gpu_memory)), "message": e.message})
        return pd.DataFrame(rows, columns=["pod", "job", "queue", "node", "action", "for_job", "gpus", "message"])

    def pending(self) -> pd.DataFrame:
        """Every job left (partly) pending, with all its reasons joined (one line each)."""
        r = self.result
        rows = []
        for u in unschedulable(r.state, r.greedy, r.session, r.engine):
            job = r.state.jobs.get(u["podGroup"])
            rows.append({"job": u["podGroup"], "queue": job.queue if job else None,
                         "reason": u["reasons"][0] if u["reasons"] else "",
                         "reasons": "\n".join(u["reasons"])})
        return pd.DataFrame(rows, columns=["job", "queue", "reason", "reasons"])

    # ------------------------------------------------------------------ the cluster after

    def queue_delta(self, resource: str = "gpu") -> dict[str, Fraction]:
        """Per queue (leaf and ancestors): what the cycle adds (bound and pipelined) minus what
        it evicts, in the engine's units."""
        st = self.result.state
        delta: dict[str, Fraction] = defaultdict(Fraction)

        def add(task, node_index: int, sign: int) -> None:
            job = st.jobs.get(task.job)
            if job is None or job.queue not in st.queues:
                return
            node = st.nodes[node_index]
            r = task.request
            amount = {"gpu": queue_gpu_of_accepted(task, node.gpu_memory), "cpu": r.cpu, "memory": r.memory}[resource]
            for q in ancestors(st.queues, job.queue):
                delta[q.name] += sign * Fraction(amount)

        for p in self.result.session.placements.values():
            add(p.task, p.node, +1)
        for e in self.result.session.evictions.values():
            add(e.task, e.node, -1)
        return delta

    def queues(self, resource: str = "gpu") -> pd.DataFrame:
        """The queue table with the cycle applied: `allocated_before`, `allocated` (after: plus
        placed, minus evicted) and `gap` = allocated - fair share."""
        st = self.result.state
        delta = self.queue_delta(resource)
        before = tables.queues_table(st, resource)
        after = {q.name: q.allocated[resource] + delta.get(q.name, 0) for q in st.queues.values()}
        df = tables.queues_table(st, resource, allocated=after)
        df.insert(df.columns.get_loc("allocated"), "allocated_before", before["allocated"])
        df["gap"] = df["allocated"] - df["fair_share"]
        return df

    def jobs(self) -> pd.DataFrame:
        """The job table with this cycle's outcome per job."""
        df = tables.jobs_table(self.result.state)
        if df.empty:
            return df
        placed = self.binds().groupby("job").size()
        piped = self.pipelined().groupby("job").size()
        evicted = self.evictions().groupby("job").size()
        pend = self.pending().set_index("job")["reasons"]
        df["bound"] = placed.reindex(df.index).fillna(0).astype(int)
        df["pipelined"] = piped.reindex(df.index).fillna(0).astype(int)
        df["evicted"] = evicted.reindex(df.index).fillna(0).astype(int)
        df["why_pending"] = pend.reindex(df.index).fillna("")
        return df

    def shared_devices(self) -> pd.DataFrame:
        """Pods per shared GPU after the cycle: the snapshot's (evicted ones marked `evicted`)
        plus the cycle's new fractional pods (`new`, or `pipelined`)."""
        st = self.result.state
        df = tables.shared_devices_table(st)
        gone = {e.task.key for e in self.result.session.evictions.values()}
        if len(df):
            df.loc[df["pod"].isin(gone), "state"] = "evicted"
        rows = []
        for p in self.result.session.placements.values():
            if not p.gpu_groups:
                continue
            node = st.nodes[p.node]
            mem = task_memory(p.task.request, node.gpu_memory)
            for g in p.gpu_groups:
                rows.append({"node": node.name, "device": g, "pod": p.task.key, "job": p.task.job, "memory_MiB": mem,
                             "fraction": mem / node.gpu_memory if node.gpu_memory else math.nan,
                             "state": "pipelined" if p.pipelined else "new"})
        return pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True) if rows else df

    def domains(self, topology: str | None = None) -> pd.DataFrame:
        """Topology domains with the GPUs this cycle placed in each and the jobs it placed there."""
        st = self.result.state
        df = tables.domains_table(st, topology)
        if df.empty:
            return df
        tree = st.topologies[df.attrs["topology"]]
        placed = defaultdict(float)
        jobs = defaultdict(set)
        for p in self.result.session.placements.values():
            node = st.nodes[p.node]
            gpus = float(queue_gpu_of_accepted(p.task, node.gpu_memory))
            for lv in range(len(tree.levels)):
                d = int(tree.domain[lv][p.node])
                if d >= 0:
                    placed[(lv, d)] += gpus
                    jobs[(lv, d)].add(p.task.job)
        keys = [(row.depth, tree.names[row.depth].index(row.domain)) for row in df.itertuples()]
        df["gpus_placed"] = [placed.get(k, 0.0) for k in keys]
        df["jobs_placed"] = [", ".join(sorted(jobs.get(k, ()))) for k in keys]
        return df

    def gangs(self, topology: str | None = None) -> pd.DataFrame:
        """Per job placed this cycle: pods, nodes and the number of domains it spans per level
        (1 at a level = compact there), with its required and preferred levels."""
        st = self.result.state
        by_job = defaultdict(list)
        for p in self.result.session.placements.values():
            by_job[p.task.job].append(p.node)
        tree = None
        if st.topologies:
            tree = st.topologies[topology or sorted(st.topologies)[0]]
        rows = []
        for job_name, nodes in sorted(by_job.items()):
            job = st.jobs.get(job_name)
            c = job.topology_constraint if job else None
            row = {"job": job_name, "queue": job.queue if job else None, "pods": len(nodes),
                   "nodes": len(set(nodes)),
                   "required_level": getattr(c, "required_topology_level", None) if c else None,
                   "preferred_level": getattr(c, "preferred_topology_level", None) if c else None}
            if tree is not None:
                for lv, label in enumerate(tree.levels):
                    row[f"{label} domains"] = len({int(tree.domain[lv][n]) for n in nodes} - {-1})
            rows.append(row)
        return pd.DataFrame(rows).set_index("job") if rows else pd.DataFrame(columns=["job"]).set_index("job")


def compare(cycles: dict[str, Cycle]) -> pd.DataFrame:
    """Summaries side by side (one row per named cycle)."""
    return pd.DataFrame({name: c.summary() for name, c in cycles.items()}).T


def placed_jobs(c: Cycle) -> set[str]:
    return {p.task.job for p in c.result.session.placements.values()}


def difference(a: Cycle, b: Cycle) -> pd.DataFrame:
    """Jobs one cycle placed and the other did not, with the other's reason."""
    pa, pb = placed_jobs(a), placed_jobs(b)
    why_a = a.pending().set_index("job")["reason"]
    why_b = b.pending().set_index("job")["reason"]
    rows = [{"job": j, "placed_by": a.result.engine, "other_says": why_b.get(j, "")} for j in sorted(pa - pb)]
    rows += [{"job": j, "placed_by": b.result.engine, "other_says": why_a.get(j, "")} for j in sorted(pb - pa)]
    return pd.DataFrame(rows, columns=["job", "placed_by", "other_says"])
