"""kai_cp.explore: what-if edits change what they name and nothing else, the tables agree with
the engine's decisions, and simulations apply arrivals and completions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from snapshot_builder import node, pod, podgroup, queue, snapshot
from kai_cp.explore import Cluster, compare, job_objects
from kai_cp.explore.cycle import difference

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cluster-snapshot.zip"


@pytest.fixture(scope="module")
def example() -> Cluster:
    return Cluster.load(EXAMPLE)


def small() -> Cluster:
    doc = snapshot([node("n1", gpu=4), node("n2", gpu=2)],
                   [queue("a", gpu={"quota": 0, "limit": -1, "overQuotaWeight": 1}),
                    queue("b", gpu={"quota": 2, "limit": -1, "overQuotaWeight": 1})],
                   [podgroup("run", "a", 1, preemptibility="preemptible"), podgroup("wait", "b", 2, created=5)],
                   [pod("run-0", "run", gpu=4, phase="Running", node="n1"),
                    pod("wait-0", "wait", gpu=2, created=5), pod("wait-1", "wait", gpu=2, created=5)])
    return Cluster.from_document(doc, "small")


def test_queue_table_matches_the_engines_fair_share(example: Cluster) -> None:
    q = example.queues()
    out = example.cycle(engine="greedy").decisions()
    for name, row in q.iterrows():
        assert row["fair_share"] == pytest.approx(float(out["fairShare"][name]["gpu"]))
    cpu = example.queues("cpu")
    assert cpu.loc["llm", "fair_share"] == pytest.approx(out["fairShare"]["llm"]["cpu"] / 1000)
    with pytest.raises(ValueError, match="resource must be one of"):
        example.queues("disk")


def test_with_queue_changes_that_queue_only(example: Cluster) -> None:
    before = example.queues()
    after = example.with_queue("llm-pretrain", quota=45, weight=3, priority=300).queues()
    assert after.loc["llm-pretrain", ["deserved", "weight", "priority"]].tolist() == [45, 3, 300]
    same = before.drop(index="llm-pretrain")[["deserved", "weight", "priority", "limit"]]
    assert same.equals(after.drop(index="llm-pretrain")[["deserved", "weight", "priority", "limit"]])
    assert example.queues().equals(before), "the original cluster must not change"
    with pytest.raises(KeyError, match="no queue named"):
        example.with_queue("nope", quota=1)


def test_with_job_and_with_nodes() -> None:
    c = small()
    gone = c.with_job("wait", delete=True)
    assert "wait" not in gone.jobs().index and len(gone.jobs()) == 1
    moved = c.with_job("wait", queue="a", priority_class="build")
    assert moved.jobs().loc["wait", "queue"] == "a"
    cordoned = c.with_nodes(["n2"], cordon=True)
    assert cordoned.nodes().loc["n2", "ready"] == False  # noqa: E712 (numpy bool)
    assert cordoned.cycle(engine="greedy").summary()["pods_bound"] == 0
    removed = c.with_nodes(["n1"], remove=True)
    assert list(removed.nodes().index) == ["n2"]
    assert removed.jobs().loc["run", "status"] == "pending"
    with pytest.raises(KeyError, match="no node named"):
        c.with_nodes(["n9"], cordon=True)


def test_with_node_pool_and_actions() -> None:
    c = small()
    assert c.with_node_pool("other").nodes().empty        # no node carries the pool label
    no_evictions = c.with_actions("allocate").cycle()
    assert no_evictions.summary()["pods_evicted"] == 0


def test_cycle_tables_agree_with_the_decisions_document() -> None:
    c = small()
    cyc = c.cycle(engine="cp-sat")
    doc = cyc.decisions()
    s = cyc.summary()
    assert s["invalid"] == 0
    assert s["pods_bound"] == len(doc["binds"]) and s["pods_evicted"] == len(doc["evictions"])
    assert sorted(cyc.binds()["pod"]) == sorted(b["pod"] for b in doc["binds"])
    assert sorted(cyc.evictions()["pod"]) == sorted(e["pod"] for e in doc["evictions"])
    # Queue b (below its fair share of 4) reclaims: a (over its share of 2) loses 4 GPUs.
    q = cyc.queues()
    placed_b = cyc.binds().query("queue == 'b'")["gpus"].sum() + cyc.pipelined().query("queue == 'b'")["gpus"].sum()
    assert q.loc["b", "allocated"] == q.loc["b", "allocated_before"] + placed_b
    assert q.loc["a", "allocated"] == q.loc["a", "allocated_before"] - cyc.evictions()["gpus"].sum()
    assert q.loc["b", "gap"] == q.loc["b", "allocated"] - q.loc["b", "fair_share"]
    jobs = cyc.jobs()
    assert jobs.loc["wait", "bound"] + jobs.loc["wait", "pipelined"] == 2
    assert jobs.loc["run", "evicted"] == 1


def test_pending_jobs_carry_their_reasons() -> None:
    c = small().with_jobs(job_objects("huge", "b", pods=3, gpus=8))
    cyc = c.cycle(engine="greedy")
    pending = cyc.pending().set_index("job")
    assert "huge" in pending.index and pending.loc["huge", "reason"]
    assert "huge" in cyc.jobs().query("why_pending != ''").index


def test_added_job_is_scheduled_and_fractions_share_a_device() -> None:
    doc = snapshot([node("g1", gpu=1, labels={"nvidia.com/gpu.memory": "81920"})], [queue("q")], [], [])
    c = Cluster.from_document(doc).with_jobs(job_objects("half-a", "q", gpus=0.5) + job_objects("half-b", "q", gpus=0.5))
    cyc = c.cycle(engine="cp-sat")
    assert cyc.summary()["invalid"] == 0 and cyc.summary()["pods_bound"] == 2
    devices = cyc.shared_devices()
    assert devices["device"].nunique() == 1
    assert devices["fraction"].sum() == pytest.approx(1.0)
    assert set(devices["state"]) == {"new"}
    nxt = cyc.binds()
    assert set(nxt["gpus"]) == {0.5}


def test_compare_and_difference(example: Cluster) -> None:
    g, s = example.cycle(engine="greedy"), example.cycle(engine="cp-sat")
    table = compare({"greedy": g, "cp-sat": s})
    assert list(table.index) == ["greedy", "cp-sat"] and table.loc["greedy", "status"] == "GREEDY"
    diff = difference(g, s)
    placed_g = set(g.binds()["job"]) | set(g.pipelined()["job"])
    placed_s = set(s.binds()["job"]) | set(s.pipelined()["job"])
    assert set(diff["job"]) == placed_g ^ placed_s


def test_domains_partition_the_nodes_at_every_level(example: Cluster) -> None:
    d = example.domains()
    gpus = example.nodes()["gpus"].sum()
    assert (d.groupby("depth")["gpus"].sum() == gpus).all()
    cyc = example.cycle(engine="greedy")
    placed = cyc.domains()
    total = cyc.summary()["gpus_placed"]
    assert placed.groupby("depth")["gpus_placed"].sum().tolist() == pytest.approx([total] * d["depth"].nunique())
    gangs = cyc.gangs()
    assert (gangs["pods"] >= 1).all() and (gangs["kubernetes.io/hostname domains"] <= gangs["pods"]).all()


def test_simulation_applies_arrivals_and_completions() -> None:
    c = small()
    arrivals = lambda i: job_objects(f"new-{i}", "a", gpus=1) if i in (0, 1) else []  # noqa: E731
    sim = c.simulate(4, engine="greedy", arrivals=arrivals, runtime=1, now=1.0e9, progress=False)
    assert sim.invalid == []
    assert sim.summaries["arrived_jobs"].tolist() == [1, 1, 0, 0]
    assert sim.summaries["completed_jobs"].sum() >= 2
    final_jobs = set(sim.final.jobs().index)
    assert "new-0" not in final_jobs            # bound in cycle 0, finished after one cycle
    alloc = sim.allocation()
    assert list(alloc.columns) == ["a", "b"] and len(alloc) == 4
    assert not math.isnan(sim.fair_share().iloc[0]["a"])
    assert set(c.jobs().index) == {"run", "wait"}, "the simulated cluster is a copy"


def test_the_in_cluster_snapshot_zip_opens(tmp_path: Path) -> None:
    """`kai-cp run` serves /get-snapshot (and ?cycle=last, with its decisions beside the snapshot):
    the same ZIP opens here, as the notebooks' KAI_CP_SNAPSHOT."""
    from integration.server import snapshot_zip
    c = small()
    path = tmp_path / "live.zip"
    path.write_bytes(snapshot_zip(c.doc, {"decisions.json": c.cycle(engine="greedy").decisions()}))
    live = Cluster.load(path)
    assert live.jobs().equals(c.jobs()) and live.queues().equals(c.queues())
    assert live.cycle(engine="greedy").binds().equals(c.cycle(engine="greedy").binds())
