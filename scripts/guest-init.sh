#!/bin/sh
# /init of the sbx micro-VM guest (copied into the initramfs by
# scripts/build-guest.sh). It loads the virtio modules, puts an overlay over the
# sandbox's root (the initramfs itself, or with --image the image's read-only
# disk) with the sandbox's own disk (ext4) as the writable layer,
# caps the guest's process count, and hands over to sbx-agent, which becomes
# PID 1: if the agent ever exits the kernel panics and the VM stops (panic=-1
# with QEMU's -no-reboot), so a dead agent is never a VM that looks alive.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# A guest that cannot come up stops (init exiting panics the kernel, and the VM
# ends), so the host sees a dead VM and the reason in its console log.
fail() { echo "sbx-guest: $*" >&2; exit 1; }

workdir=/work pids=0 memory=0 vsock= net= dns= image=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    sbx.workdir=*) workdir=${arg#sbx.workdir=} ;;
    sbx.pids=*) pids=${arg#sbx.pids=} ;;
    sbx.memory=*) memory=${arg#sbx.memory=} ;;
    sbx.vsock=*) vsock=${arg#sbx.vsock=} ;;
    sbx.net=*) net=${arg#sbx.net=} ;;
    sbx.dns=*) dns=${arg#sbx.dns=} ;;
    sbx.image=*) image=${arg#sbx.image=} ;;
  esac
done
while read -r m; do insmod "/lib/modules/$m" 2>&1 | grep -v "File exists"; done < /lib/modules/order

# The writable layer: the sandbox's disk, formatted on the host (size = --disk).
# With sbx.image=FSTYPE a second disk holds the image's root, read-only on the
# host's side (the VMM's readonly flag), which is how the two are told apart:
# not by their order, which is the VMM's. Disks may be probed a moment after
# their module loads.
layer_dev= image_dev= i=0
until [ -n "$layer_dev" ] && { [ -z "$image" ] || [ -n "$image_dev" ]; } \
      && mount -t ext4 -o noatime "$layer_dev" /layer 2>/dev/null; do
  for b in /sys/block/vd*; do
    [ -b "/dev/${b##*/}" ] || continue
    if [ "$(cat "$b/ro")" = 1 ]; then image_dev=/dev/${b##*/}; else layer_dev=/dev/${b##*/}; fi
  done
  i=$((i + 1))
  [ $i -lt 500 ] || fail "cannot mount the writable layer (disks: $(ls /sys/block))"
  sleep 0.01
done
lower=/
if [ -n "$image" ]; then
  # noload: never replay a journal on a disk that cannot be written.
  opts=ro
  [ "$image" = ext4 ] && opts=ro,noload
  mount -t "$image" -o "$opts" "$image_dev" /image || fail "cannot mount the image's disk $image_dev ($image)"
  lower=/image
fi
mkdir -p /layer/upper /layer/work
mount -t overlay overlay -o lowerdir=$lower,upperdir=/layer/upper,workdir=/layer/work /newroot \
  || fail "cannot mount the root overlay"
if [ -n "$vsock" ]; then
  channel="--vsock $vsock"
else
  # The port's name arrives a moment after the port itself.
  port= i=0
  while [ -z "$port" ]; do
    for p in /sys/class/virtio-ports/*; do
      [ "$(cat "$p/name" 2>/dev/null)" = agent ] && port=/dev/${p##*/}
    done
    i=$((i + 1))
    [ -n "$port" ] || [ $i -lt 500 ] || fail "no virtio-serial port named agent ($(ls /sys/class/virtio-ports))"
    [ -n "$port" ] || sleep 0.01
  done
  channel="--serial $port"
fi
# The sandbox's root gets /proc and /sys, and a /dev of its own with the
# usual character devices and the agent's port only (no disks, no kmsg, no mem),
# as in every other driver. The image's system directories are read-only
# (their changes could only ever land on the sandbox's own disk, but code that
# relies on them being read-only behaves the same everywhere).
mkdir -p /newroot/var/tmp /newroot/root /newroot/proc /newroot/sys /newroot/dev
# An image knows nothing of sbx: the agent comes from the initramfs, bound over
# /sbin/sbx-agent (created empty on the writable layer when the image has none),
# as the busybox guest has it. /sbin may be a link (usr/sbin on Debian), which
# is followed inside the image, not here: mount points are named by their real
# path (busybox's remount looks them up in /proc/mounts).
agent=/newroot/sbin/sbx-agent
if [ -n "$image" ] && [ -L /newroot/sbin ]; then
  t=$(readlink /newroot/sbin)
  case $t in /*) agent=/newroot$t/sbx-agent ;; *) agent=/newroot/$t/sbx-agent ;; esac
fi
if [ -n "$image" ]; then
  mkdir -p "${agent%/*}" && { [ -e "$agent" ] || : > "$agent"; } || fail "cannot make $agent"
fi
# --network jail: the one NIC is the host's jail tap (sbx.net=ADDR/PREFIX,GATEWAY;
# the host filters everything it sends). --network none: there is no NIC.
ip link set lo up
if [ -n "$net" ]; then
  i=0
  until [ -e /sys/class/net/eth0 ]; do
    i=$((i + 1))
    [ $i -lt 500 ] || fail "--network jail but no eth0 ($(ls /sys/class/net))"
    sleep 0.01
  done
  ip addr add "${net%%,*}" dev eth0 || fail "cannot give eth0 ${net%%,*}"
  ip link set eth0 up || fail "cannot bring eth0 up"
  ip route add default via "${net##*,}" dev eth0 || fail "cannot route through ${net##*,}"
  # (an image's resolv.conf may be a link, which would lead out of its root here)
  rm -f /newroot/etc/resolv.conf
  printf '# sbx network jail: DNS through the host\nnameserver %s\noptions timeout:2 attempts:2\n' "$dns" \
    > /newroot/etc/resolv.conf
fi
# (busybox's remount reads /proc/mounts: before /proc moves)
# (a link such as Debian's bin -> usr/bin is read-only with its target)
for d in bin sbin lib usr etc; do
  [ -d /newroot/$d ] && [ ! -L /newroot/$d ] && mount --bind /newroot/$d /newroot/$d && mount -o remount,bind,ro /newroot/$d
done
if [ -n "$image" ]; then
  mount --bind /sbin/sbx-agent "$agent" && mount -o remount,bind,ro "$agent" || fail "cannot bind the agent into the image"
fi
for d in proc sys; do mount --move /$d /newroot/$d; done
dev=/newroot/dev
mount -t tmpfs -o mode=0755,size=1m,nosuid,noexec tmpfs $dev
mknod -m 666 $dev/null c 1 3; mknod -m 666 $dev/zero c 1 5; mknod -m 666 $dev/full c 1 7
mknod -m 666 $dev/random c 1 8; mknod -m 666 $dev/urandom c 1 9; mknod -m 666 $dev/tty c 5 0
if [ -n "${port:-}" ]; then
  majmin=$(cat /newroot/sys/class/virtio-ports/${port##*/}/dev)
  mknod -m 600 $dev/${port##*/} c ${majmin%%:*} ${majmin##*:}
  channel="--serial /dev/${port##*/}"
fi
mkdir -p $dev/pts $dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $dev/pts
ln -s pts/ptmx $dev/ptmx
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $dev/shm
ln -s /proc/self/fd $dev/fd; ln -s fd/0 $dev/stdin; ln -s fd/1 $dev/stdout; ln -s fd/2 $dev/stderr

# The sandbox's --pids and --memory, as a cgroup the agent (and so every
# command) joins; the guest's RAM is a little larger, for its own kernel.
mkdir -p /newroot/sys/fs/cgroup
if mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup; then
  cg=/newroot/sys/fs/cgroup
  echo "+pids +memory" > $cg/cgroup.subtree_control
  mkdir $cg/sandbox
  [ "$pids" -gt 0 ] && echo "$pids" > $cg/sandbox/pids.max
  [ "$memory" -gt 0 ] && echo "$memory" > $cg/sandbox/memory.max
  echo $$ > $cg/sandbox/cgroup.procs
fi
hostname sandbox

[ -x "$agent" ] || fail "no /sbin/sbx-agent in the initramfs"
echo "sbx-guest: starting the agent"
# A PID namespace of its own: the sandbox sees the agent as PID 1 and its own
# commands, not the guest kernel's threads. unshare stays PID 1 of the guest
# and exits with the agent, so a dead agent still stops the VM.
exec unshare --pid --fork --mount-proc=/newroot/proc chroot /newroot /sbin/sbx-agent $channel --mkdir "$workdir"
