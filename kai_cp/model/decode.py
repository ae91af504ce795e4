"""Turn the model's counts into placements, replayed through a Session so that binding versus
pipelining and every bookkeeping rule is applied exactly as for the greedy engine."""

from __future__ import annotations

import numpy as np

from kai_cp.actions.allocate import should_pipeline
from kai_cp.model.base import ModelContext
from kai_cp.model.gpu_sharing import place_shared_chunk
from kai_cp.session import Session


def decode(ctx: ModelContext, counts: np.ndarray) -> Session:
    state = ctx.state
    session = Session.open(state)
    per_class: dict[int, list[tuple[int, int]]] = {}
    for i in np.nonzero(counts)[0]:
        per_class.setdefault(int(ctx.pair_class[i]), []).append((int(ctx.pair_node[i]), int(counts[i])))
    # Jobs in KAI's order take idle capacity first; later ones pipeline onto releasing capacity.
    rank = {j: r for r, j in enumerate(ctx.greedy.order)}
    greedy_node = {k: p.node for k, p in ctx.greedy.session.placements.items()}
    pair_of = {(int(c), int(n)): i for i, (c, n) in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
    for c in sorted(per_class, key=lambda c: (rank[ctx.classes[c].job.name], c)):
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
    return session


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
