"""Shared GPUs in the model (spec 7.2-7.4): which existing shared GPU each fractional pod joins,
or which idle GPU it opens as a new group.

Per node with fractional candidates: one count variable per (pod class, joinable shared GPU)
and per (pod class, new-device slot). The idle GPUs of a node are interchangeable, so they are
slots with an "opened" Boolean in a fixed order (slot k opens only after slot k-1), which keeps
the model free of their symmetry. Constraints: a device's pods fit its free memory (counting
releasing memory, as KAI's fit does); a pod class's pods on a node use `devices` device places
each, and a multi-device pod uses distinct devices (no device holds more of a class's places
than it has pods there, which is enough for a decomposition into pods); an opened device leaves
the node's whole-GPU pool and takes a pod slot for its reservation pod.

Soft preference (lowest level): with GPU binpack (gpupack), opening a device costs and joining
a fuller one is worth more, so devices are packed; with spread, opening is worth something,
so pods spread over fresh GPUs first. With binpack, a node that has a shared GPU the pod fits
on is preferred over any other (KAI's gpusharingorder, 7.4), above fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.gpu_sharing import SharedLedger, new_group_id, task_memory
from kai_cp.gpu_sharing_place import device_spread
from kai_cp.model.evictions import freed_max, freed_terms
from kai_cp.model.base import ModelContext

OPEN_WEIGHT = 25        # per device opened: above keeping greedy's node (20), so joining wins
SHARING_ORDER = 20_000  # per pod on a node with a shared GPU it fits (KAI's gpusharingorder, binpack):
                        # above any fragmentation difference (model/fragmentation.py, at most 8,000)
JOIN_WEIGHT = 5         # per pod on an existing device, plus up to JOIN_WEIGHT more the fuller it is


@dataclass
class NodeDevices:
    node: int
    existing: list[tuple[str, int, int]]              # (group id, free MiB, used MiB) joinable devices
    opens: list[cp_model.IntVar]                      # one per new-device slot, in order
    z: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)   # (pair, device) -> places


def is_shared_class(c) -> bool:
    return c.tasks[0].request.is_shared_gpu


class GpuSharing:
    name = "gpu-sharing"

    def contribute(self, ctx: ModelContext) -> None:
        state, m = ctx.state, ctx.model
        shared_pairs = [i for i, c in enumerate(ctx.pair_class.tolist()) if is_shared_class(ctx.classes[c])]
        if not shared_pairs:
            return
        ledger = SharedLedger.of_state(state)
        spread = device_spread(state)
        by_node: dict[int, list[int]] = {}
        for i in shared_pairs:
            by_node.setdefault(int(ctx.pair_node[i]), []).append(i)
        all_by_node: dict[int, list[int]] = {}
        for i, n in enumerate(ctx.pair_node.tolist()):
            if n in by_node:
                all_by_node.setdefault(n, []).append(i)
        nodes: dict[int, NodeDevices] = {}
        terms_v, terms_c = [], []
        max_gain = 0
        may_free = freed_max(ctx)
        for n, pairs in by_node.items():
            cap = int(ledger.capacity[n])
            existing = [(g, d.free(cap), d.used) for g, d in sorted(ledger.groups(n).items()) if d.free(cap) > 0]
            need = sum(int(ctx.pair_ub[i]) * max(ctx.classes[int(ctx.pair_class[i])].tasks[0].request.devices, 1)
                       for i in pairs)
            # devices to open: the node's free GPUs and those its evictions may free (KAI opens a
            # shared GPU on one its preemption frees, and pipelines the pod there)
            freeable = 0 if may_free is None else int(may_free[n, 2])
            slots = max(0, min(int(ctx.free[n, 2]) + freeable, need))
            opens = [m.new_bool_var("") for _ in range(slots)]
            for a, b in zip(opens, opens[1:]):
                m.add(a >= b)
            nd = nodes[n] = NodeDevices(n, existing, opens)
            dev_load: list[list[tuple[cp_model.IntVar, int, int]]] = [[] for _ in range(len(existing) + slots)]
            for i in pairs:
                req = ctx.classes[int(ctx.pair_class[i])].tasks[0].request
                mem = task_memory(req, cap)
                devices = max(req.devices, 1)
                ub = int(ctx.pair_ub[i])
                if mem <= 0 or mem > cap:
                    m.add(ctx.x[i] == 0)
                    continue
                places = []
                for d, (g, free, used) in enumerate(existing):
                    if free < mem:
                        continue
                    bound = min(ub, free // mem)
                    z = m.new_int_var(0, bound, "")
                    nd.z[(i, d)] = z
                    places.append(z)
                    dev_load[d].append((z, mem, bound))
                    if not spread:
                        w = JOIN_WEIGHT + (JOIN_WEIGHT * used) // cap
                        terms_v.append(z)
                        terms_c.append(w)
                        max_gain += w * min(ub, free // mem)
                for k, o in enumerate(opens):
                    d = len(existing) + k
                    bound = min(ub, cap // mem)
                    z = m.new_int_var(0, bound, "")
                    m.add(z <= bound * o)
                    nd.z[(i, d)] = z
                    places.append(z)
                    dev_load[d].append((z, mem, bound))
                if not places:
                    m.add(ctx.x[i] == 0)
                    continue
                if not spread and state.config.gpu_placement != "spread" and \
                        any(free >= mem for _, free, _ in existing):
                    terms_v.append(ctx.x[i])
                    terms_c.append(SHARING_ORDER)
                    max_gain += SHARING_ORDER * ub
                m.add(cp_model.LinearExpr.sum(places) == devices * ctx.x[i])
                if devices > 1:
                    for z in places:
                        m.add(z <= ctx.x[i])
            for d, load in enumerate(dev_load):
                if not load:
                    continue
                capacity = existing[d][1] if d < len(existing) else cap
                worst = sum(bound * mem for _, mem, bound in load)
                if d >= len(existing):
                    o = opens[d - len(existing)]
                    m.add(cp_model.LinearExpr.weighted_sum([z for z, _, _ in load], [mem for _, mem, _ in load])
                          <= capacity * o)
                elif worst > capacity:
                    m.add(cp_model.LinearExpr.weighted_sum([z for z, _, _ in load], [mem for _, mem, _ in load])
                          <= capacity)
            if opens:
                # Whole GPUs: whole-GPU pods plus opened shared devices; pod slots: pods plus reservation pods.
                gpu_vars, gpu_coef, pod_vars = list(opens), [1] * len(opens), list(opens)
                for i in all_by_node[n]:
                    c = ctx.classes[int(ctx.pair_class[i])]
                    if c.gpus > 0:
                        gpu_vars.append(ctx.x[i])
                        gpu_coef.append(int(c.gpus))
                    pod_vars.append(ctx.x[i])
                fv, fc = freed_terms(ctx, n, 2)
                m.add(cp_model.LinearExpr.weighted_sum(gpu_vars + fv, gpu_coef + [-c for c in fc]) <= int(ctx.free[n, 2]))
                # (the pods evictions take off the node free their slots too: without them KAI's
                # pipelining of a shared pod behind a preemption was no solution, the model infeasible)
                pv, pc = freed_terms(ctx, n, 3)
                m.add(cp_model.LinearExpr.weighted_sum(pod_vars + pv, [1] * len(pod_vars) + [-c for c in pc])
                      <= max(int(ctx.free[n, 3]), 0))
                terms_v += opens
                terms_c += [OPEN_WEIGHT if spread else -OPEN_WEIGHT] * len(opens)
                max_gain += OPEN_WEIGHT * len(opens)
        ctx.extensions[self.name] = nodes
        ctx.aux += [o for nd in nodes.values() for o in nd.opens] + [z for nd in nodes.values() for z in nd.z.values()]
        scale = ctx.levels.scale
        ctx.add_term(self.name, terms_v, [c * scale for c in terms_c])
        ctx.levels.added(max_gain * scale)
        _hint(ctx, nodes)


def _hint(ctx: ModelContext, nodes: dict[int, NodeDevices]) -> None:
    """Greedy's devices as the hint."""
    class_of = {t.key: c.index for c in ctx.classes if is_shared_class(c) for t in c.tasks}
    hint_devices(ctx, [(class_of[p.task.key], p.node, p.gpu_groups) for p in ctx.greedy.session.placements.values()
                       if p.task.key in class_of], nodes)


def hint_devices(ctx: ModelContext, placed, nodes: dict[int, NodeDevices] | None = None, strict: bool = False) -> bool:
    """Hint the device variables from (class, node, shared groups) per placed pod: existing groups
    map to their variables, new groups to the node's slots in order of first use. `strict`: return
    False and hint nothing when a placement has no variable (no pair, device or slot for it)."""
    nodes = ctx.extensions.get(GpuSharing.name) if nodes is None else nodes
    if nodes is None:
        return True
    index = {(int(c), int(n)): i for i, (c, n) in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
    z_val: dict[tuple[int, int], int] = {}
    opened: dict[int, dict[str, int]] = {}
    for c, node, groups in placed:
        i = index.get((c, node))
        if node not in nodes or i is None:
            if strict:
                return False
            continue
        nd = nodes[node]
        pos = {g: d for d, (g, _, _) in enumerate(nd.existing)}
        slot = opened.setdefault(node, {})
        for g in groups:
            if g in pos:
                d = pos[g]
            else:
                if g not in slot:
                    slot[g] = len(slot)
                d = len(nd.existing) + slot[g]
            z_val[(i, d)] = z_val.get((i, d), 0) + 1
    if strict and (any(len(opened.get(n, {})) > len(nd.opens) for n, nd in nodes.items())
                   or any(key not in nodes[int(ctx.pair_node[key[0]])].z for key in z_val)):
        return False
    for n, nd in nodes.items():
        k = len(opened.get(n, {}))
        for j, o in enumerate(nd.opens):
            ctx.hint(o, 1 if j < k else 0)
        for key, z in nd.z.items():
            ctx.hint(z, z_val.get(key, 0))
    return True


def decode_groups(ctx: ModelContext, pair: int, node_name: str, tasks: list) -> list[tuple[str, ...]] | None:
    """The GPU groups of each of `tasks` (the pods the model put on this pair's node), from the
    solution's device counts: each pod takes its devices from those with most places left."""
    nodes = ctx.extensions.get(GpuSharing.name)
    if not nodes:
        return None
    n = int(ctx.pair_node[pair])
    nd = nodes.get(n)
    if nd is None:
        return None
    left = {d: ctx.aux_values.get(z.index, 0) for (i, d), z in nd.z.items() if i == pair}
    req = tasks[0].request if tasks else None
    devices = max(req.devices, 1) if req is not None else 1
    out = []
    for t in tasks:
        chosen = sorted((d for d, v in left.items() if v > 0), key=lambda d: (-left[d], d))[:devices]
        if len(chosen) < devices:
            return None
        groups = []
        for d in chosen:
            left[d] -= 1
            groups.append(nd.existing[d][0] if d < len(nd.existing) else _slot_id(ctx, nd, d, node_name, t, len(groups)))
        out.append(tuple(groups))
    return out


def _slot_id(ctx: ModelContext, nd: NodeDevices, d: int, node_name: str, task, index: int) -> str:
    """A new device's group id, named after the first pod placed on it (unique across cycles)."""
    ids = ctx.extensions.setdefault("gpu-sharing-ids", {})
    key = (nd.node, d)
    if key not in ids:
        ids[key] = new_group_id(node_name, task, index)
    return ids[key]


def place_shared_chunk(ctx: ModelContext, session, pair: int, node: int, tasks: list) -> None:
    """Replay the model's fractional pods of one pair through the session, on their devices;
    a pod waits (pipelined) when its node or one of its devices only fits with releasing
    resources."""
    name = ctx.state.nodes[node].name
    groups = decode_groups(ctx, pair, name, tasks)
    if groups is None:
        raise RuntimeError(f"model placed fractional pods on {name} without devices")
    cap = int(session.shared.capacity[node])
    for task, gs in zip(tasks, groups):
        vec = ctx.state.table.vector(task)
        need = vec > 0
        devs = session.shared.groups(node)
        mem = task_memory(task.request, cap)
        new = sum(1 for g in gs if g not in devs)
        idle_ok = bool(np.all(session.idle[node, need] >= vec[need])) and new <= int(session.idle[node, 2]) \
            and all(devs[g].fits_idle(mem, cap) for g in gs if g in devs)
        session.place(task, node, pipelined=not idle_ok, gpu_groups=gs, new_groups=new)
