"""pytest puts tests/ on sys.path, so this folder is imported as the package `integration` and
shadows the real one; the real package's folder (of this checkout) is added to its path, so
`integration.apply` & co. are this checkout's modules, not those of wherever kai-cp is installed
(a worktree tested with the main checkout's editable install)."""

import os

__path__.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "integration"))
