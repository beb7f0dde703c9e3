"""``python -m sidecar.analytics`` = ``rebalance-sidecar analytics``."""

from .job import main

raise SystemExit(main())
