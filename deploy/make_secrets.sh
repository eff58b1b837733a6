#!/usr/bin/env bash
# Creates the four Secrets the manifests mount, with throwaway certificates
# from a fresh CA (openssl) and one random API key. For production, issue the
# same files from your own CA (e.g. cert-manager Certificates with these
# names, SANs and usages) and your own key list; nothing here is committed.
#
#   deploy/make_secrets.sh NAMESPACE DIR            # writes DIR, prints kubectl
#   deploy/make_secrets.sh NAMESPACE DIR --apply    # and creates the Secrets
#
# DIR (created; must not exist) receives:
#   ca.crt ca.key                       the CA (keep ca.key out of the cluster)
#   draftsvc.crt draftsvc.key           Secret draftsvc-tls: every shard's
#                                       server certificate, SANs draftsvc,
#                                       draftsvc-<i>.draftsvc for i below
#                                       $SHARDS (default 2: the StatefulSet's
#                                       replicas), *.draftsvc.NAMESPACE.svc
#                                       (+ .cluster.local); usages server AND
#                                       client auth (its probe presents it).
#                                       gRPC does not let *.draftsvc match
#                                       draftsvc-0.draftsvc (a wildcard needs
#                                       two labels after it), hence the list:
#                                       reissue it when adding shards.
#   verifysvc.crt verifysvc.key         Secret verifysvc-tls: both fronts'
#                                       server certificate, SANs verifysvc,
#                                       verifysvc-grpc and their .NAMESPACE.svc
#                                       names plus $VERIFYSVC_EXTRA_SANS
#                                       (e.g. "DNS:llm.example.com")
#   verifysvc-client.crt/.key           Secret verifysvc-draftsvc-client: the
#                                       client certificate draftsvc requires
#   api_keys                            Secret verifysvc-api-keys: one line
#                                       "<key> default" (add lines: "<key>
#                                       <namespace> [<requests_per_second>]")
# Each TLS Secret also carries ca.crt (the CA that verifies the peer).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 || ( $# -eq 3 && "$3" != "--apply" ) ]]; then
  echo "usage: $0 NAMESPACE DIR [--apply]" >&2
  exit 2
fi
ns=$1
dir=$2
apply=${3:-}
if [[ -e "$dir" ]]; then
  echo "make_secrets: $dir exists; give a new directory (keys are never reused)" >&2
  exit 1
fi
command -v openssl >/dev/null || { echo "make_secrets: openssl not found" >&2; exit 1; }
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
days=${CERT_DAYS:-365}

openssl req -x509 -newkey rsa:3072 -nodes -days "$days" -sha256 \
  -keyout ca.key -out ca.crt -subj "/CN=lookahead CA ($ns)" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# issue NAME CN SANS USAGES
issue() {
  local name=$1 cn=$2 sans=$3 usages=$4
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" \
    -subj "/CN=$cn" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usages"
    if [[ -n "$sans" ]]; then echo "subjectAltName=$sans"; fi
  } >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days "$days" -sha256 -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

svc="$ns.svc"
draftsvc_sans="DNS:draftsvc"
for ((i = 0; i < ${SHARDS:-2}; ++i)); do
  draftsvc_sans+=",DNS:draftsvc-$i.draftsvc"
done
draftsvc_sans+=",DNS:*.draftsvc.$svc,DNS:*.draftsvc.$svc.cluster.local"
issue draftsvc draftsvc "$draftsvc_sans" "serverAuth,clientAuth"
verifysvc_sans="DNS:verifysvc,DNS:verifysvc.$svc,DNS:verifysvc.$svc.cluster.local"
verifysvc_sans+=",DNS:verifysvc-grpc,DNS:verifysvc-grpc.$svc"
verifysvc_sans+=",DNS:verifysvc-grpc.$svc.cluster.local"
if [[ -n "${VERIFYSVC_EXTRA_SANS:-}" ]]; then
  verifysvc_sans+=",$VERIFYSVC_EXTRA_SANS"
fi
issue verifysvc verifysvc "$verifysvc_sans" "serverAuth"
issue verifysvc-client verifysvc "" "clientAuth"
rm -f ca.srl
echo "$(openssl rand -hex 32) default" >api_keys
chmod 600 ./*.key api_keys

for cert in draftsvc verifysvc verifysvc-client; do
  openssl verify -CAfile ca.crt "$cert.crt" >/dev/null
done

commands=(
  "kubectl -n $ns create secret generic draftsvc-tls --from-file=tls.crt=draftsvc.crt --from-file=tls.key=draftsvc.key --from-file=ca.crt=ca.crt"
  "kubectl -n $ns create secret generic verifysvc-tls --from-file=tls.crt=verifysvc.crt --from-file=tls.key=verifysvc.key --from-file=ca.crt=ca.crt"
  "kubectl -n $ns create secret generic verifysvc-draftsvc-client --from-file=tls.crt=verifysvc-client.crt --from-file=tls.key=verifysvc-client.key --from-file=ca.crt=ca.crt"
  "kubectl -n $ns create secret generic verifysvc-api-keys --from-file=api_keys=api_keys"
)
echo "make_secrets: wrote $(pwd) (API key for namespace default: $(cut -d' ' -f1 api_keys))"
for command in "${commands[@]}"; do
  if [[ "$apply" == "--apply" ]]; then
    $command
  else
    echo "  (cd $(pwd) && $command)"
  fi
done
