"""Keep pydantic from searching for plugins when the `kai-cp` command starts.

At its first model class pydantic imports `pydantic.plugin._loader`, which imports
`importlib.metadata` (email, zipfile, csv, ...) and then scans every installed distribution's
entry points for the `pydantic` group: ~35 ms of every `kai-cp` process, a tenth of
`kai-cp solve` on a small snapshot (issue 9). kai-cp uses no pydantic plugin. So the command
line (`console_main` only, never a library import or a notebook) puts a stand-in loader with
no plugins in place before the models are imported, as pydantic's own
`PYDANTIC_DISABLE_PLUGINS=__all__` would, without the import. Whoever sets
`PYDANTIC_DISABLE_PLUGINS` (to any value, empty included) keeps pydantic's own handling.
"""

from __future__ import annotations

import os
import sys
import types

LOADER = "pydantic.plugin._loader"


def skip_plugin_search() -> bool:
    """Install the stand-in; False when pydantic's own loader is in use (already imported, or
    the user configured plugins through the environment)."""
    if LOADER in sys.modules or "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        return False
    stand_in = types.ModuleType(LOADER, "stand-in without plugins (see kai_cp/pydantic_plugins.py)")
    stand_in.get_plugins = lambda: ()      # type: ignore[attr-defined]
    sys.modules[LOADER] = stand_in
    return True
