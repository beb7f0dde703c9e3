"""The deploy checks' fixtures (tests/support/deploy.py)."""

from tests.support.deploy import tools  # noqa: F401 - a fixture
