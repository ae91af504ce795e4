"""Settings for the whole test suite (subprocesses and notebook kernels inherit them)."""

import os

from kai_cp.cycle import STRICT_ENV

# A fault of the CP-SAT model (building, solving or decoding) raises in tests: a cycle would
# otherwise fall back to KAI's decisions, which are valid, and the invariant suites would not
# see the bug. tests/test_model_fault.py unsets it to test the fallback itself.
os.environ[STRICT_ENV] = "1"
