#!/usr/bin/env bash
# Certificates and keystores for the secured local broker (deploy/local/kafka.sh with
# KAFKA_SECURITY=secured). Made with openssl and keytool; for tests and demos only.
#
#   deploy/local/secured-certs.sh init DIR
#       (once: kept when DIR/ca.crt exists) a CA, the broker's PKCS12 keystore (SAN
#       127.0.0.1 and localhost), a PKCS12 truststore holding the CA (client certificates
#       are verified against it), the client certificate "sidecar" (client.crt, its key
#       client.key encrypted with the password in client.key.password), and the passwords:
#       store.password (the broker's stores) and sidecar.password (the SCRAM user's).
#   deploy/local/secured-certs.sh client DIR NAME DAYS
#       another client certificate signed by DIR's CA: NAME.crt and NAME.key (encrypted
#       with client.key.password). DAYS < 0 makes one that expired -DAYS days ago.
#   deploy/local/secured-certs.sh ca DIR NAME
#       a self-signed CA of its own (NAME.crt): one the broker never heard of.
set -euo pipefail

say() { printf 'secured-certs.sh: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

random_password() { head -c 24 /dev/urandom | base64 | tr -d '/+=\n' | head -c 24; }

# client DIR NAME DAYS: a client certificate signed by the CA in DIR.
make_client() {
  local dir=$1 name=$2 days=$3
  [[ -f "$dir/ca.key" ]] || die "$dir has no CA (run init first)"
  local pass="$dir/client.key.password"
  openssl genrsa -aes256 -passout "file:$pass" -out "$dir/$name.key" 2048 2>/dev/null
  openssl req -new -key "$dir/$name.key" -passin "file:$pass" -subj "/CN=$name" \
    -out "$dir/$name.csr" 2>/dev/null
  local conf="$dir/.ca.cnf"
  mkdir -p "$dir/.ca"
  : >"$dir/.ca/index.txt"
  [[ -f "$dir/.ca/serial" ]] || printf '%s\n' "$(openssl rand -hex 8)" >"$dir/.ca/serial"
  cat >"$conf" <<EOF
[ca]
default_ca = local
[local]
dir = $dir/.ca
database = \$dir/index.txt
new_certs_dir = \$dir
serial = \$dir/serial
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
[anything]
commonName = supplied
[client]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
EOF
  local dates=()
  if ((days < 0)); then
    # Valid for one day that ended -DAYS days ago.
    dates=(-startdate "$(date -u -d "$((-days + 1)) days ago" +%Y%m%d%H%M%SZ)"
      -enddate "$(date -u -d "$((-days)) days ago" +%Y%m%d%H%M%SZ)")
  else
    dates=(-days "$days")
  fi
  openssl ca -batch -config "$conf" -extensions client -cert "$dir/ca.crt" -keyfile "$dir/ca.key" \
    "${dates[@]}" -notext -in "$dir/$name.csr" -out "$dir/$name.crt" 2>"$dir/.ca/last.log" ||
    {
      cat "$dir/.ca/last.log" >&2
      die "signing $name failed"
    }
  rm -f "$dir/$name.csr"
  chmod 600 "$dir/$name.key"
}

cmd_init() {
  local dir=$1
  if [[ -f "$dir/ca.crt" && -f "$dir/broker.p12" ]]; then
    return 0
  fi
  mkdir -p "$dir"
  chmod 700 "$dir"
  say "making the CA, the broker's keystores and a client certificate in $dir"
  random_password >"$dir/store.password"
  random_password >"$dir/sidecar.password"
  random_password >"$dir/client.key.password"
  chmod 600 "$dir"/*.password
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca.key" -out "$dir/ca.crt" \
    -days 3650 -subj "/CN=rebalance-sidecar local test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$dir/broker.key" -out "$dir/broker.csr" \
    -subj "/CN=localhost" 2>/dev/null
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth" \
    >"$dir/broker.ext"
  openssl x509 -req -in "$dir/broker.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$dir/broker.ext" -out "$dir/broker.crt" 2>/dev/null
  local store
  store="$(cat "$dir/store.password")"
  openssl pkcs12 -export -in "$dir/broker.crt" -inkey "$dir/broker.key" -certfile "$dir/ca.crt" \
    -name broker -passout "pass:$store" -out "$dir/broker.p12"
  rm -f "$dir/truststore.p12"
  keytool -importcert -noprompt -alias ca -file "$dir/ca.crt" -storetype PKCS12 \
    -keystore "$dir/truststore.p12" -storepass "$store" >/dev/null 2>&1 ||
    die "keytool could not make the truststore"
  rm -f "$dir/broker.csr" "$dir/broker.ext" "$dir/broker.key"
  make_client "$dir" client 3650
}

cmd_ca() {
  local dir=$1 name=$2
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.crt" \
    -days 365 -subj "/CN=$name" 2>/dev/null
}

case "${1:-}" in
  init) cmd_init "${2:?DIR}" ;;
  client) make_client "${2:?DIR}" "${3:?NAME}" "${4:?DAYS}" ;;
  ca) cmd_ca "${2:?DIR}" "${3:?NAME}" ;;
  *)
    say "usage: $0 init DIR | client DIR NAME DAYS | ca DIR NAME"
    exit 2
    ;;
esac
