#!/usr/bin/python3
"""Offline checks of the Kubernetes manifests (scripts/ci-manifests.sh says which)."""
import re
import sys
from pathlib import Path

import yaml

# The apiVersion each kind is served under (Kubernetes 1.25 and later), and the fields it must have.
KINDS = {
    "Secret": ("v1", []),
    "Service": ("v1", ["spec.selector", "spec.ports"]),
    "StatefulSet": ("apps/v1", ["spec.serviceName", "spec.replicas", "spec.selector.matchLabels",
                                "spec.template.metadata.labels", "spec.template.spec.containers"]),
    "PodDisruptionBudget": ("policy/v1", ["spec.selector.matchLabels"]),
    "RuntimeClass": ("node.k8s.io/v1", ["handler"]),
    "Kustomization": ("kustomize.config.k8s.io/v1beta1", ["resources"]),
}
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
problems = []


def get(obj, dotted):
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def need(cond, where, what):
    if not cond:
        problems.append(f"{where}: {what}")


def load(d: Path):
    objs = []
    for f in sorted(d.glob("*.yaml")):
        try:
            docs = [x for x in yaml.safe_load_all(f.read_text()) if x is not None]
        except yaml.YAMLError as e:
            problems.append(f"{f}: not YAML: {e}")
            continue
        for i, o in enumerate(docs):
            objs.append((f"{f.name}#{i}", o))
    return objs


def check_common(where, o):
    kind = o.get("kind")
    need(kind in KINDS, where, f"kind {kind!r} is not one of {sorted(KINDS)}")
    if kind not in KINDS:
        return
    api, fields = KINDS[kind]
    need(o.get("apiVersion") == api, where, f"{kind} must be apiVersion {api}, not {o.get('apiVersion')!r}")
    if kind != "Kustomization":
        name = get(o, "metadata.name")
        need(isinstance(name, str) and NAME.match(name or "") and len(name) <= 63, where, f"bad metadata.name {name!r}")
    for fld in fields:
        need(get(o, fld) is not None, where, f"{kind} lacks {fld}")


def check_container(where, c):
    need(c.get("name") and c.get("image"), where, "a container needs name and image")
    need(str(c.get("image", "")).startswith("localhost/sbx-manager:"), where, "the image is localhost/sbx-manager:VERSION")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    need(isinstance(ports.get("http"), int), where, "the container exposes a port named http")
    for probe in ("livenessProbe", "readinessProbe"):
        p = c.get(probe)
        need(isinstance(p, dict) and ("exec" in p or "httpGet" in p), where, f"{probe} is missing")
    need(get(c, "resources.requests.cpu") and get(c, "resources.requests.memory"), where, "resources.requests cpu and memory")
    return ports.get("http")


def main(d: Path):
    objs = load(d)
    by_kind = {}
    for where, o in objs:
        check_common(where, o)
        by_kind.setdefault(o.get("kind"), []).append((where, o))
    kust = by_kind.get("Kustomization", [])
    need(len(kust) == 1, str(d), "one kustomization.yaml")
    # The Secret is made by hand (its key never in a file); everything else is in the kustomization.
    files = {p.name for p in d.glob("*.yaml")} - {"kustomization.yaml", "secret.yaml"}
    if kust:
        need(set(kust[0][1].get("resources", [])) == files, kust[0][0], f"resources must list exactly {sorted(files)}")
    sets = by_kind.get("StatefulSet", [])
    need(len(sets) == 1, str(d), "one StatefulSet")
    if not sets:
        return
    where, ss = sets[0]
    name, replicas = ss["metadata"]["name"], ss["spec"]["replicas"]
    labels = ss["spec"]["template"]["metadata"]["labels"]
    selector = ss["spec"]["selector"]["matchLabels"]
    need(all(labels.get(k) == v for k, v in selector.items()), where, "the selector must match the pod labels")
    pod = ss["spec"]["template"]["spec"]
    containers = pod["containers"]
    need(len(containers) == 1, where, "one container, the manager")
    c = containers[0]
    port = check_container(where, c)
    env = {e["name"]: e for e in c.get("env", [])}
    size = env.get("SBX_FLEET_SIZE", {}).get("value")
    need(size == str(replicas), where, f"SBX_FLEET_SIZE ({size}) must equal replicas ({replicas})")
    need("SBX_FLEET_SELF" not in env, where, "SBX_FLEET_SELF must come from the hostname (sbx-N), not be fixed")
    url = env.get("SBX_FLEET_PEER_URL", {}).get("value", "")
    headless = ss["spec"]["serviceName"]
    need(url == f"http://{name}-{{n}}.{headless}:{port}", where,
         f"SBX_FLEET_PEER_URL {url!r} must be http://{name}-{{n}}.{headless}:{port}")
    need(env.get("PORT", {}).get("value") == str(port), where, "PORT must be the container port")
    key = get(env.get("ADMIN_API_KEY", {}), "valueFrom.secretKeyRef")
    secrets = {o["metadata"]["name"]: o for _, o in by_kind.get("Secret", [])}
    need(key and key.get("name") in secrets and key.get("key") in (secrets[key["name"]].get("stringData") or
                                                                   secrets[key["name"]].get("data") or {}),
         where, "ADMIN_API_KEY must come from a key of the Secret")
    need(int(pod.get("terminationGracePeriodSeconds", 30)) > 30, where, "terminationGracePeriodSeconds must outlast the 30 s drain")
    need(get(ss, "spec.volumeClaimTemplates") and any(m.get("mountPath") == "/var/lib/sbx" for m in c.get("volumeMounts", [])),
         where, "the state root /var/lib/sbx must be on a volume claim")
    rc = pod.get("runtimeClassName")
    if rc:
        need(rc in {o["metadata"]["name"] for _, o in by_kind.get("RuntimeClass", [])}, where, f"runtimeClassName {rc} is not defined")
    services = {o["metadata"]["name"]: (w, o) for w, o in by_kind.get("Service", [])}
    need(headless in services and get(services[headless][1], "spec.clusterIP") == "None", where,
         f"serviceName {headless} must be a headless Service (clusterIP: None)")
    need(any(get(o, "spec.clusterIP") != "None" for _, o in services.values()), where, "an ordinary Service for clients")
    for w, o in list(services.values()) + by_kind.get("PodDisruptionBudget", []):
        sel = get(o, "spec.selector.matchLabels") or get(o, "spec.selector") or {}
        need(sel and all(labels.get(k) == v for k, v in sel.items()), w, "its selector must select the managers' pods")
    for w, o in services.values():
        for p in o["spec"]["ports"]:
            need(p.get("targetPort") in ("http", port), w, "targetPort must be the managers' http port")
    for w, o in by_kind.get("PodDisruptionBudget", []):
        need(("maxUnavailable" in o["spec"]) != ("minAvailable" in o["spec"]), w, "one of maxUnavailable / minAvailable")


if __name__ == "__main__":
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "examples/kubernetes")
    main(d)
    for p in problems:
        print(f"ci-manifests: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"ci-manifests: {d}: every manifest passes ({len(list(d.glob('*.yaml')))} files)")
