"""The CP-SAT model of one allocation cycle: one module per concern (see base.Concern)."""

from kai_cp.model._ortools import import_cp_model as _import_cp_model

_import_cp_model()
