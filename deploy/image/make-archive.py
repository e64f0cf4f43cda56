#!/usr/bin/python3
"""Writes the manager image as a docker-archive (what `docker save` makes and
`podman load` / `docker load` read) from its layer tars, byte for byte the
same for the same inputs: the image id is the hash of the config below, and
nothing in it depends on when or where it is built (podman build records its
builder container's id in a docker-format config, so two builds differ).

    make-archive.py --tag TAG --epoch SOURCE_DATE_EPOCH --out FILE LAYER.tar...

Docker format rather than OCI so that HEALTHCHECK is kept (OCI configs have none).
"""
import argparse
import hashlib
import io
import json
import os
import tarfile
import time

# The image's configuration; docs/deploy.md says why each part is there.
CONFIG = {
    "Env": [
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        # The default sandbox image ships in the image (the store is written to: users/, lock).
        "SBX_IMAGES_DIR=/usr/lib/sbx/images",
        # The volume; the entrypoint keeps the state root in a directory of it.
        "SBX_STATE_DIR=/var/lib/sbx",
        # sbx serve runs runsc once before it listens and refuses to start,
        # naming what is missing, when it cannot (server/preflight.hpp).
        "SBX_PREFLIGHT=smoke",
    ],
    # tini is PID 1: it reaps the orphans sandboxes leave and passes SIGTERM on.
    "Entrypoint": ["/usr/bin/tini", "--", "/usr/libexec/sbx/manager-entrypoint"],
    "ExposedPorts": {"8000/tcp": {}},
    # Sandboxes, their disks and the registry, kept across containers.
    "Volumes": {"/var/lib/sbx": {}},
    # /healthz answers 503 while draining or when runsc is unusable.
    "Healthcheck": {"Test": ["CMD", "/usr/libexec/sbx/manager-healthcheck"], "Interval": 30_000_000_000,
                    "Timeout": 5_000_000_000, "StartPeriod": 20_000_000_000, "Retries": 3},
    "StopSignal": "SIGTERM",
    "Labels": {"org.opencontainers.image.title": "sbx gVisor manager",
               "org.opencontainers.image.source": "deploy/image (scripts/build-manager-image.sh)"},
}
STEPS = ["Debian 12 base (mmdebstrap, deploy/image/base.conf)",
         "sbx, sbx-agent, entrypoint, health check, the default sandbox image"]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("layers", nargs="+")
    a = ap.parse_args()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(a.epoch))
    digests = [sha256_file(p) for p in a.layers]
    config = {
        "architecture": "amd64", "os": "linux", "created": created, "config": CONFIG,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + d for d in digests]},
        "history": [{"created": created, "created_by": s} for s in STEPS[:len(a.layers)]],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": image_id + ".json", "RepoTags": [a.tag], "Layers": [d + "/layer.tar" for d in digests]}]

    def entry(name, size, mode=0o644):
        t = tarfile.TarInfo(name)
        t.size, t.mode, t.mtime, t.uid, t.gid, t.uname, t.gname = size, mode, a.epoch, 0, 0, "", ""
        return t
    with tarfile.open(a.out + ".tmp", "w", format=tarfile.GNU_FORMAT) as out:
        for d, path in zip(digests, a.layers):
            with open(path, "rb") as f:
                out.addfile(entry(d + "/layer.tar", os.path.getsize(path)), f)
        for name, data in ((image_id + ".json", config_bytes),
                           ("manifest.json", json.dumps(manifest, separators=(",", ":")).encode())):
            out.addfile(entry(name, len(data)), io.BytesIO(data))
    os.replace(a.out + ".tmp", a.out)
    print(image_id)


if __name__ == "__main__":
    main()
