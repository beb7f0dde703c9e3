"""The container checks' fixtures (defined in tests/support/container.py)."""

from tests.support.container import containers, image

__all__ = ["containers", "image"]  # fixtures
