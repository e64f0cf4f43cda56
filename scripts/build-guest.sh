#!/usr/bin/env bash
# Builds the micro-VM guest image sbx's microvm driver boots: Debian's cloud
# kernel (fetched with `apt-get download`, unpacked with `dpkg -x`, never
# installed on the host) and a base initramfs holding busybox-static, the
# kernel modules the guest needs and the guest's /init. The driver appends the
# sbx-agent binary at boot time (a second cpio), so the image does not go stale
# when the agent is rebuilt.
#
# Usage: scripts/build-guest.sh [OUT_DIR]     (default: build/guest; as root)
# Reproducible: the same kernel package and busybox give byte-identical files
# (fixed mtimes, sorted cpio entries, gzip -n).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-build/guest}")
# The kernel flavour: Debian's "cloud" kernel has virtio-mmio and boots in ~3 s.
meta=${SBX_GUEST_KERNEL_PACKAGE:-linux-image-cloud-amd64}

need() { command -v "$1" >/dev/null || { echo "build-guest: $1 is missing ($2)" >&2; exit 1; }; }
need apt-get "run on Debian"
need dpkg "run on Debian"
need cpio "apt-get install cpio"
[[ -x /bin/busybox ]] && /bin/busybox --list >/dev/null 2>&1 || { echo "build-guest: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 1; }
file -L /bin/busybox 2>/dev/null | grep -q static || ldd /bin/busybox 2>&1 | grep -q "not a dynamic" \
  || { echo "build-guest: /bin/busybox is not static (apt-get install busybox-static)" >&2; exit 1; }

pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
if [[ -z "$pkg" ]]; then
  apt-get update -qq
  pkg=$(apt-cache depends "$meta" | awk '/Depends: linux-image-/ {print $2; exit}')
fi
[[ -n "$pkg" ]] || { echo "build-guest: cannot resolve $meta to a kernel package" >&2; exit 1; }
kver=${pkg#linux-image-}
stamp="$pkg $(cat /bin/busybox "$0" scripts/guest-init.sh | sha256sum | cut -c1-16)"
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then
  echo "build-guest: $out is up to date ($pkg)"
  exit 0
fi

work=$(mktemp -d /tmp/sbx-guest.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "build-guest: fetching $pkg"
(cd "$work" && apt-get download -q "$pkg" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
deb=$(ls "$work"/*.deb)
dpkg -x "$deb" "$work/k"
mods="$work/k/lib/modules/$kver/kernel"

# The initramfs: a tiny root holding busybox and /init; the sandbox's files
# live on an overlay above it, or above an --image's disk (scripts/guest-init.sh).
root="$work/root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,layer,image,newroot,lib/modules,etc,root,work}
cp /bin/busybox "$root/bin/busybox"
for app in $(/bin/busybox --list-full); do
  [[ -e "$root/$app" ]] || ln -s /bin/busybox "$root/$app"
done
# Load order matters (no modules.dep in the image): core first, then users.
# ext4 (with jbd2, mbcache and crc32c), which both disks use, is built into
# Debian's cloud kernel (CONFIG_EXT4_FS=y); erofs and squashfs are modules.
for m in drivers/virtio/virtio_ring.ko drivers/virtio/virtio.ko drivers/virtio/virtio_mmio.ko \
         drivers/virtio/virtio_pci_modern_dev.ko drivers/virtio/virtio_pci_legacy_dev.ko drivers/virtio/virtio_pci.ko \
         drivers/char/virtio_console.ko drivers/block/virtio_blk.ko fs/overlayfs/overlay.ko \
         net/vmw_vsock/vsock.ko net/vmw_vsock/vmw_vsock_virtio_transport_common.ko \
         net/vmw_vsock/vmw_vsock_virtio_transport.ko \
         net/core/failover.ko drivers/net/net_failover.ko drivers/net/virtio_net.ko; do
  [[ -f "$mods/$m" ]] || { echo "build-guest: $pkg lacks $m" >&2; exit 1; }
  cp "$mods/$m" "$root/lib/modules/"
  basename "$m" >> "$root/lib/modules/order"
done
install -m 0755 scripts/guest-init.sh "$root/init"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
echo "sbx-guest ($pkg)" > "$root/etc/sbx-guest"

mkdir -p "$out"
find "$root" -exec touch -h -d @0 {} +
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --owner 0:0 --reproducible --quiet) | gzip -9n > "$work/initrd.cpio.gz"
install -m 0644 "$work/initrd.cpio.gz" "$out/initrd.cpio.gz"
install -m 0644 "$work/k/boot/vmlinuz-$kver" "$out/vmlinuz"
# cloud-hypervisor boots the ELF vmlinux: the image is LZ4-compressed behind
# the bzImage header (best effort: needs the lz4 tool).
rm -f "$out/vmlinux"
if command -v lz4 >/dev/null; then
  off=$(grep -obUaP '\x02\x21\x4c\x18' "$out/vmlinuz" | head -1 | cut -d: -f1 || true)
  if [[ -n "$off" ]]; then
    tail -c +$((off + 1)) "$out/vmlinuz" | lz4 -dc > "$work/vmlinux" 2>/dev/null || true
    if head -c 4 "$work/vmlinux" | grep -q ELF; then install -m 0644 "$work/vmlinux" "$out/vmlinux"; fi
  fi
fi
echo "$kver" > "$out/kernel-version"
date -u +%Y-%m-%dT%H:%M:%SZ > "$out/build-date"
echo "$stamp" > "$out/stamp"
echo "build-guest: built $out (kernel $kver$( [[ -f $out/vmlinux ]] && echo ", vmlinux for cloud-hypervisor"))"
