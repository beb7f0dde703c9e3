"""The security checks' fixtures (tests/support/security.py)."""

from tests.support.security import run_command  # noqa: F401 - a fixture
