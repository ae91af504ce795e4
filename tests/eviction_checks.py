"""Independent checks of a cycle with evictions (spec 6.8), read from the raw snapshot and the
cycle's JSON decisions (interfaces.md section 2), sharing no rule code with the engine.

Used by tests/test_eviction_invariants.py and tests/test_eviction_loops.py. The engine's own
`ActionOutcome`s are read for one thing only: the order in which the eviction actions committed
their preemptors (the decisions list evictions sorted by pod), so that a queue's allocation
when a reclaimer started can be bounded from above.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Any

from models.duration import duration_seconds
from test_invariants import QRES, Raw, check_decisions

INF = Fraction(10 ** 30)
LAST_START = "kai.scheduler/last-start-timestamp"
KAI_DEFAULT_ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"   # spec 2.4


def post_eviction_view(raw: Raw, out: dict[str, Any]) -> tuple[Raw, dict[str, Any]]:
    """The cycle seen as an allocation-only cycle, so that test_invariants.check_decisions can
    judge it: an evicted pod is releasing on its node (what it frees may be used by pipelined
    pods only), and a victim pipelined elsewhere is a new pending pod `<key>#moved` placed there
    (its controller recreates it)."""
    evicted = {e["pod"] for e in out["evictions"]}
    raw.evicted = evicted          # the running pods this cycle took (topology_errors reads them)
    for k in evicted:
        raw.state[k] = ("releasing", raw.state[k][1])
    rename: dict[str, str] = {}
    for k in evicted:
        clone = f"{k}#moved"
        rename[k] = clone
        raw.pods[clone] = raw.pods[k]
        raw.request[clone] = raw.request[k]
        raw.group_of[clone] = raw.group_of[k]
        raw.groups_of[clone] = []
        raw.state[clone] = ("pending", None)
    view = dict(out)
    view["binds"] = [{**b, "pod": rename.get(b["pod"], b["pod"])} for b in out["binds"]]
    view["pipelined"] = [{**b, "pod": rename.get(b["pod"], b["pod"])} for b in out["pipelined"]]
    view["evictions"] = []
    # A victim job keeps pending pods it did not have: its evicted pods (recreated) need no reason.
    victims = {raw.group_of[k] for k in evicted}
    view["unschedulable"] = list(out["unschedulable"]) + [{"podGroup": g, "reasons": ["evicted this cycle"]}
                                                          for g in victims]
    return raw, view


# ------------------------------------------------------------------------------------------------
# the raw snapshot's jobs, queues and min-runtimes
# ------------------------------------------------------------------------------------------------

def priority(raw: Raw, group: str) -> int:
    name = raw.groups[group]["spec"].get("priorityClassName")
    return raw.prio.get(name, 50) if name else 50


def pods_of(raw: Raw, group: str) -> list[str]:
    return [k for k, g in raw.group_of.items() if g == group and "#" not in k]


def is_elastic(raw: Raw, group: str) -> bool:
    count: dict[str | None, int] = defaultdict(int)
    for k in pods_of(raw, group):
        count[raw.podset_of(k)] += 1
    return any(count[ps] > need for ps, need in raw.podsets(group).items())


def _seconds(text: str | None) -> Fraction | None:
    return None if text is None else duration_seconds(text)


def _plugin_args(doc: dict[str, Any]) -> dict[str, str] | None:
    """minruntime's arguments, or None when the plugin is off (explicit tiers without it)."""
    tiers = (doc.get("config") or {}).get("tiers")
    if not tiers:
        return {}
    for t in tiers:
        for p in t.get("plugins") or []:
            if p.get("name") == "minruntime":
                return dict(p.get("arguments") or {})
    return None


def min_runtime(raw: Raw, doc: dict[str, Any], victim_queue: str, action: str, reclaimer_queue: str) -> Fraction | None:
    """Spec 6.7, written from the text: the first value set walking up from a start queue, else
    the plugin default. None when protection is off."""
    args = _plugin_args(doc)
    if args is None:
        return None
    field = "preemptMinRuntime" if action == "preempt" else "reclaimMinRuntime"
    default = _seconds(args.get("defaultPreemptMinRuntime" if action == "preempt" else "defaultReclaimMinRuntime")) or 0
    mine = list(reversed(raw.queue_path(reclaimer_queue)))        # root first
    theirs = list(reversed(raw.queue_path(victim_queue)))
    if action == "preempt" or args.get("reclaimResolveMethod", "lca") == "queue":
        walk = list(reversed(theirs))
    elif mine[0] != theirs[0]:
        walk = [theirs[0]]
    else:
        common = max(i for i in range(min(len(mine), len(theirs))) if mine[i] == theirs[i])
        below = min(common + 1, len(theirs) - 1)                   # one level down towards the victim
        walk = list(reversed(theirs[:below + 1]))
    for q in walk:
        v = raw.queues[q]["spec"].get(field)
        if v is not None:
            return _seconds(v)
    return Fraction(default)


def protected(raw: Raw, doc: dict[str, Any], group: str, action: str, reclaimer_queue: str, now: float) -> bool:
    from datetime import datetime
    stamp = (raw.groups[group]["metadata"].get("annotations") or {}).get(LAST_START)
    if not stamp:
        return False
    runtime = min_runtime(raw, doc, raw.groups[group]["spec"]["queue"], action, reclaimer_queue)
    if runtime is None:
        return False
    start = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return now < start + float(runtime)


# ------------------------------------------------------------------------------------------------
# gate 2, from the text of spec 3.7.2 and 6.8, as a bound that holds whatever the chunk order
# ------------------------------------------------------------------------------------------------

def _value(raw: Raw, q: str, r: str, field: str) -> Fraction:
    v = raw.queue_value(q, r, field)
    return INF if v == -1 else v


def _fair(out: dict[str, Any], q: str, r: str) -> Fraction:
    v = Fraction(str(out["fairShare"][q][r]))
    return INF if v == -1 else v


def may_lose_bound(raw: Raw, out: dict[str, Any], q: str) -> dict[str, Fraction]:
    """A queue may lose a chunk only while its allocation is above this in some resource:
    min(allocatable share, quota), allocatable = max(quota, fair share) capped by the limit.
    (Fair-share reclaim needs "above allocatable", quota reclaim "above quota".)"""
    out_ = {}
    for r in QRES:
        quota, limit = _value(raw, q, r, "quota"), _value(raw, q, r, "limit")
        allocatable = min(max(quota, _fair(out, q, r)), limit)
        out_[r] = min(allocatable, quota)
    return out_


def leveled(raw: Raw, reclaimer: str, victim: str) -> str:
    """The victim's side of the first differing queues on the root->leaf paths."""
    mine, theirs = list(reversed(raw.queue_path(reclaimer))), list(reversed(raw.queue_path(victim)))
    for a, b in zip(mine, theirs):
        if a != b:
            return b
    return theirs[min(len(mine), len(theirs)) - 1]


def gate2_errors(raw: Raw, out: dict[str, Any], commits: list[tuple[str, str, list[str]]],
                 ordered: bool = True) -> list[str]:
    """For every reclaimer R and every queue V_lvl it took from (at the level where R's and the
    victim's branches meet): the last chunk taken from V_lvl was tested against
    frozen(V_lvl) - (all of R's chunks from V_lvl) + that chunk, which therefore exceeds
    may_lose_bound(V_lvl) in some resource. frozen is bounded from above by the snapshot's
    allocation plus everything placed this cycle minus what earlier commits evicted, and a
    chunk (a job's core or one surplus pod) by the victim job's whole share; moved victims count
    for nothing (allowConsolidatingReclaim, on by default)."""
    errors: list[str] = []
    placed = [b["pod"] for b in out["binds"] + out["pipelined"]]
    moved = {e["pod"] for e in out["evictions"]} & set(placed)
    base, _ = raw.queue_usage(extra=[k for k in placed if k in raw.pods and raw.state[k][0] == "pending"])
    zero = dict.fromkeys(QRES, Fraction(0))
    # moved victims are counted once (still in their queue) and never subtracted
    evicted_before: dict[str, dict[str, Fraction]] = defaultdict(lambda: dict(zero))
    for action, preemptor, victims in commits:
        if action == "reclaim":
            r_queue = raw.groups[preemptor]["spec"]["queue"]
            # what each victim job gives, per level queue (every chunk lies within one job)
            taken: dict[str, list[dict[str, Fraction]]] = defaultdict(list)
            by_job: dict[str, list[str]] = defaultdict(list)
            for k in victims:
                if k not in moved:
                    by_job[raw.group_of[k]].append(k)
            for g, keys in by_job.items():
                lvl = leveled(raw, r_queue, raw.groups[g]["spec"]["queue"])
                taken[lvl].append({r: sum((raw.request[k][r] for k in keys), Fraction(0)) for r in QRES})
            for lvl, jobs in taken.items():
                bound = may_lose_bound(raw, out, lvl)
                total = {r: sum(j[r] for j in jobs) for r in QRES}
                frozen = {r: base[lvl][r] - evicted_before[lvl][r] for r in QRES}
                # the last chunk is at most one victim job's whole share
                if not any(frozen[r] - total[r] + max(j[r] for j in jobs) > bound[r] for r in QRES):
                    errors.append(f"reclaim for {preemptor} took {total} from queue {lvl}, which had at most "
                                  f"{frozen} allocated then and may lose nothing at or below {bound}")
        for k in victims:
            if k in moved or not ordered:         # unordered: nothing is known to come before
                continue
            for q in raw.queue_path(raw.groups[raw.group_of[k]]["spec"]["queue"]):
                for r in QRES:
                    evicted_before[q][r] += raw.request[k][r]
    return errors


# ------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------

def commits_of(result) -> tuple[list[tuple[str, str, list[str]]], bool]:
    """((action, preemptor, victim pod keys) per commit, ordered). In commit order when the
    greedy eviction actions made the cycle's evictions; grouped by preemptor, in no known order,
    when the CP-SAT model decided them (result.actions are then only its hint's)."""
    commits = [(action, pre, [t.key for t in sol.victims])
               for action, outcome in result.actions.items() for pre, sol in outcome.solved.items()]
    evictions = {k: e for k, e in result.session.evictions.items() if e.action != "stalegangeviction"}
    if sorted(k for _, _, keys in commits for k in keys) == sorted(evictions):
        return commits, True
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for k, e in sorted(evictions.items()):
        groups[(e.action, e.for_job)].append(k)
    return [(a, p, keys) for (a, p), keys in groups.items()], False


def eviction_errors(doc: dict[str, Any], out: dict[str, Any], commits: tuple[list[tuple[str, str, list[str]]], bool],
                    now: float) -> list[str]:
    """`commits`: what commits_of returns."""
    commits, ordered = commits
    raw = Raw(doc)
    errors: list[str] = []
    evictions = out["evictions"]
    keys = [e["pod"] for e in evictions]
    if len(keys) != len(set(keys)):
        errors.append(f"a pod is evicted twice in one cycle: {sorted(keys)}")
    pipelined = {b["pod"]: b["node"] for b in out["pipelined"]}
    binds = {b["pod"] for b in out["binds"]}
    committed = {k: (a, p) for a, p, victims in commits for k in victims}
    if set(committed) != {e["pod"] for e in evictions if e["action"] != "stalegangeviction"}:
        errors.append(f"the actions committed victims {sorted(committed)} but the decisions evict {sorted(keys)}")
    # a snapshot without config.actions runs KAI's default cycle (spec 2.4)
    actions = set(((doc.get("config") or {}).get("actions") or KAI_DEFAULT_ACTIONS).replace(" ", "").split(","))
    for e in evictions:
        k, action, pre = e["pod"], e["action"], e["forPodGroup"]
        if k not in raw.pods or raw.state[k][0] != "allocated":
            errors.append(f"{k}: evicted by {action} but it was not running")
            continue
        victim = raw.group_of[k]
        if action not in actions:
            errors.append(f"{k}: evicted by {action}, which the configuration does not run")
        if committed.get(k, (action, pre)) != (action, pre):
            errors.append(f"{k}: decisions say {action} for {pre}, the actions committed {committed[k]}")
        if k in binds:
            errors.append(f"{k}: evicted and bound in the same cycle")
        if action == "stalegangeviction":
            continue
        if raw.non_preemptible(victim):
            errors.append(f"{k}: non-preemptible job {victim} lost a pod to {action}")
        if pre not in raw.groups:
            errors.append(f"{k}: evicted by {action} for {pre!r}, not a PodGroup")
            continue
        # the preemptor is pipelined in this cycle, never bound (spec 6.1)
        pre_pods = pods_of(raw, pre)
        if not any(p in pipelined and raw.state[p][0] == "pending" for p in pre_pods):
            errors.append(f"{k}: evicted by {action} for {pre}, which has no pod pipelined this cycle")
        v_queue, p_queue = raw.groups[victim]["spec"]["queue"], raw.groups[pre]["spec"]["queue"]
        if action == "preempt" and (v_queue != p_queue or priority(raw, victim) >= priority(raw, pre)):
            errors.append(f"{k}: preempted for {pre} ({p_queue}, priority {priority(raw, pre)}) but its job "
                          f"{victim} is in {v_queue} with priority {priority(raw, victim)}")
        if action == "reclaim" and v_queue == p_queue:
            errors.append(f"{k}: reclaimed for {pre} of its own queue {v_queue}")
        if action == "consolidation" and (k not in pipelined or pipelined[k] == raw.state[k][1]):
            errors.append(f"{k}: consolidation evicted it without re-placing it on another node")
        if action in ("preempt", "reclaim") and not is_elastic(raw, victim) \
                and protected(raw, doc, victim, action, p_queue, now):
            errors.append(f"{k}: {victim} is within its {action} min-runtime and not elastic, yet lost a pod")
    # gangs lose pods whole, or only surplus pods; protected elastic jobs keep their minimum
    by_commit: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in evictions:
        by_commit[(e["action"], e["forPodGroup"])].append(e["pod"])
    evicted = set(keys)
    for g in {raw.group_of[k] for k in keys if k in raw.group_of}:
        left: dict[str | None, int] = defaultdict(int)
        for k in pods_of(raw, g):
            # running and kept, or placed this cycle (moved, or pending and pipelined in its stead)
            if (raw.state[k][0] == "allocated" and k not in evicted) or k in pipelined or k in binds:
                left[raw.podset_of(k)] += 1
        for ps, need in raw.podsets(g).items():
            if 0 < left[ps] < need:
                errors.append(f"job {g} podset {ps}: evictions left {left[ps]} running pods < minMember {need}")
    for (action, pre), victims in by_commit.items():
        if action not in ("preempt", "reclaim") or pre not in raw.groups:
            continue
        p_queue = raw.groups[pre]["spec"]["queue"]
        for g in {raw.group_of[k] for k in victims}:
            if not is_elastic(raw, g) or not protected(raw, doc, g, action, p_queue, now):
                continue
            for ps, need in raw.podsets(g).items():
                active = sum(1 for k in pods_of(raw, g) if raw.podset_of(k) == ps and raw.state[k][0] in ("allocated", "releasing"))
                lost = sum(1 for k in victims if raw.group_of[k] == g and raw.podset_of(k) == ps)
                if active - lost < need:
                    errors.append(f"{pre} took {lost} pods of protected elastic job {g} podset {ps} with {active} "
                                  f"active: fewer than minMember {need} left")
    errors += gate2_errors(raw, out, commits, ordered)
    return errors

