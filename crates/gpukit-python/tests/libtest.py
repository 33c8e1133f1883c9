#!/usr/bin/env python3
"""Runs the `test_*.py` tests beside this file and reports them as Rust's libtest does
(`test NAME ... ok`, each test's output under `---- NAME stdout ----`, then `test result:`),
so that the GPU bundle's run.sh, which runs it as its test unit `python`, counts and checks
them as it does any test binary. Positional arguments are name filters (substrings);
`--list` lists the tests (`NAME: test`); libtest's other options are accepted and ignored.

The module is looked for beside this file's folder (the bundle's `python/`) and then on
PYTHONPATH; the tests themselves are in `python/` in the bundle, beside this file here."""

import contextlib
import io
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))


def tests_of(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from tests_of(item)
        else:
            yield item


def main(argv):
    bundle_python = os.path.join(os.path.dirname(HERE), "python")
    start_dir = bundle_python if os.path.isfile(os.path.join(bundle_python, "test_dlpack.py")) else HERE
    sys.path.insert(0, start_dir)
    # The module for child processes too (test_examples runs an example).
    module_dir = bundle_python if os.path.isdir(bundle_python) else None
    if module_dir:
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = module_dir + (os.pathsep + old if old else "")
    filters = [a for a in argv if not a.startswith("-")]
    suite = unittest.defaultTestLoader.discover(start_dir, pattern="test_*.py")
    everything = list(tests_of(suite))
    name = lambda t: t.id().replace(".", "::")  # noqa: E731
    chosen = [t for t in everything if not filters or any(f in name(t) for f in filters)]
    if "--list" in argv:
        for t in chosen:
            print(f"{name(t)}: test")
        return 0
    print(f"\nrunning {len(chosen)} tests", flush=True)
    passed = failed = 0
    outputs = []
    began = time.monotonic()
    for t in chosen:
        result = unittest.TestResult()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            t(result)
        problems = result.failures + result.errors
        if problems:
            failed += 1
            verdict = "FAILED"
            text = out.getvalue() + "".join(trace for _, trace in problems)
        else:
            passed += 1
            verdict = "ok"
            text = out.getvalue()
        print(f"test {name(t)} ... {verdict}", flush=True)
        if text.strip():
            outputs.append((name(t), text))
    for test_name, text in outputs:
        print(f"\n---- {test_name} stdout ----\n{text.rstrip()}")
    status = "FAILED" if failed else "ok"
    print(
        f"\ntest result: {status}. {passed} passed; {failed} failed; 0 ignored; 0 measured; "
        f"{len(everything) - len(chosen)} filtered out; finished in {time.monotonic() - began:.2f}s\n"
    )
    return 101 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
