#!/bin/sh
# /init of the psbx test image (PID 1, run by busybox sh from the initramfs).
# Installed by scripts/image/test. It sets up the box and then runs boxd
# forever; it never exits (PID 1 exiting would panic the kernel).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
umask 022

log() { echo "psbx-init: $*" >/dev/console; }

# --- pseudo filesystems ------------------------------------------------------
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true  # may be mounted already
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=0620,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr

# --- kernel modules (list written at build time, dependencies in modules.dep) ---
# shellcheck disable=SC2046
modprobe -a $(cat /etc/psbx-modules) || log "some modules failed to load"

hostname box
ip link set lo up
echo 1 >/proc/sys/net/ipv4/conf/all/route_localnet

# --- /work: the box's disk (ext4 on /dev/vda, grown to the overlay's size) ------
# Wait briefly for vda when the machine has a virtio block device (type 0x0002).
has_disk=false
for d in /sys/bus/virtio/devices/*; do
    [ "$(cat "$d/device" 2>/dev/null)" = 0x0002 ] && has_disk=true
done
if $has_disk; then
    i=0
    while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
fi
mkdir -p /work
work=tmpfs
if [ -b /dev/vda ]; then
    # ext2/3/4 superblock magic 0xEF53 at byte 1080; anything else is left alone.
    magic="$(dd if=/dev/vda bs=1 skip=1080 count=2 2>/dev/null | hexdump -e '2/1 "%02x"')"
    if [ "$magic" = 53ef ]; then
        # Mount first (replays the journal after an unclean stop), then grow
        # on line: an offline resize2fs refuses a filesystem not fsck'd since its
        # last mount.
        if mount -t ext4 -o noatime,noinit_itable /dev/vda /work; then
            resize2fs /dev/vda >/tmp/resize2fs.log 2>&1 || log "resize2fs failed: $(tail -n 1 /tmp/resize2fs.log)"
            work="/dev/vda"
        else
            log "cannot mount /dev/vda; /work is a tmpfs"
        fi
    else
        log "/dev/vda has no ext4 filesystem; left alone, /work is a tmpfs"
    fi
fi
[ "$work" = tmpfs ] && mount -t tmpfs -o mode=0755 tmpfs /work
log "/work on $work, $(df -m /work | awk 'NR == 2 {print $2}') MiB"

# --- boxd, restarted forever ---------------------------------------------------
cd /
while :; do
    /usr/bin/boxd </dev/null >/dev/console 2>&1
    log "boxd exited ($?); restarting in 1 s"
    sleep 1
done
