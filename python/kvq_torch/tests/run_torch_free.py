#!/usr/bin/env python3
"""What CI can check of kvq_torch without torch or a GPU (ctest: kvq_torch_torch_free): the
configuration lists and their agreement with cmake (test_configs.py), under pytest when it is
installed, else under mini_pytest. The tests that need torch, the built package or a GPU are
reported as skipped, with why."""
import importlib
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))

try:
    import pytest  # noqa: F401
    have_pytest = True
except ImportError:
    have_pytest = False

try:
    import torch  # noqa: F401
    torch_note = ""
except ImportError:
    torch_note = ("skipped: test_cpu_ops.py, test_decode_runs.py, test_gpu_ops.py, test_rotation.py (torch is not "
                  "installed here; they run where kvq_torch is built: python/kvq_torch/run_gpu.sh)")

if have_pytest:
    code = pytest.main(["-q", str(here / "test_configs.py"), "-p", "no:cacheprovider"])
    if torch_note:
        print(torch_note)
    sys.exit(int(code))

import mini_pytest  # noqa: E402

sys.modules["pytest"] = mini_pytest.pytest
module = importlib.import_module("test_configs")
passed, failed, skipped = mini_pytest.run_module(module)
if torch_note:
    print(torch_note)
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed or not passed else 0)
