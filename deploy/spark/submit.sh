#!/usr/bin/env bash
# Run the fleet analytics job with spark-submit: locally or on a Spark cluster.
#
#   deploy/spark/submit.sh [spark-submit options] -- <job options>
#
#   deploy/spark/submit.sh --master 'local[2]' -- --input fleet.jsonl --output out/
#   deploy/spark/submit.sh --master spark://spark:7077 --executor-memory 4g -- \
#       --input kafka://broker:9092/fleet-journal --output hdfs:///rebalances/
#
# Packs the `sidecar` package into a zip for --py-files (executors import the job's
# code from it) and, when an input is kafka://, adds the connector jars resolved by
# scripts/spark-jars.sh with --jars. Everything before `--` goes to spark-submit
# unchanged (master, deploy mode, memory, --conf ...); everything after it to
# `rebalance-sidecar analytics` (see its --help). The cluster needs Python 3.11+ with
# pyspark of the same version on every node; the job itself needs nothing else.
#
# Environment:
#   SPARK_SUBMIT   spark-submit to use (default: the one in PYTHON's pyspark, with
#                  SPARK_HOME and PYSPARK_PYTHON set to match unless already set)
#   PYTHON         interpreter whose pyspark is used (default: .venv/bin/python, python3)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="$REPO/.cache/spark-submit"

say() { printf 'submit.sh: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

submit_args=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
  esac
  submit_args+=("$1")
  shift
done
[[ "${1:-}" == "--" ]] || die "separate spark-submit options from job options with -- (try --help)"
shift
job_args=("$@")
[[ ${#job_args[@]} -gt 0 ]] || die "no job options (need at least --input and --output)"

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then python="$REPO/.venv/bin/python"; else python=python3; fi
fi
submit="${SPARK_SUBMIT:-}"
if [[ -z "$submit" ]]; then
  # pip's pyspark ships spark-submit; it finds Spark through SPARK_HOME and runs the
  # job's Python with PYSPARK_PYTHON, so point both at this interpreter's pyspark.
  spark_home="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" ||
    die "pyspark is not importable with $python (set PYTHON or SPARK_SUBMIT)"
  export SPARK_HOME="${SPARK_HOME:-$spark_home}"
  export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$python}"
  submit="$SPARK_HOME/bin/spark-submit"
fi
[[ -x "$submit" ]] || die "spark-submit not found at $submit (set SPARK_SUBMIT)"

mkdir -p "$BUILD"
zip_path="$BUILD/sidecar.zip"
(cd "$REPO" && "$python" - "$zip_path" <<'PY'
import sys, zipfile, pathlib
target = pathlib.Path(sys.argv[1])
partial = target.with_suffix(".partial")
with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
    for path in sorted(pathlib.Path("sidecar").rglob("*.py")):
        archive.write(path)
partial.replace(target)
PY
)

extra=(--py-files "$zip_path")
for arg in "${job_args[@]}"; do
  if [[ "$arg" == kafka://* ]]; then
    extra+=(--jars "$("$REPO/scripts/spark-jars.sh" --list)")
    break
  fi
done

# Static settings of the job (sidecar/analytics/session.py STATIC_CONF) come first, so
# a --conf given to this script overrides them; the time zone comes last: the tables
# are defined in UTC.
exec "$submit" --conf spark.sql.codegen.cache.maxEntries=2000 "${submit_args[@]}" "${extra[@]}" \
  --conf spark.sql.session.timeZone=UTC \
  "$REPO/sidecar/analytics/submit.py" "${job_args[@]}"
