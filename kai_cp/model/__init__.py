"""The CP-SAT model of one allocation cycle: one module per concern (see base.Concern)."""
