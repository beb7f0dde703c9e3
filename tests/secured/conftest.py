"""The secured-broker tests' fixtures (defined in tests/support/secured.py)."""

from tests.support.secured import secured_broker, secured_sidecar

__all__ = ["secured_broker", "secured_sidecar"]  # fixtures
