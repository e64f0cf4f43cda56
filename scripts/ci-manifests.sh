#!/bin/sh
# Checks every manifest of examples/kubernetes/ offline, without a cluster
# (CI has none): kubectl's client-side dry run still asks a server for the API
# list, so instead:
#  1. `kubectl kustomize` renders the kustomization (when kubectl is installed;
#     Debian 12's kubernetes-client 1.20 has it too): every file is listed, parses,
#     and nothing is defined twice;
#  2. scripts/check_manifests.py checks each object against the fields its kind
#     requires (apiVersion/kind pairs Kubernetes 1.25+ serves, names, selectors
#     matching template labels, container ports and probes) and the fleet's own
#     rules: SBX_FLEET_SIZE equals replicas, SBX_FLEET_PEER_URL names the
#     StatefulSet's pods through its headless Service on the container port, the
#     key comes from the Secret, probes hit the manager, the PDB and Services
#     select the managers, the grace period outlasts the drain.
# Exit 0 when all pass; each failure is one line naming the file and field.
set -eu
cd "$(dirname "$0")/.."
dir=examples/kubernetes
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize "$dir" >/dev/null
  echo "ci-manifests: kubectl kustomize $dir: ok"
else
  echo "ci-manifests: kubectl not installed: the kustomization is checked by check_manifests.py alone"
fi
exec /usr/bin/python3 scripts/check_manifests.py "$dir"
