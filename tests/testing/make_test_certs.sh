#!/usr/bin/env bash
# Writes a throw-away CA, a server certificate for 127.0.0.1/localhost and a client certificate
# into DIR (for the TLS tests; valid for two days).
set -euo pipefail
dir="$1"
cd "$dir"
quiet() { "$@" >/dev/null 2>&1; }
quiet openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=ts-test-ca"
for who in server client; do
  quiet openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" -subj "/CN=ts-test-$who"
  printf "subjectAltName=IP:127.0.0.1,DNS:localhost\n" > "$who.ext"
  quiet openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$who.crt" \
    -days 2 -extfile "$who.ext"
done
