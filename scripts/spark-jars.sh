#!/usr/bin/env bash
# Resolve the Spark Kafka connector for the installed pyspark from Maven Central.
#
#   scripts/spark-jars.sh            # prints the jar directory (the only stdout line)
#   scripts/spark-jars.sh --list     # prints the jars, comma-separated (spark-submit --jars)
#
# Copies spark-sql-kafka-0-10_2.13, spark-token-provider-kafka-0-10_2.13, kafka-clients
# and commons-pool2 into .cache/spark-jars/<pyspark version>/ with
# `mvn dependency:copy-dependencies` on deploy/spark/pom.xml. Everything else the
# connector needs is already among pyspark's own jars. Cached: a stamp file records
# the pom and versions, so a second run does not start Maven. Safe in CI: batch mode,
# no prompts, the cache is filled in a temporary directory and renamed into place.
#
# When Maven Central has no connector at exactly the pyspark version (a new pyspark
# on PyPI can precede it), it falls back to SPARK_KAFKA_FALLBACK / the token provider
# to SPARK_TOKEN_PROVIDER_FALLBACK and says so on stderr.
#
# Environment:
#   PYTHON                 interpreter with pyspark (default: .venv/bin/python, python3)
#   SPARK_VERSION          connector version to resolve (default: pyspark's version)
#   SPARK_KAFKA_FALLBACK   connector version if the exact one is missing (default 4.2.0)
#   SPARK_TOKEN_PROVIDER_FALLBACK  token provider version for the fallback (default 4.0.0)
#   SPARK_JARS_DIR         cache root (default $REPO/.cache/spark-jars)
#   SPARK_JARS_MVN_SETTINGS  Maven settings file (default deploy/spark/settings.xml)
#   MAVEN_REPO_LOCAL       Maven local repository (default: Maven's, ~/.m2/repository)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
POM="$REPO/deploy/spark/pom.xml"
SETTINGS="${SPARK_JARS_MVN_SETTINGS:-$REPO/deploy/spark/settings.xml}"
CACHE_ROOT="${SPARK_JARS_DIR:-$REPO/.cache/spark-jars}"
FALLBACK="${SPARK_KAFKA_FALLBACK:-4.2.0}"
TOKEN_FALLBACK="${SPARK_TOKEN_PROVIDER_FALLBACK:-4.0.0}"
SCALA=2.13
ARTIFACTS="spark-sql-kafka-0-10_$SCALA,spark-token-provider-kafka-0-10_$SCALA,kafka-clients,commons-pool2"

say() { printf 'spark-jars.sh: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

mode=dir
case "${1:-}" in
  "") ;;
  --list) mode=list ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac

pyspark_version() {
  local python="${PYTHON:-}"
  if [[ -z "$python" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then python="$REPO/.venv/bin/python"; else python=python3; fi
  fi
  "$python" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null ||
    die "pyspark is not importable with $python (set PYTHON or SPARK_VERSION)"
}

VERSION="${SPARK_VERSION:-$(pyspark_version)}"
TARGET="$CACHE_ROOT/$VERSION"
STAMP="$TARGET/.resolved"

emit() {
  if [[ "$mode" == list ]]; then
    local jars=("$TARGET"/*.jar)
    local IFS=,
    printf '%s\n' "${jars[*]}"
  else
    printf '%s\n' "$TARGET"
  fi
}

digest() { cat "$POM" "$SETTINGS" | sha256sum | cut -d' ' -f1; }

if [[ -f "$STAMP" ]] && grep -q "^pom=$(digest)\$" "$STAMP" && compgen -G "$TARGET/*.jar" >/dev/null; then
  emit
  exit 0
fi

command -v mvn >/dev/null || die "mvn not found (Maven 3.8+ is a prerequisite for Kafka input)"
command -v java >/dev/null || die "java not found (Java 17+)"

mvn_args=(-B -q -s "$SETTINGS" -f "$POM")
if [[ -n "${MAVEN_REPO_LOCAL:-}" ]]; then mvn_args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL"); fi

mkdir -p "$CACHE_ROOT"
WORK="$(mktemp -d "$CACHE_ROOT/.resolve.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# copy <connector version> <token provider version>
copy() {
  rm -rf "$WORK/jars"
  mvn "${mvn_args[@]}" dependency:copy-dependencies \
    "-Dspark.version=$1" "-Dspark.token.version=$2" \
    -DincludeScope=runtime "-DincludeArtifactIds=$ARTIFACTS" \
    "-DoutputDirectory=$WORK/jars" >"$WORK/mvn.log" 2>&1
}

say "resolving spark-sql-kafka-0-10_$SCALA $VERSION from Maven Central"
connector="$VERSION"
token="$VERSION"
if ! copy "$connector" "$token"; then
  say "warning: Maven Central has no Kafka connector $VERSION (or its token provider);"
  say "warning: falling back to connector $FALLBACK with token provider $TOKEN_FALLBACK"
  connector="$FALLBACK"
  token="$TOKEN_FALLBACK"
  if ! copy "$connector" "$token"; then
    tail -n 20 "$WORK/mvn.log" >&2
    die "could not resolve the Kafka connector (see the Maven output above)"
  fi
fi

count="$(find "$WORK/jars" -name '*.jar' | wc -l)"
[[ "$count" -eq 4 ]] || die "expected 4 jars, got $count in $WORK/jars"
printf 'pom=%s\nconnector=%s\ntoken_provider=%s\n' "$(digest)" "$connector" "$token" \
  >"$WORK/jars/.resolved"
rm -rf "$TARGET"
mv "$WORK/jars" "$TARGET"
say "cached $(ls "$TARGET" | tr '\n' ' ')in $TARGET"
emit
