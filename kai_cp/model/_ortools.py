"""Import OR-Tools' `cp_model` without pandas.

`ortools.sat.python.cp_model` imports pandas at its top for its pandas helpers
(`new_int_var_series` and friends, which kai-cp does not use); pandas is ~0.3-0.4 s of
start-up, as much as a small snapshot's whole cycle (issue 9). When pandas is not loaded
yet, `cp_model` is imported against a stand-in module whose `Index`/`Series` are empty
classes, and the stand-in is removed again right after: a later `import pandas` gets the
real one, and `cp_model`'s pandas helpers refuse real pandas objects with a TypeError
(they check `isinstance(obj, pd.Index)`), never silently. When pandas is already loaded
(a notebook), or `KAI_CP_ORTOOLS_PANDAS=1` is set, the ordinary import is used.
"""

from __future__ import annotations

import os
import sys
import types


def import_cp_model() -> None:
    if "ortools.sat.python.cp_model" in sys.modules or "pandas" in sys.modules \
            or os.environ.get("KAI_CP_ORTOOLS_PANDAS") == "1":
        import ortools.sat.python.cp_model  # noqa: F401
        return
    stand_in = types.ModuleType("pandas", "stand-in while kai-cp imports ortools' cp_model (see kai_cp/model/_ortools.py)")
    stand_in.Index = type("Index", (), {})      # type: ignore[attr-defined]
    stand_in.Series = type("Series", (), {})    # type: ignore[attr-defined]
    sys.modules["pandas"] = stand_in
    try:
        import ortools.sat.python.cp_model  # noqa: F401
    except (ImportError, AttributeError):
        # this ortools needs more of pandas at import: drop the stand-in, import normally
        for name in [n for n in sys.modules if n.startswith("ortools.sat.python.cp_model")]:
            del sys.modules[name]
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
        import ortools.sat.python.cp_model  # noqa: F401
    finally:
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
