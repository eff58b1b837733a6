"""Tests of the Python client. `python3 -m unittest discover -s clients/python`
runs the unit tests (test_*.py) and client_e2e_test.py, which skips unless
VERIFYSVC_ADDR names a running verifysvc."""

import os


def load_tests(loader, standard_tests, pattern):
    # Discovery hands this package to load_tests instead of descending into
    # it, so load the unit tests here, plus the end-to-end test, whose
    # project-style *_test name the default pattern (test*.py) would miss.
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(here)
    for file_pattern in (pattern or "test*.py", "client_e2e_test.py"):
        standard_tests.addTests(loader.discover(
            start_dir=here, pattern=file_pattern, top_level_dir=top))
    return standard_tests
