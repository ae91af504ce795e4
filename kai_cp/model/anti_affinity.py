"""Required pod anti-affinity among pods placed in the same cycle (spec 5.3, InterPodAffinity).

Against pods already running the terms are a static node mask (kai_cp/pod_affinity.py). Among
the pods this cycle places, a pod carrying a term may not share a `topologyKey` domain with a pod
the term selects: per carrier class, term and domain, a Boolean "a carrier is here" forbids
every selected pod there, except the carrier itself when it is selected too (then at most one
such pod in the domain: "one worker per node"). Only domains where carriers have candidates get
a constraint, so clusters without such terms add nothing.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.arrays import distinct
from kai_cp.model.base import ModelContext
from kai_cp.pod_affinity import anti_terms_of, carries_anti_affinity, labels_of


class AntiAffinity:
    name = "pod-anti-affinity"

    def contribute(self, ctx: ModelContext) -> None:
        index = ctx.state.predicates.pod_index
        carriers = [c for c in ctx.classes if carries_anti_affinity(c.tasks[0])]
        # the classes these rows bind (carriers and the classes their terms select), for the
        # passes that hint placements without reading the rows (model/eviction_hint.py)
        bound = ctx.extensions["anti-affine-classes"] = {c.index for c in carriers}
        if not carriers or index is None or len(ctx.pair_class) == 0:
            return
        m = ctx.model
        pairs_of: dict[int, np.ndarray] = {}
        order = np.argsort(ctx.pair_class, kind="stable")
        bounds = np.searchsorted(ctx.pair_class[order], np.arange(len(ctx.classes) + 1))
        for c in ctx.classes:
            pairs_of[c.index] = order[bounds[c.index]:bounds[c.index + 1]]
        for a in carriers:
            for term in anti_terms_of(a.tasks[0]):
                codes, _ = index.codes(term.topology_key)
                matchers = [c.index for c in ctx.classes
                            if any(term.selects(labels_of(t), t.namespace, a.tasks[0].namespace) for t in c.tasks)]
                bound.update(matchers)
                if not matchers:
                    continue
                mpairs = np.concatenate([pairs_of[i] for i in matchers])
                mdom = codes[ctx.pair_node[mpairs]]
                apairs = pairs_of[a.index]
                adom = codes[ctx.pair_node[apairs]]
                self_selected = a.index in matchers
                for d in distinct(adom[adom >= 0]).tolist():
                    here_m = mpairs[mdom == d]
                    here_a = apairs[adom == d]
                    others = here_m[~np.isin(here_m, here_a)]
                    if not self_selected and len(others) == 0:
                        continue
                    flag = m.new_bool_var("")
                    m.add(cp_model.LinearExpr.sum([ctx.x[p] for p in here_a]) <= int(ctx.pair_ub[here_a].sum()) * flag)
                    if len(others):
                        m.add(cp_model.LinearExpr.sum([ctx.x[p] for p in others]) == 0).only_enforce_if(flag)
                    if self_selected:
                        m.add(cp_model.LinearExpr.sum([ctx.x[p] for p in here_a]) <= 1)
                    greedy_here = sum(ctx.greedy_counts.get(int(p), 0) for p in here_a)
                    ctx.hint(flag, 1 if greedy_here else 0)
