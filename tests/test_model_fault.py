"""A fault of the CP-SAT model never costs a cycle KAI's decisions.

Why: KAI's actions have already decided, validly, when the model is built. An exception in the
build, the solve or the decoding (a model bug, such as stop 44's eviction kept for a dropped
preemptor) used to end the cycle with no decisions at all; in-cluster, where the same state comes
back every period, that stops scheduling until the cluster changes. The cycle now falls back to
KAI's decisions and says why. The suite itself runs strict (tests/conftest.py): there such a
fault still raises, so the invariant suites keep catching model bugs.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_cycle import cycle, fragmented_cluster, placed  # noqa: E402

from kai_cp.cli import main  # noqa: E402
from kai_cp.cycle import STRICT_ENV  # noqa: E402

# Where each stage is looked up when a cycle runs it (kai_cp/cycle.py imports them per cycle).
STAGES = {"build": "kai_cp.model.build.build_model",
          "solve": "kai_cp.model.solve.solve",
          "decode": "kai_cp.model.decode.decode"}


def _fail(stage: str):
    def broken(*args, **kwargs):
        raise AssertionError(f"forged {stage} fault")
    return broken


def _decisions(out: dict) -> tuple:
    return (sorted((b["pod"], b["node"]) for b in out["binds"]),
            sorted((p["pod"], p["node"]) for p in out["pipelined"]),
            sorted((e["pod"], e["action"], e["forPodGroup"]) for e in out["evictions"]))


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_model_fault_falls_back_to_kais_decisions(stage: str, monkeypatch, caplog) -> None:
    """On the fragmented cluster the model improves on KAI (tests/test_cycle.py), so each stage
    runs; broken, the cycle returns exactly the greedy engine's decisions, says which fault, and
    logs it with its traceback."""
    doc = fragmented_cluster()
    kai = cycle(doc, "greedy").to_json()
    assert _decisions(cycle(doc, "cp-sat").to_json()) != _decisions(kai), "the model no longer improves here"
    monkeypatch.delenv(STRICT_ENV)
    monkeypatch.setattr(STAGES[stage], _fail(stage))
    with caplog.at_level(logging.WARNING, logger="kai_cp.cycle"):
        res = cycle(doc, "cp-sat").to_json()
    c = res["cycle"]
    assert (c["engine"], c["status"]) == ("greedy", "FALLBACK")
    assert c["fallbackReason"] == f"the model failed (AssertionError: forged {stage} fault); KAI's decisions are used"
    assert _decisions(res) == _decisions(kai)
    assert [u["podGroup"] for u in res["unschedulable"]] == [u["podGroup"] for u in kai["unschedulable"]]
    faults = [r for r in caplog.records if "the model failed" in r.getMessage()]
    assert len(faults) == 1 and faults[0].exc_info is not None


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_strict_mode_raises_the_fault(stage: str, monkeypatch) -> None:
    """KAI_CP_STRICT=1 (the test suite's setting) lets the fault through."""
    monkeypatch.setenv(STRICT_ENV, "1")
    monkeypatch.setattr(STAGES[stage], _fail(stage))
    with pytest.raises(AssertionError, match=f"forged {stage} fault"):
        cycle(fragmented_cluster(), "cp-sat")


def test_solve_command_reports_the_fallback(tmp_path: Path, monkeypatch, capsys) -> None:
    """`kai-cp solve` exits 0 with KAI's decisions and the reason in its output."""
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(fragmented_cluster()))
    monkeypatch.delenv(STRICT_ENV)
    monkeypatch.setattr(STAGES["decode"], _fail("decode"))
    out_file = tmp_path / "out.json"
    assert main(["solve", str(snap), "--engine", "cp-sat", "-o", str(out_file)]) == 0
    out = json.loads(out_file.read_text())
    assert out["cycle"]["status"] == "FALLBACK" and "forged decode fault" in out["cycle"]["fallbackReason"]
    assert placed(out) == {"default/j1-0": "n-a", "default/j2-0": "n-b", "default/busy-b-0": "n-a",
                           "default/j3-0": "n-b"}


def test_in_cluster_metrics_count_model_faults(monkeypatch) -> None:
    """An operator sees model faults as `kai_cp_model_faults` (the cycle's decisions are KAI's)."""
    from types import SimpleNamespace

    from integration.metrics import Metrics
    from integration.run import Scheduler
    loop = SimpleNamespace(metrics=Metrics("kai"), writer=SimpleNamespace(backlog=lambda: 0),
                           cache=SimpleNamespace(counts=lambda: {}))

    def observe(res) -> str:
        Scheduler._observe(loop, res, res.to_json(), [], 0.0, 0.0, 0.0, 0.0)
        return loop.metrics.exposition()[0].decode()
    text = observe(cycle(fragmented_cluster(), "cp-sat"))
    assert "kai_cp_model_faults_total 0.0" in text and 'kai_cp_solver_status{status="OPTIMAL"} 1.0' in text
    monkeypatch.delenv(STRICT_ENV)
    monkeypatch.setattr(STAGES["solve"], _fail("solve"))
    text = observe(cycle(fragmented_cluster(), "cp-sat"))
    assert "kai_cp_model_faults_total 1.0" in text and 'kai_cp_solver_status{status="FALLBACK"} 1.0' in text


def test_decisions_that_break_a_rule_fall_back_to_kais(monkeypatch, caplog) -> None:
    """The model's decisions are checked before they are returned (kai_cp/validate.py): decoded
    decisions that overfill a node (a model bug, forged here by moving every placed pod to the
    first node) are never returned; the cycle returns KAI's and names the broken rule. Strict
    mode raises it."""
    import kai_cp.model.decode as decode_mod
    from kai_cp.cycle import InvalidDecisions
    real = decode_mod.decode

    def overfilling(ctx, counts):
        session = real(ctx, counts)
        for p in list(session.placements.values()):
            if p.node != 0:
                session.unplace(p.task)
                session.place(p.task, 0, False)
        return session
    doc = fragmented_cluster()
    kai = cycle(doc, "greedy").to_json()
    monkeypatch.setattr(STAGES["decode"], overfilling)
    with pytest.raises(InvalidDecisions, match="the model's decisions break a rule: node n-a: gpu placed"):
        cycle(doc, "cp-sat")
    monkeypatch.delenv(STRICT_ENV)
    with caplog.at_level(logging.WARNING, logger="kai_cp.cycle"):
        res = cycle(doc, "cp-sat").to_json()
    c = res["cycle"]
    assert (c["engine"], c["status"]) == ("greedy", "FALLBACK")
    assert c["modelFault"].startswith("InvalidDecisions: the model's decisions break a rule: node n-a: gpu placed")
    assert _decisions(res) == _decisions(kai)
