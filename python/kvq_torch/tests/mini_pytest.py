"""The few pieces of pytest the torch-free tests use, for machines without pytest (CI): raises,
mark.parametrize, mark.skipif, and a runner (run_torch_free.py) that prints pytest's summary line."""
import contextlib
import inspect
import tempfile
import traceback
from pathlib import Path


class _Skip(Exception):
    pass


class _Mark:
    @staticmethod
    def parametrize(name, values):
        def deco(f):
            f._params = (name, list(values))
            return f
        return deco

    @staticmethod
    def skipif(cond, reason=""):
        def deco(f):
            if cond:
                f._skip = reason
            return f
        return deco


class pytest:  # noqa: N801  (stands in for the module)
    mark = _Mark()

    @staticmethod
    @contextlib.contextmanager
    def raises(exc):
        try:
            yield
        except exc:
            return
        raise AssertionError("did not raise %s" % exc.__name__)

    @staticmethod
    def skip(reason=""):
        raise _Skip(reason)


def run_module(module) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for name, f in sorted(vars(module).items()):
        if not name.startswith("test_") or not callable(f):
            continue
        if getattr(f, "_skip", None) is not None:
            skipped += 1
            print("SKIPPED %s: %s" % (name, f._skip))
            continue
        cases = [dict()]
        if hasattr(f, "_params"):
            cases = [{f._params[0]: v} for v in f._params[1]]
        for kwargs in cases:
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    if "tmp_path" in inspect.signature(f).parameters:
                        kwargs = dict(kwargs, tmp_path=Path(tmp))
                    f(**kwargs)
                passed += 1
            except _Skip as e:
                skipped += 1
                print("SKIPPED %s: %s" % (name, e))
            except Exception:  # noqa: BLE001
                failed += 1
                print("FAILED %s %s\n%s" % (name, kwargs, traceback.format_exc()))
    return passed, failed, skipped
