"""Turn the model's counts into placements, replayed through a Session so that binding versus
pipelining and every bookkeeping rule is applied exactly as for the greedy engine."""

from __future__ import annotations

import numpy as np

from kai_cp.greedy import should_pipeline
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
    pair_of = {(int(c), int(n)): i for i, (c, n) in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
    for c in sorted(per_class, key=lambda c: (rank[ctx.classes[c].job.name], c)):
        cls = ctx.classes[c]
        tasks = iter(cls.tasks)
        for node, n in sorted(per_class[c]):
            chunk = [next(tasks) for _ in range(n)]
            if chunk[0].request.is_shared_gpu:
                place_shared_chunk(ctx, session, pair_of[(c, node)], node, chunk)
                continue
            for task in chunk:
                vec = state.table.vector(task)
                need = vec > 0
                fits_idle = bool(np.all(session.idle[node, need] >= vec[need]))
                session.place(task, node, pipelined=not fits_idle)
    for job_name in {ctx.classes[c].job.name for c in per_class}:
        job = state.jobs[job_name]
        if should_pipeline(job, session):
            session.convert_to_pipelined(job)
    return session
