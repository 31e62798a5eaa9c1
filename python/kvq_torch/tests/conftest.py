"""Shared fixtures. The torch-free tests (test_configs.py) run anywhere; the rest need torch and
the built package, and the GPU tests a CUDA device: each skips with the reason otherwise."""
import os
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _import_kvq_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return None, "torch is not installed (CI runs the torch-free tests only)"
    try:
        import kvq_torch
        kvq_torch.compiled_configs()
        return kvq_torch, ""
    except Exception as e:  # noqa: BLE001  (not built, or built for another torch)
        return None, "kvq_torch is not built/installed (pip install --no-build-isolation ./python/kvq_torch): %s" % e


@pytest.fixture(scope="session")
def kvq():
    mod, why = _import_kvq_torch()
    if mod is None:
        pytest.skip(why)
    return mod


@pytest.fixture(scope="session")
def cuda(kvq):
    import torch
    if not torch.cuda.is_available():
        if os.environ.get("KVQ_REQUIRE_GPU") == "1":
            pytest.fail("KVQ_REQUIRE_GPU=1 and no CUDA device")
        pytest.skip("no CUDA device (GPU tests need one; KVQ_REQUIRE_GPU=1 makes this a failure)")
    if not kvq.built_with_cuda():
        pytest.skip("kvq_torch was built without CUDA (CPU reference only)")
    return torch.device("cuda")
