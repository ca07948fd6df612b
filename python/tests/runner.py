"""Runs the test_*.py files of one folder (not its subfolders) with pytest
when it is installed, else with the small runner below (the GPU machine has
no pip), and prints cmocka's summary lines for tests/run.sh:

    [  PASSED  ] N test(s).
    [  FAILED  ] N test(s), listed below:
    [  SKIPPED ] N test(s)

The fallback runner knows what these tests use and nothing more: plain
test functions, the tmp_path fixture, pytest.raises(match=), pytest.skip,
pytest.importorskip and pytest.mark.skipif.
"""
import contextlib
import glob
import importlib.util
import inspect
import os
import pathlib
import re
import shutil
import sys
import tempfile
import traceback
import types


def summary(passed, failed, skipped, failures):
    print("[  PASSED  ] %d test(s)." % passed)
    if failed:
        print("[  FAILED  ] %d test(s), listed below:" % failed)
        for name in failures:
            print("[  FAILED  ] %s" % name)
    if skipped:
        print("[  SKIPPED ] %d test(s)" % skipped)
    sys.stdout.flush()
    return 1 if failed else 0


def run_pytest(pytest, files):
    class Count:
        passed = failed = skipped = 0
        failures = []

        def pytest_runtest_logreport(self, report):
            if report.failed:
                Count.failed += 1
                Count.failures.append(report.nodeid)
            elif report.skipped:
                Count.skipped += 1
            elif report.when == "call":
                Count.passed += 1

    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-rs"] + files, plugins=[Count()])
    if rc not in (0, 1, 5) and not Count.failed:  # 5: nothing collected
        Count.failed += 1
        Count.failures.append("pytest exited with status %d" % rc)
    return summary(Count.passed, Count.failed, Count.skipped, Count.failures)


class Skipped(Exception):
    pass


def make_shim():
    """A module named pytest with the few calls the tests use."""
    shim = types.ModuleType("pytest")

    def skip(reason="", allow_module_level=False):
        raise Skipped(reason)

    @contextlib.contextmanager
    def raises(exc, match=None):
        info = types.SimpleNamespace(value=None, type=None)
        try:
            yield info
        except exc as e:
            info.value, info.type = e, type(e)
            if match is not None and not re.search(match, str(e)):
                raise AssertionError("%r does not match %r" % (str(e), match))
        else:
            raise AssertionError("DID NOT RAISE %s" % exc)

    def importorskip(name, reason=None):
        try:
            return __import__(name, fromlist=["_"])
        except ImportError:
            raise Skipped(reason or "could not import %r" % name)

    def skipif(cond, reason=""):
        def deco(fn):
            if cond:
                fn._skip_reason = reason or "skipped"
            return fn
        return deco

    shim.skip = skip
    shim.raises = raises
    shim.importorskip = importorskip
    shim.mark = types.SimpleNamespace(skipif=skipif)
    return shim


def run_shim(files):
    sys.modules["pytest"] = make_shim()
    passed = failed = skipped = 0
    failures = []
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Skipped as e:
            print("SKIP %s: %s" % (name, e))
            skipped += 1
            continue
        except Exception:
            traceback.print_exc()
            failed += 1
            failures.append(path)
            continue
        tests = [(n, f) for n, f in vars(mod).items()
                 if n.startswith("test_") and inspect.isfunction(f)]
        for tname, fn in tests:
            node = "%s::%s" % (os.path.basename(path), tname)
            if getattr(fn, "_skip_reason", None):
                print("SKIP %s: %s" % (node, fn._skip_reason))
                skipped += 1
                continue
            tmp = None
            kwargs = {}
            if "tmp_path" in inspect.signature(fn).parameters:
                tmp = tempfile.mkdtemp(prefix="jitop-py-")
                kwargs["tmp_path"] = pathlib.Path(tmp)
            try:
                fn(**kwargs)
                passed += 1
                print("PASS %s" % node)
            except Skipped as e:
                skipped += 1
                print("SKIP %s: %s" % (node, e))
            except Exception:
                traceback.print_exc()
                failed += 1
                failures.append(node)
                print("FAIL %s" % node)
            finally:
                if tmp:
                    shutil.rmtree(tmp, ignore_errors=True)
    return summary(passed, failed, skipped, failures)


def main():
    folder = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__))
    files = sorted(glob.glob(os.path.join(folder, "test_*.py")))
    sys.path.insert(0, folder)
    try:
        import pytest
    except ImportError:
        pytest = None
    if pytest is not None and os.environ.get("JITOP_PY_RUNNER") != "builtin":
        return run_pytest(pytest, files)
    return run_shim(files)


if __name__ == "__main__":
    sys.exit(main())
