"""Refreshes ``tests/data/stored.json``: the slow mpmath references of ``tests/stored.py``.

Runs the tests that use them in one process with recording on; every value they compute
(a call not yet kept, or kept under an older version of its function) is added to the
file. Then the values of functions that were removed or edited since are dropped. Values
of calls that no test makes any more stay, harmlessly; delete the file first for a clean
table. Usage::

    python tests/make_stored.py                     # the modules below
    python tests/make_stored.py tests/test_profile.py::test_cos_sin_against_mpmath
"""

import os
import subprocess
import sys

import stored

#: the test modules that call stored references
MODULES = ("tests/test_profile.py", "tests/test_profile_properties.py", "tests/test_kernels.py",
           "tests/test_sweep.py", "tests/test_wor.py")


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, **{stored.RECORD_VARIABLE: "1"})
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               *(argv or MODULES)]
    code = subprocess.call(command, cwd=root, env=env)
    dropped = stored.prune(os.path.basename(m).removesuffix(".py") for m in MODULES)
    print(f"{stored.PATH}: {dropped} stale values dropped")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
