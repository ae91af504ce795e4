"""kai_cp/gcpause.py: the collector paused around allocation-heavy steps, and run after a
loop's latency-bound step instead of inside the next one (the in-cluster loop, the FGD
benchmark)."""

from __future__ import annotations

import gc
import weakref

import pytest

from kai_cp.gcpause import collected_after, gc_paused


class _Node:
    def __init__(self) -> None:
        self.me = self           # a reference cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_restored_after():
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():            # nesting keeps it paused
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()        # a caller's own pause is left as it was


def test_the_body_runs_uncollected_and_its_garbage_is_collected_after():
    with collected_after() as done:
        assert not gc.isenabled()
        node = _Node()
        ref = weakref.ref(node)
        del node
        assert ref() is not None     # cyclic garbage survives inside the body
    assert ref() is None             # and is gone once the step is over
    assert gc.isenabled() and done.seconds >= 0.0


def test_a_body_that_raises_restores_the_collector():
    with pytest.raises(RuntimeError):
        with collected_after():
            raise RuntimeError("cycle failed")
    assert gc.isenabled()
