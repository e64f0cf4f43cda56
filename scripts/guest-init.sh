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

workdir=/work pids=0 memory=0 vsock=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    sbx.workdir=*) workdir=${arg#sbx.workdir=} ;;
    sbx.pids=*) pids=${arg#sbx.pids=} ;;
    sbx.memory=*) memory=${arg#sbx.memory=} ;;
    sbx.vsock=*) vsock=${arg#sbx.vsock=} ;;
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
# Everything the guest found is handed to the sandbox's root.
for d in proc sys dev; do mount --move /$d /newroot/$d; done
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm

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
hostname sbx

[ -x /newroot/sbin/sbx-agent ] || fail "no /sbin/sbx-agent in the initramfs"
echo "sbx-guest: starting the agent"
exec chroot /newroot /sbin/sbx-agent $channel --mkdir "$workdir"
