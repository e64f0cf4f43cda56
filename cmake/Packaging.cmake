# The Debian package (`cpack -G DEB` in a build tree; scripts/build-deb.sh
# does the whole thing): sbx_VERSION_amd64.deb, installed under /usr, with
# dependencies named as Debian packages so `apt-get install ./sbx_*.deb`
# pulls them from the archive.

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "sbx")
set(CPACK_PACKAGE_VENDOR "sbx")
# dpkg needs a Maintainer; whoever publishes the package sets theirs.
set(SBX_DEB_MAINTAINER "sbx maintainers <root@localhost>" CACHE STRING "Maintainer: field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${SBX_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run untrusted code in sandboxes (namespaces, gVisor, micro-VMs, Deno)")
# One string, its lines wrapped here (CPack indents them for the control file).
string(CONCAT CPACK_PACKAGE_DESCRIPTION
       "sbx creates sandboxes, runs commands in them and copies files in and\n"
       "out, on this host (namespaces + overlayfs + cgroups + seccomp, gVisor's\n"
       "runsc, a QEMU micro-VM per sandbox, or Python/JavaScript in Deno) or\n"
       "through a remote manager: sbx serve, the HTTP control plane (systemd\n"
       "units included, not enabled).\n"
       "The Deno driver's runtime (the pinned deno and pyodide npm packages) is\n"
       "not in Debian: /usr/libexec/sbx/setup-deno.sh installs it with npm.")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")  # sbx_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# The guest kernel is 50 MB uncompressed (vmlinux, for cloud-hypervisor): xz
# halves the package against gzip for a few seconds more of cpack.
set(CPACK_DEBIAN_COMPRESSION_TYPE "xz")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The libraries sbx links dynamically (libc6 alone), found by
# dpkg-shlibdeps; the rest is linked in (sbx-agent is static on purpose).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# What sbx runs by path or loads when first needed (core/lazy_libs.hpp), which
# dpkg-shlibdeps cannot see:
#   e2fsprogs        mkfs.ext4 and debugfs make sandbox disks (--disk) and
#                    micro-VM writable layers.
#   libnftables1, libmnl0   the network jail (sbx speaks netlink and nftables
#                    itself, so neither iproute2 nor nftables is needed).
#   libarchive13     cp, images, snapshots' tar streams.
#   libmicrohttpd12  sbx serve.   libcurl4, libssl3: the remote driver, image blobs.
#   libsqlite3-0     the deno driver's snapshots.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "e2fsprogs, libnftables1, libmnl0, libarchive13, libmicrohttpd12, libcurl4, libssl3, libsqlite3-0")
# Each driver that needs more than the kernel, and sbx doctor says which are missing:
#   runsc            the gVisor driver (--driver runsc).
#   qemu-system-x86  the micro-VM driver (QEMU's microvm machine).
#   mmdebstrap       `sbx image build`: the default image (python3 and the
#                    shell tools) of subprocess/runsc sandboxes, and --image.
#   busybox-static   runsc sandboxes: its ls and stat stand in for the ones
#                    gVisor breaks.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "runsc, qemu-system-x86, mmdebstrap, busybox-static")
#   npm              /usr/libexec/sbx/setup-deno.sh installs the Deno driver's
#                    runtime (deno, pyodide) from the npm registry with it.
#   podman           the manager container image (deploy/image) is built with it.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "npm, podman")
# No maintainer scripts: the systemd units are installed, never enabled or
# started (the manager needs a key in /etc/sbx/env first; docs/install.md).

# Stripped: the debug information stays in the build tree's binaries.
set(CPACK_STRIP_FILES ON)

include(CPack)
