"""KAI's actions, side by side as KAI's pipeline runs them (spec 2.5): allocate, then the eviction
actions consolidation, reclaim and preempt (sharing one victim search, `victims.py`, as KAI's
actions share its job solver), then stale-gang eviction. Together they are the greedy engine:
the CP-SAT model's hint, its fallback, and `--engine greedy`."""
