"""The pure tier: no socket, no process, no sleep (tests/support/purity.py guards it)."""

from tests.support.purity import (  # noqa: F401 - hooks for this directory
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
