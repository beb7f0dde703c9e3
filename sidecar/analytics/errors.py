"""The analytics command's refusals: ``JobError`` (one line, exit 1 once the job runs)
and ``UsageError`` (bad arguments or inputs: one line, exit 2, nothing started).
``sidecar.analytics.arguments`` re-exports both."""

from __future__ import annotations


class JobError(Exception):
    """A problem with the job's inputs or set-up, reported without a traceback."""


class UsageError(JobError):
    """Arguments or inputs the job cannot use: one line, exit code 2, nothing started."""
