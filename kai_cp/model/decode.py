"""Turn the model's counts into placements, replayed through a Session so that binding versus
pipelining and every bookkeeping rule is applied exactly as for the greedy engine."""

from __future__ import annotations

import numpy as np

from kai_cp.actions.allocate import should_pipeline
from kai_cp.model.base import ModelContext
from kai_cp.model.candidates import greedy_class_nodes, pair_counts
from kai_cp.model.victim_pool import _legal, _reclaims
from kai_cp.model.gpu_sharing import place_shared_chunk
from kai_cp.actions.preempt import preempt_message
from kai_cp.actions.reclaim import reclaim_message
from kai_cp.session import Session


def is_greedys(ctx: ModelContext, counts: np.ndarray) -> bool:
    """Whether the solution puts every class's pods on exactly the nodes greedy's allocation put
    them (before compaction changed the hint), and no others: then greedy's own session is its
    decoding, and a lean model's (model/scope.py) eviction actions after it would repeat
    greedy's. Only for a model without eviction variables."""
    placed = greedy_class_nodes(ctx.greedy, ctx.classes)
    want = pair_counts(ctx.pair_class, ctx.pair_node, placed)
    if sum(want.values()) != sum(len(nodes) for nodes in placed.values()):
        return False            # greedy put a pod on a node that is no candidate of its class
    nonzero = np.flatnonzero(counts)
    return len(nonzero) == len(want) and all(want.get(i) == int(counts[i]) for i in nonzero.tolist())


def decode(ctx: ModelContext, counts: np.ndarray) -> Session:
    state = ctx.state
    session = Session.open(state)
    victims = _evict(ctx, session, counts)
    per_class: dict[int, list[tuple[int, int]]] = {}
    for i in np.nonzero(counts)[0]:
        per_class.setdefault(int(ctx.pair_class[i]), []).append((int(ctx.pair_node[i]), int(counts[i])))
    # Jobs in KAI's order take idle capacity first; later ones pipeline onto releasing capacity.
    # A job that may take the pods evicted on a node it is placed on goes after the others: the
    # model lets only such jobs use what evictions free, so they are the ones pipelined there
    # (eviction actions never bind their preemptor), the others keep the idle capacity.
    rank = {j: r for r, j in enumerate(ctx.greedy.order)}
    lost: dict[int, list] = {}
    for u, t in victims:
        lost.setdefault(session.evictions[t.key].node, []).append(u)

    def takes_freed(c: int) -> bool:
        job = ctx.classes[c].job
        return any(_legal(u, job, ctx.state) for n, _ in per_class[c] for u in lost.get(n, ()))
    greedy_node = {k: p.node for k, p in ctx.greedy.session.placements.items()}
    pair_of = {(int(c), int(n)): i for i, (c, n) in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
    first = ctx.extensions.get("nominated-first", ())       # kai_cp/model/nominated.py: bound, on idle
    for c in sorted(per_class, key=lambda c: (ctx.classes[c].job.name not in first, takes_freed(c),
                                              rank[ctx.classes[c].job.name], c)):
        assigned = _assign(ctx.classes[c].tasks, per_class[c], greedy_node)
        if ctx.classes[c].tasks[0].request.is_shared_gpu:
            chunks: dict[int, list] = {}
            for task, node in assigned:
                chunks.setdefault(node, []).append(task)
            for node in sorted(chunks):
                place_shared_chunk(ctx, session, pair_of[(c, node)], node, chunks[node])
            continue
        for task, node in assigned:
            vec = state.table.vector(task)
            need = vec > 0
            fits_idle = bool(np.all(session.idle[node, need] >= vec[need]))
            session.place(task, node, pipelined=not fits_idle)
    for job_name in sorted({ctx.classes[c].job.name for c in per_class}):
        job = state.jobs[job_name]
        if should_pipeline(job, session):
            session.convert_to_pipelined(job)
    _attribute(ctx, session, victims)
    return session


def _evict(ctx: ModelContext, session: Session, counts: np.ndarray) -> list:
    """The model's evictions, first, so that what they free is there for the placements (which
    then pipeline onto it). Among interchangeable victims the best in KAI's victim order go."""
    out = []
    for u, plan in ctx.extensions.get("eviction-units", []):
        chosen = []
        for ts, var, how in plan:
            k = ctx.aux_values.get(var.index, 0)
            if not k:
                continue
            chosen += ts if how == "all" else (ts[:k] if how == "first" else ts[len(ts) - k:])
        for t in chosen:
            session.evict(t, "", None, "")
            out.append((u, t))
    return out


def _attribute(ctx: ModelContext, session: Session, victims: list) -> None:
    """Each eviction's action and preemptor: a job placed on the victim's node (any of a gang
    victim's nodes) that may take it, reclaim first, then preempt (KAI's action order); a job
    pipelined there (on the capacity the victims free) before one bound on idle capacity.

    A preemptor found only among the jobs bound on idle capacity is pipelined: the model fixes
    each node's total, while which placed pods take its idle capacity and which the freed one is
    decode's choice, and the choice above (KAI's order first on idle) can leave the one job that
    may take a victim bound while another queue's job, not allowed to take it, pipelines there
    (a reclaim in disguise). Pipelining that job instead is the same node totals, and the
    eviction's preemptor waits for it as KAI's eviction actions' preemptors do."""
    state = ctx.state
    rank = {j: r for r, j in enumerate(ctx.greedy.order)}
    # A job KAI's allocate binds on its nominated nodes keeps its binds (model/nominated.py):
    # among the jobs bound there, it is the last to be named a preemptor and pipelined.
    first = ctx.extensions.get("nominated-first", ())

    def order_on_nodes() -> dict[int, list]:
        on_node: dict[int, dict] = {}
        for p in session.placements.values():
            jobs = on_node.setdefault(p.node, {})
            job = state.jobs[p.task.job]
            jobs[job.name] = (min(jobs.get(job.name, (1,))[0], 0 if p.pipelined else 1), job)
        return {n: sorted(jobs.values(), key=lambda e: (e[0], e[1].name in first, rank.get(e[1].name, 1 << 30)))
                for n, jobs in on_node.items()}
    ordered = order_on_nodes()
    lines: dict = {}
    common: dict[tuple[str, str], int] = {}       # (queue, queue) -> ancestors they share

    def _near(a: str, b: str) -> int:
        key = (a, b)
        if key not in common:
            common[key] = len({q.name for q in state.queue_path(a)} & {q.name for q in state.queue_path(b)})
        return common[key]

    def wait_for_victims(job) -> None:
        """An eviction's preemptor waits for its victims: pipelined, unless a pod of it is already."""
        nonlocal ordered
        if not any(session.placements[p.key].pipelined for p in job.tasks if p.key in session.placements):
            session.convert_to_pipelined(job)
            ordered = order_on_nodes()
    for u, t in victims:
        ev = session.evictions[t.key]
        nodes = [ev.node] + [n for n in u.nodes if n != ev.node]
        pick = None
        # The model leaves a victim out of a level's gate 2 when a queue inside the level that
        # may reclaim it places a pod on its nodes: the nearest reclaiming queue is its
        # preemptor then, even one bound on idle capacity (it waits for the victim from now on).
        near_all = max((_near(j.queue, u.queue) for n in nodes for _, j in ordered.get(n, [])
                        if _reclaims(u, j, state)), default=-1)
        # A job pipelined on any of the victim's nodes before one bound on idle capacity: an
        # eviction's preemptor waits for it (a gang victim frees all its nodes at once).
        for bound_too in (False, True):
            closest = -1
            for n in nodes:
                for bound, j in ordered.get(n, []):
                    if bound and not bound_too:
                        break
                    if _reclaims(u, j, state):
                        # Among reclaiming queues the one nearest the victim's in the tree: the
                        # model gates a unit at a level only when no queue inside it places there
                        # (evictions.py, gate 2).
                        near = _near(j.queue, u.queue)
                        if near > closest:
                            pick, closest = ("reclaim", j), near
                    elif u.preempt and j.queue == u.queue and j.priority > u.priority and pick is None:
                        pick = ("preempt", j)
                # a reclaiming queue farther than the nearest on the victim's nodes: look on
                # (naming the first node's let a reclaim the model gated below a level cross it)
                if pick is not None and (pick[0] != "reclaim" or closest >= near_all):
                    break
            if pick is not None and pick[0] == "reclaim" and closest < near_all and not bound_too:
                pick = None          # a nearer reclaiming queue is bound here: the next pass names it
            if pick is not None:
                if bound_too:
                    wait_for_victims(pick[1])
                break
        if pick is None:
            # KAI's own eviction (the model keeps greedy's evictions possible without a candidate
            # beside them: KAI's scenarios evict a victim job on nodes its preemptor then does not
            # use): KAI's preemptor, whose placement the model requires of such an eviction
            # (evictions.py kai_preemptor_placed: one of the unit's KAI preemptors, this pod's
            # own first).
            greedy_ev = ctx.greedy.session.evictions
            for k in [t.key] + [o.key for o in u.tasks if o.key != t.key]:
                kai = greedy_ev.get(k)
                if kai is not None and kai.for_job in state.jobs and any(
                        p.key in session.placements for p in state.jobs[kai.for_job].tasks):
                    pick = (kai.action, state.jobs[kai.for_job])
                    wait_for_victims(pick[1])
                    break
        if pick is None:          # cannot happen with the model's justification constraints
            raise AssertionError(f"eviction of {t.key} has no preemptor placed on its nodes")
        action, job = pick
        ev.action, ev.for_job = action, job.name
        ev.message = (reclaim_message(state, session, t, job, lines) if action == "reclaim" else preempt_message(t, job))


def _assign(tasks: list, node_counts: list[tuple[int, int]], greedy_node: dict[str, int]) -> list[tuple]:
    """Pods of one class onto the chosen counts per node: a pod keeps the node greedy gave it where the
    model kept a count there (so equal answers name the same pod as KAI), the rest in task order."""
    left = dict(node_counts)
    out, rest = [], []
    for t in tasks:
        n = greedy_node.get(t.key)
        if n is not None and left.get(n, 0) > 0:
            left[n] -= 1
            out.append((t, n))
        else:
            rest.append(t)
    it = iter(rest)
    for node in sorted(left):
        for _ in range(left[node]):
            out.append((next(it), node))
    order = {t.key: i for i, t in enumerate(tasks)}
    return sorted(out, key=lambda tn: order[tn[0].key])
