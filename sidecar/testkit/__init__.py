"""The test kit: real things to test and measure the sidecar with.

Tests (``tests/``) and benchmarks (``bench/``) both import it, so neither copies the
other and neither copies product code (as ``structlog.testing`` ships with structlog):

* ``kafka``     topics and committed offsets on a real broker (``deploy/local/kafka.sh``)
* ``sidecars``  sidecars as real subprocesses (the image's command), with fast group bounds
* ``receiver``  a real webhook receiver that verifies signatures (needs the ``dev`` extra:
  ``standardwebhooks`` verifies, so a signing bug is not hidden by our own code)
* ``apps``      an application (a receiver) with its sidecar
* ``events``    event drafts to journal, every field given a plain value

Nothing here is imported by the daemon.
"""
