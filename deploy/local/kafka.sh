#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft broker + controller) for tests and demos.
#
#   deploy/local/kafka.sh start|fresh|stop|status|restart|pause|resume|reset|address|log
#
# `start` prints the bootstrap address (127.0.0.1:PORT) as its only stdout line; progress
# goes to stderr. `fresh` is `start` from an empty data directory unless a broker is already
# running (then it is used as it is): what the test command and the bench start. Topics are
# never deleted by them, and after a few dozen runs ~18,000 leftover partitions outgrew the
# broker's heap (OutOfMemoryError halfway through a run). The previous broker log is kept
# in $KAFKA_DATA_DIR.last-log. Jars are resolved once by Maven from deploy/local/pom.xml into
# $KAFKA_HOME/libs (a stamp file records the pom they came from).
#
# Environment:
#   KAFKA_PORT             PLAINTEXT listener port (default 39092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port (default KAFKA_PORT+1)
#   KAFKA_DATA_DIR         logs, pid file, rendered config (default $REPO/.cache/kafka-run)
#   KAFKA_HOME             jar cache (default $REPO/.cache/kafka)
#   KAFKA_HEAP_OPTS        broker heap (default "-Xms128m -Xmx512m")
#   KAFKA_START_TIMEOUT    seconds to wait for the broker to answer (default 90)
#   KAFKA_STOP_TIMEOUT     seconds between SIGTERM and SIGKILL (default 20)
#   KAFKA_SECURITY         "secured": also listen with SASL_SSL/SCRAM-SHA-512 (KAFKA_PORT+2),
#                          SSL with client certificates required (KAFKA_PORT+3) and, when
#                          KAFKA_OAUTH_JWKS_URL is set, SASL_SSL/OAUTHBEARER (KAFKA_PORT+4);
#                          certificates, keystores and passwords in $KAFKA_DATA_DIR/secured
#                          (deploy/local/secured-certs.sh); SCRAM user "sidecar" made at format
#   KAFKA_OAUTH_JWKS_URL   the JWKS the OAUTHBEARER listener validates tokens with
#   KAFKA_OAUTH_TOKEN_URL  the token endpoint clients use (allowed with the JWKS URL)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PORT="${KAFKA_PORT:-39092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
DATA_DIR="${KAFKA_DATA_DIR:-$REPO/.cache/kafka-run}"
KAFKA_HOME="${KAFKA_HOME:-$REPO/.cache/kafka}"
LIBS="$KAFKA_HOME/libs"
STAMP="$LIBS/.resolved"
PID_FILE="$DATA_DIR/kafka.pid"
LOG_DIR="$DATA_DIR/log"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-20}"
ADDRESS="127.0.0.1:$PORT"
SECURITY="${KAFKA_SECURITY:-plaintext}"
SECURED_DIR="$DATA_DIR/secured"

say() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

# Prints the pid of the running broker, or fails.
running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a recycled pid: it must be our broker.
  local cmdline
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmdline" == *kafka.Kafka* ]] || return 1
  printf '%s\n' "$pid"
}

pom_digest() { sha256sum "$HERE/pom.xml" | cut -d' ' -f1; }

resolve_jars() {
  local digest
  digest="$(pom_digest)"
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$digest" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch the Kafka jars)"
  say "resolving Kafka jars with Maven into $LIBS (once)"
  rm -rf "$LIBS"
  mkdir -p "$LIBS"
  if ! mvn -B -q -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS" -DincludeScope=runtime </dev/null >&2; then
    rm -rf "$LIBS"
    die "Maven could not resolve the Kafka jars"
  fi
  printf '%s\n' "$digest" >"$STAMP"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A Kafka Uuid: 16 random bytes, base64url without padding, not starting with '-'.
random_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" != -* ]] && break
  done
  printf '%s\n' "$id"
}

render_config() {
  mkdir -p "$DATA_DIR/logs" "$LOG_DIR"
  sed -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
    -e "s|@DATA_DIR@|$DATA_DIR|g" "$HERE/server.properties.template" >"$DATA_DIR/server.properties"
  if [[ "$SECURITY" == secured ]]; then render_secured; fi
}

# The secured listeners, appended (later keys win in a properties file).
render_secured() {
  "$HERE/secured-certs.sh" init "$SECURED_DIR"
  local store listeners advertised map
  store="$(cat "$SECURED_DIR/store.password")"
  listeners="PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT"
  listeners+=",SASL_SSL://127.0.0.1:$((PORT + 2)),SSL://127.0.0.1:$((PORT + 3))"
  advertised="PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$((PORT + 2))"
  advertised+=",SSL://127.0.0.1:$((PORT + 3))"
  map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,OAUTH:SASL_SSL"
  if [[ -n "${KAFKA_OAUTH_JWKS_URL:-}" ]]; then
    listeners+=",OAUTH://127.0.0.1:$((PORT + 4))"
    advertised+=",OAUTH://127.0.0.1:$((PORT + 4))"
  fi
  cat >>"$DATA_DIR/server.properties" <<EOF

# KAFKA_SECURITY=secured (kafka.sh): TLS, SCRAM, client certificates, OAUTHBEARER.
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$map
ssl.keystore.type=PKCS12
ssl.keystore.location=$SECURED_DIR/broker.p12
ssl.keystore.password=$store
ssl.key.password=$store
ssl.truststore.type=PKCS12
ssl.truststore.location=$SECURED_DIR/truststore.p12
ssl.truststore.password=$store
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  if [[ -n "${KAFKA_OAUTH_JWKS_URL:-}" ]]; then
    cat >>"$DATA_DIR/server.properties" <<EOF
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url=$KAFKA_OAUTH_JWKS_URL
listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience=kafka
EOF
  fi
}

# The JVM's system properties for the secured mode: Kafka 4 fetches only allowed URLs.
secured_jvm_opts() {
  [[ "$SECURITY" == secured && -n "${KAFKA_OAUTH_JWKS_URL:-}" ]] || return 0
  local urls="$KAFKA_OAUTH_JWKS_URL"
  [[ -z "${KAFKA_OAUTH_TOKEN_URL:-}" ]] || urls+=",$KAFKA_OAUTH_TOKEN_URL"
  printf '%s\n' "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$urls"
}

# Short-lived JVM for Kafka's command-line classes; its logging is kept quiet.
TOOL_JAVA=(java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=ERROR)
java_tool() {
  "${TOOL_JAVA[@]}" -cp "$LIBS/*" "$@"
}

format_storage() {
  [[ -f "$DATA_DIR/logs/meta.properties" ]] && return 0
  local cluster_id
  cluster_id="$(random_cluster_id)"
  say "formatting $DATA_DIR/logs (cluster id $cluster_id)"
  local scram=()
  if [[ "$SECURITY" == secured ]]; then
    scram=(--add-scram "SCRAM-SHA-512=[name=sidecar,password=$(cat "$SECURED_DIR/sidecar.password")]")
  fi
  java_tool kafka.tools.StorageTool format --ignore-formatted \
    -t "$cluster_id" -c "$DATA_DIR/server.properties" "${scram[@]}" </dev/null >"$LOG_DIR/format.log" 2>&1 ||
    {
      cat "$LOG_DIR/format.log" >&2
      die "formatting the storage failed"
    }
}

log_tail() {
  say "last lines of $LOG_DIR/server.log and $LOG_DIR/stdout.log:"
  tail -n 40 "$LOG_DIR/server.log" >&2 2>/dev/null || true
  tail -n 20 "$LOG_DIR/stdout.log" >&2 2>/dev/null || true
}

# True once the broker answers a metadata request (list topics) on the client listener.
broker_answers() {
  port_open "$PORT" || return 1
  printf '%s\n' request.timeout.ms=5000 default.api.timeout.ms=8000 >"$DATA_DIR/check.properties"
  timeout 30 "${TOOL_JAVA[@]}" -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "$ADDRESS" --list \
    --command-config "$DATA_DIR/check.properties" </dev/null >"$LOG_DIR/check.log" 2>&1
}

cmd_start() {
  if running_pid >/dev/null; then
    say "already running (pid $(running_pid))"
    printf '%s\n' "$ADDRESS"
    return 0
  fi
  rm -f "$PID_FILE"
  command -v java >/dev/null || die "java not found (Kafka 4 needs Java 17+)"
  port_open "$PORT" && die "port $PORT is already in use by another process"
  port_open "$CONTROLLER_PORT" && die "port $CONTROLLER_PORT is already in use by another process"
  resolve_jars
  render_config
  format_storage
  say "starting Kafka on $ADDRESS ($SECURITY, controller 127.0.0.1:$CONTROLLER_PORT, data $DATA_DIR)"
  # setsid: the broker leads its own process group, so stop/pause reach all of it.
  # All its fds are redirected, so callers capturing our stdout do not wait on it.
  local heap jvm_opts
  read -r -a heap <<<"$HEAP_OPTS"
  mapfile -t jvm_opts < <(secured_jvm_opts)
  # shellcheck disable=SC2016  # $$ and "$@" expand in the inner shell
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
    java "${heap[@]}" "${jvm_opts[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dkafka.logs.dir="$LOG_DIR" -Dlog4j2.configurationFile="$HERE/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$DATA_DIR/server.properties" \
    </dev/null >>"$LOG_DIR/stdout.log" 2>&1 &
  local deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! running_pid >/dev/null && [[ -f "$PID_FILE" ]] && ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      log_tail
      rm -f "$PID_FILE"
      die "the broker exited during start-up"
    fi
    if running_pid >/dev/null && broker_answers; then
      say "ready (pid $(running_pid))"
      printf '%s\n' "$ADDRESS"
      return 0
    fi
    sleep 1
  done
  log_tail
  cat "$LOG_DIR/check.log" >&2 2>/dev/null || true
  cmd_stop || true
  die "the broker did not answer on $ADDRESS within ${START_TIMEOUT}s"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE"
    say "not running"
    return 0
  fi
  say "stopping pid $pid"
  kill -CONT -- "-$pid" 2>/dev/null || true # a paused broker cannot shut down
  kill -TERM -- "-$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "still running after ${STOP_TIMEOUT}s, sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$PID_FILE"
  say "stopped"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    say "running (pid $pid) on $ADDRESS"
    return 0
  fi
  say "not running"
  return 1
}

cmd_signal() {
  local pid
  pid="$(running_pid)" || die "not running"
  kill "-$1" -- "-$pid"
}

cmd_fresh() {
  if ! running_pid >/dev/null; then
    if [[ -d "$LOG_DIR" ]]; then
      rm -rf "$DATA_DIR.last-log"
      mv "$LOG_DIR" "$DATA_DIR.last-log"
    fi
    rm -rf "$DATA_DIR"
    say "emptied $DATA_DIR (its last log is in $DATA_DIR.last-log)"
  fi
  cmd_start
}

[[ "$SECURITY" == plaintext || "$SECURITY" == secured ]] || die "KAFKA_SECURITY: plaintext or secured"

case "${1:-}" in
  start) cmd_start ;;
  fresh) cmd_fresh ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart)
    cmd_stop
    cmd_start
    ;;
  pause) cmd_signal STOP ;;
  resume) cmd_signal CONT ;;
  reset)
    cmd_stop
    rm -rf "$DATA_DIR"
    say "removed $DATA_DIR"
    ;;
  address) printf '%s\n' "$ADDRESS" ;;
  log) printf '%s\n' "$LOG_DIR/server.log" ;;
  *)
    say "usage: $0 start|fresh|stop|status|restart|pause|resume|reset|address|log"
    exit 2
    ;;
esac
