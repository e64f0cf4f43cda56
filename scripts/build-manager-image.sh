#!/bin/bash
# Builds the gVisor manager's OCI image (deploy/image/) from Debian packages
# only, no registry: a Debian 12 base made by mmdebstrap (cached, keyed by its
# package list), then a layer with sbx, its agent, the entrypoint and the
# default sandbox image; both with fixed timestamps, written as a docker-archive
# by deploy/image/make-archive.py and loaded into podman, so two builds of one
# commit give the same image id.
#
#   scripts/build-manager-image.sh [--refresh] [--tag TAG] [--build-dir DIR] [--archive FILE]
#
# --refresh   make the mmdebstrap base again (new Debian point release)
# --archive   keep the docker-archive there too (for `docker load -i FILE`)
# Prints the image id on stdout; progress on stderr. Needs root, podman and
# mmdebstrap, and a built tree (cmake --build build).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=localhost/sbx-manager:latest
build=build
refresh=0
keep=
while [ $# -gt 0 ]; do
  case $1 in
    --refresh) refresh=1 ;;
    --tag) tag=$2; shift ;;
    --build-dir) build=$2; shift ;;
    --archive) keep=$2; shift ;;
    *) echo "usage: $0 [--refresh] [--tag TAG] [--build-dir DIR] [--archive FILE]" >&2; exit 2 ;;
  esac
  shift
done
say() { echo "build-manager-image: $*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap --mode=root and the image store need it)"
for t in podman mmdebstrap; do command -v $t >/dev/null || die "$t is missing: apt-get install $t"; done
[ -x "$build/sbx" ] && [ -x "$build/sbx-agent" ] || die "no $build/sbx: cmake -S . -B $build && cmake --build $build"

cache=${SBX_MANAGER_IMAGE_CACHE:-/var/cache/sbx-manager-image}
apt_cache=${SBX_APT_CACHE:-/var/cache/sbx/apt}
suite=bookworm
# One date for every timestamp in the image: the commit's, so a rebuild of the
# same commit is byte-identical (https://reproducible-builds.org/docs/source-date-epoch/).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

# The Debian packages sbx's shared libraries come from (ldd + dpkg -S on this
# Debian 12 host), runsc itself, tini (PID 1: reaps the sandboxes' orphans and
# forwards SIGTERM), e2fsprogs (mkfs.ext4 for the sandboxes' disk layers) and
# busybox-static (its ls and stat stand in for GNU's where this runsc lacks statx).
libs=$(ldd "$build/sbx" | awk '/=>/ {print $3}')
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l"; done | cut -d: -f1 | sort -u)
# The libraries sbx opens at first use (core/lazy_libs.cpp) too, but libcurl4:
# only the client side (remote driver) uses it, and it pulls in a dozen more.
# Each loader's last argument is its package: `SBX_DEFINE_API(..., "libmnl.so.0", "libmnl0")`
# or `open_library(soname, "libcurl4")`.
lazy=$(grep -oE '"lib[a-z0-9.+-]*[0-9]"\)' core/lazy_libs.cpp | tr -d '")' | grep -vx libcurl4)
[ -n "$lazy" ] || { say "found no library packages in core/lazy_libs.cpp"; exit 1; }
pkgs=$(printf "%s\n" $pkgs $lazy runsc tini e2fsprogs busybox-static | sort -u | tr '\n' ',' | sed 's/,$//')
key=$(printf '%s\n' "$suite" essential "$pkgs" "$(cat deploy/image/base.conf)" | sha256sum | cut -c1-16)
base=$cache/base-$key.tar
mkdir -p "$cache" "$apt_cache"

if [ $refresh = 1 ] || [ ! -s "$base" ]; then
  say "making the Debian base ($pkgs) with mmdebstrap"
  mapfile -t extra < <(grep -v '^#' deploy/image/base.conf)
  mmdebstrap --mode=root --variant=essential --include="$pkgs" --skip=output/dev \
    --aptopt='Acquire::Languages "none"' --dpkgopt=force-unsafe-io "${extra[@]}" \
    --skip=download/empty --skip=essential/unlink \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in $apt_cache /var/cache/apt/archives/" \
    --customize-hook="sync-out /var/cache/apt/archives $apt_cache" \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/var/cache/debconf/*-old "$1"/var/log/* "$1"/var/cache/ldconfig/aux-cache' \
    "$suite" "$cache/tmp-$key.tar" >&2
  mv "$cache/tmp-$key.tar" "$base"
else
  say "using the cached base $base"
fi

# The sandboxes' default image (python3 ...): the one in this host's store, built if absent.
images=${SBX_IMAGES_DIR:-/var/lib/sbx/images}
if [ ! -e "$images/names/default" ]; then
  say "building the default sandbox image (sbx image build default)"
  SBX_IMAGES_DIR=$images "$build/sbx" image build default >/dev/null
fi
image_id=$(cat "$images/names/default")
image_id=${image_id#sha256:}
[ -d "$images/$image_id/rootfs" ] || die "the default image $image_id is not in $images"

work=$(mktemp -d /var/tmp/sbx-manager-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
top=$work/top
# sbx as an installed sbx looks for it: /usr/bin/sbx, /usr/libexec/sbx/sbx-agent.
DESTDIR=$top cmake --install "$build" --prefix /usr --strip >/dev/null
rm -rf "$top/usr/lib/sbx/guest" "$top/usr/libexec/sbx/sbx-agent-deno" "$top/usr/share/man" "$top/usr/share/bash-completion" "$top/usr/share/zsh" "$top/usr/share/fish"
install -D -m 0755 deploy/image/entrypoint.sh "$top/usr/libexec/sbx/manager-entrypoint"
install -D -m 0755 deploy/image/healthcheck.sh "$top/usr/libexec/sbx/manager-healthcheck"
store=$top/usr/lib/sbx/images
mkdir -p "$store/names" "$store/$image_id"
cp -a "$images/$image_id/rootfs" "$images/$image_id/image.json" "$store/$image_id/"
echo "sha256:$image_id" >"$store/names/default"
mkdir -p "$top/var/lib/sbx"

# One tar per layer, in a fixed order with fixed owners and mtimes.
tar_layer() {
  tar -C "$1" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime --xattrs -cf "$2" .
}
tar_layer "$top" "$work/top.tar"
ln -s "$base" "$work/base.tar"
say "writing the image archive and loading it as $tag"
archive=${keep:-$work/image.tar}
old=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
id=$(deploy/image/make-archive.py --tag "$tag" --epoch "$SOURCE_DATE_EPOCH" --out "$archive" "$work/base.tar" "$work/top.tar")
podman load -q -i "$archive" >&2
[ "$(podman image inspect --format '{{.Id}}' "$tag")" = "$id" ] || die "podman loaded $tag with another id than $id"
# The image the tag named before, unless still in use: rebuilds do not pile up.
[ -z "$old" ] || [ "$old" = "$id" ] || podman rmi "$old" >/dev/null 2>&1 || true
echo "$id"
say "$(podman image inspect --format '{{.Size}}' "$tag" | awk '{printf "size %.1f MB", $1/1e6}')"
