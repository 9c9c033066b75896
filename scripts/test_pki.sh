#!/usr/bin/env bash
# Writes a throwaway PKI for the client TLS tests into DIR: ca.pem, a server
# certificate for localhost (server.pem, server.key) and a client
# certificate (client.pem, client.key), all P-256, valid for a day.
set -euo pipefail
dir=${1:?usage: test_pki.sh DIR}
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 1 -subj /CN=engram-test-ca 2>/dev/null
for who in server client; do
    if [ "$who" = server ]; then usage=serverAuth; else usage=clientAuth; fi
    openssl req "${ec[@]}" -keyout "$who.key" -out "$who.csr" -subj "/CN=$who" 2>/dev/null
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=%s\n' "$usage" > "$who.ext"
    openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out "$who.pem" -days 1 -extfile "$who.ext" 2>/dev/null
done
