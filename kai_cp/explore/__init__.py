"""The notebook-facing API: a snapshot as tables, what-if edits, cycles and simulations.

    from kai_cp.explore import Cluster
    c = Cluster.load("examples/showcase-cluster.zip")
    c.queues()                                  # deserved / fair share / allocated / requested
    cyc = c.cycle(engine="cp-sat", time_limit=1.0)
    cyc.summary(), cyc.binds(), cyc.evictions(), cyc.pending()
    c.with_queue("llm", quota=40).cycle()       # what if

Scripts use it the same way; the CLI keeps its own JSON contract (`CycleResult.to_json`).
Tables are pandas DataFrames in human units (GPUs, cores, GiB); plots live in
`kai_cp.explore.plots` (matplotlib, imported only there).
"""

from kai_cp.explore.cluster import Cluster, job_objects
from kai_cp.explore.cycle import Cycle, compare
from kai_cp.explore.simulation import Simulation

__all__ = ["Cluster", "Cycle", "Simulation", "compare", "job_objects"]
