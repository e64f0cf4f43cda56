#!/bin/sh
# /init of the sbx micro-VM guest (copied into the initramfs by
# scripts/build-guest.sh). It loads the virtio modules, puts an overlay over the
# initramfs with the sandbox's own disk (/dev/vda, ext4) as the writable layer,
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

workdir=/work pids=0 memory=0 vsock= net= dns=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    sbx.workdir=*) workdir=${arg#sbx.workdir=} ;;
    sbx.pids=*) pids=${arg#sbx.pids=} ;;
    sbx.memory=*) memory=${arg#sbx.memory=} ;;
    sbx.vsock=*) vsock=${arg#sbx.vsock=} ;;
    sbx.net=*) net=${arg#sbx.net=} ;;
    sbx.dns=*) dns=${arg#sbx.dns=} ;;
  esac
done
while read -r m; do insmod "/lib/modules/$m" 2>&1 | grep -v "File exists"; done < /lib/modules/order

# The writable layer: the sandbox's disk, formatted on the host (size = --disk).
# The disk may be probed a moment after its module loads.
i=0
until [ -b /dev/vda ] && mount -t ext4 -o noatime /dev/vda /layer 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 500 ] || fail "cannot mount the writable layer /dev/vda"
  sleep 0.01
done
mkdir -p /layer/upper /layer/work
mount -t overlay overlay -o lowerdir=/,upperdir=/layer/upper,workdir=/layer/work /newroot \
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
mkdir -p /newroot/var/tmp /newroot/root
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
  printf '# sbx network jail: DNS through the host\nnameserver %s\noptions timeout:2 attempts:2\n' "$dns" \
    > /newroot/etc/resolv.conf
fi
# (busybox's remount reads /proc/mounts: before /proc moves)
for d in bin sbin lib usr etc; do
  [ -d /newroot/$d ] && mount --bind /newroot/$d /newroot/$d && mount -o remount,bind,ro /newroot/$d
done
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

[ -x /newroot/sbin/sbx-agent ] || fail "no /sbin/sbx-agent in the initramfs"
echo "sbx-guest: starting the agent"
# A PID namespace of its own: the sandbox sees the agent as PID 1 and its own
# commands, not the guest kernel's threads. unshare stays PID 1 of the guest
# and exits with the agent, so a dead agent still stops the VM.
exec unshare --pid --fork --mount-proc=/newroot/proc chroot /newroot /sbin/sbx-agent $channel --mkdir "$workdir"
