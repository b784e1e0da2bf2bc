#!/bin/sh
# Regenerates the TLS test fixtures (run in src/security/tls/testdata). ECDSA P-256, 100 years.
set -e
days=36500
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name subject
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "$2" -days $days -sha256 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -out "$1.pem"
}
leaf() { # name subject ca extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days $days -sha256 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  cat "$1.key" "$1.crt" > "$1.pem"
  rm -f "$1.csr" "$1.ext"
}
server_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1'
client_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth'
ca ca "/CN=Sluice Test CA"
ca other-ca "/CN=Unrelated Test CA"
leaf server "/CN=localhost" ca "$server_ext"
leaf server2 "/CN=server2" ca "$server_ext"
leaf other-server "/CN=localhost" other-ca "$server_ext"
leaf client "/C=US/O=acme/OU=eng/CN=alice" ca "$client_ext"
leaf other-client "/CN=mallory" other-ca "$client_ext"
# The server's key in the other encodings a PEM keystore may hold.
openssl ec -in server.key -out server-sec1.key 2>/dev/null
cat server-sec1.key server.crt > server-sec1.pem
openssl pkcs8 -topk8 -in server.key -passout pass:secret -v2 aes-256-cbc -out server-encrypted.key
cat server-encrypted.key server.crt > server-encrypted.pem
openssl genrsa -traditional -out server-rsa.key 2048 2>/dev/null
openssl req -new -key server-rsa.key -subj "/CN=localhost" -out server-rsa.csr
printf '%s\n' "$server_ext" > server-rsa.ext
openssl x509 -req -in server-rsa.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days $days -sha256 \
  -extfile server-rsa.ext -out server-rsa.crt 2>/dev/null
cat server-rsa.key server-rsa.crt > server-rsa.pem
rm -f server-rsa.csr server-rsa.ext *.srl
# Only the combined keystores and the CA certificates are read by the tests.
rm -f *.key *.crt
