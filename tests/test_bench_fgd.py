"""bench/bench_fgd.py's protocol on a tiny synthetic trace (the real one is read in place from
../shared/data/fgd-openb/ at benchmark time only).

Why: the headline figure (GPU allocation ratio at 100 % arrived demand) is only comparable with
FGD's if the workload is sampled to 1.3 x capacity, fed in arrival order, and read exactly at
each whole percentage of arrived demand.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_fgd as b  # noqa: E402


def _write(tmp: Path) -> None:
    (tmp / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,4,T4\nn1,32000,131072,4,G2\nn2,8000,65536,2,T4\n")
    (tmp / "openb_pod_list_toy.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,2000,4096,1,1000,\nb,1000,2048,1,500,\nc,1000,2048,1,250,T4\nd,4000,8192,2,1000,\ne,1000,1024,0,0,\n")


def test_sampling_reaches_the_tuned_demand_and_is_seeded(tmp_path: Path) -> None:
    _write(tmp_path)
    pods = b.read_pods(tmp_path, "toy")
    s1, s2 = b.sample(pods, 10, 42), b.sample(pods, 10, 42)
    assert [p.name for p in s1] == [p.name for p in s2]
    total = sum(p.gpu_demand for p in s1)
    assert total >= 1.3 * 10 * 1000 and total - max(p.gpu_demand for p in s1) < 1.3 * 10 * 1000


def test_curve_is_read_at_every_percentage_and_never_exceeds_arrivals(tmp_path: Path) -> None:
    _write(tmp_path)
    nodes, pods = b.read_nodes(tmp_path), b.read_pods(tmp_path, "toy")
    run = b.run_one(nodes, pods, "toy", 42, "greedy", 3, 1.0, b.Progress(1, False))
    assert len(run.curve) == 101
    assert all(x <= y + 1e-9 for x, y in zip(run.curve, run.curve[1:]))
    assert all(0 <= v <= 100 for v in run.curve)
    # allocated never exceeds arrived demand
    assert all(v <= k + 1e-9 + 100 * 2000 / 10000 for k, v in enumerate(run.curve))
    assert run.at_100 > 50


def test_the_collector_runs_between_batches_and_is_restored(tmp_path: Path) -> None:
    """Each batch's garbage is collected after it, timed apart from its cycle, and the caller's
    collector setting is left as it was (the loop pauses it)."""
    import gc
    _write(tmp_path)
    nodes, pods = b.read_nodes(tmp_path), b.read_pods(tmp_path, "toy")
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            run = b.run_one(nodes, pods, "toy", 42, "greedy", 3, 1.0, b.Progress(1, False))
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
        assert len(run.gc_seconds) == len(run.cycle_seconds) > 0
        assert all(s >= 0 for s in run.gc_seconds)


def test_the_upper_bound_packs_fractions_exactly() -> None:
    """bench/bench_fgd_bound.py: capacity minus the least of max(fractions dropped, milli-GPU left
    free on the GPUs that hold fractions)."""
    from collections import Counter

    import bench_fgd_bound as ub
    assert ub.least_loss(Counter({810: 2, 190: 2}), 10) == (0, True)        # two GPUs filled exactly
    assert ub.least_loss(Counter({810: 3}), 10) == (570, True)              # all placed beats dropping one (810)
    assert ub.least_loss(Counter({600: 2}), 10) == (600, True)              # dropping one (600) beats 800 left free
    assert ub.least_loss(Counter({500: 3, 250: 2}), 10) == (0, True)        # 500+500, 500+250+250
    # fractions that must be placed (the scheduler refused no pod that fit) cannot be dropped
    assert ub.least_loss(Counter({600: 2}), 10, kept=Counter({600: 2})) == (800, True)
    assert ub.least_loss(Counter({810: 2, 190: 1}), 10, kept=Counter({810: 2})) == (190, True)
    # the kept fractions need 2 GPUs: with one GPU no packing places them all
    assert ub.least_loss(Counter({600: 2}), 10, kept=Counter({600: 2}), gpus_at_most=1) == (None, True)
    assert ub.least_loss(Counter({600: 2}), 10, gpus_at_most=1) == (600, True)


def test_the_fractions_placed_before_a_share_of_arrivals_are_the_earliest(tmp_path: Path) -> None:
    """--placed-before P: the fractions arrived before P % of the capacity, in arrival order."""
    import bench_fgd_bound as ub
    _write(tmp_path)
    pods = b.read_pods(tmp_path, "toy")
    capacity = 10
    early0, every = ub.arrived_fractions(pods, capacity, 42, 0.0)
    assert not early0 and every
    arrived, total = [], 0
    for p in b.sample(pods, capacity, 42):
        if total >= capacity * 1000:
            break
        arrived.append((total, p))
        total += p.gpu_demand
    for cut in (30.0, 60.0, 100.0):
        early, late = ub.arrived_fractions(pods, capacity, 42, cut)
        assert early + late == every
        want = [p.milli for t, p in arrived if p.gpus == 1 and p.milli < 1000 and t * 100 < cut * capacity * 1000]
        assert sorted(early.elements()) == sorted(want)
    assert not ub.arrived_fractions(pods, capacity, 42, 100.0)[1]
