"""Entry file for ``spark-submit`` (see deploy/spark/submit.sh).

spark-submit owns the master, the jars (``--jars`` / ``--packages`` for Kafka) and
the memory settings; this only parses the job's own options:

    spark-submit --master spark://host:7077 --py-files sidecar.zip \\
        --conf spark.sql.codegen.cache.maxEntries=2000 \\
        sidecar/analytics/submit.py --input kafka://broker:9092/fleet --output s3a://bucket/out

The job's static settings (``session.STATIC_CONF``, here the codegen cache) must be on the
command line, as above: they are fixed before this file runs. ``submit.sh`` adds them.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from sidecar.analytics.job import main

    raise SystemExit(main(sys.argv[1:], managed_session=True))
