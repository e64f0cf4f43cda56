#!/usr/bin/env bash
# Builds a minimal Debian 12 (bookworm) root filesystem for `sbx create --image DIR`.
#
#   sudo ./build-debian-rootfs.sh [--with-python] [DIR]     (DIR defaults to ./rootfs-bookworm)
#
# The Debian mirror is the one apt already uses on this host (/etc/apt/sources.list
# or /etc/apt/sources.list.d/*.list / *.sources); set MIRROR=URL to override.
# Needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail

suite=bookworm
with_python=0
dir=""

usage() { sed -n '2,8s/^# \{0,1\}//p' "$0"; }

while (($#)); do
    case $1 in
        --with-python) with_python=1 ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
        *)
            [[ -z $dir ]] || { echo "only one DIR, please" >&2; exit 2; }
            dir=$1
            ;;
    esac
    shift
done
dir=${dir:-./rootfs-bookworm}

# Prints the URI of the first enabled `deb` source for $suite, from one-line
# (.list) and deb822 (.sources) files alike.
debian_mirror() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        # deb [opts] URI SUITE COMPONENTS...
        awk -v suite="$suite" '
            { sub(/#.*/, "") }
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        # Stanzas separated by blank lines; fields Types, URIs, Suites, Enabled.
        awk -v suite="$suite" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uris != "") {
                    split(uris, u, " "); print u[1]; found = 1
                }
                types = uris = suites = enabled = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); if (found) exit; next }
            {
                key = tolower($1); sub(/:$/, "", key)
                val = $0; sub(/^[^:]*:[ \t]*/, "", val)
                if (key == "types") types = val
                else if (key == "uris") uris = val
                else if (key == "suites") suites = val
                else if (key == "enabled") enabled = tolower(val)
            }
            END { if (!found) flush() }' "$f"
    done
}

mirror=${MIRROR:-$(debian_mirror | head -n 1)}
if [[ -z $mirror ]]; then
    echo "no Debian mirror for '$suite' found in /etc/apt/sources.list{,.d/}; set MIRROR=URL" >&2
    exit 1
fi
if ((EUID != 0)); then
    echo "debootstrap needs root: sudo $0 $*" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    echo "debootstrap is not installed: apt-get install debootstrap" >&2
    exit 1
fi
if [[ -e $dir && -n $(ls -A "$dir" 2>/dev/null) ]]; then
    echo "$dir exists and is not empty" >&2
    exit 1
fi

opts=(--variant=minbase)
((with_python)) && opts+=(--include=python3)
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -r $keyring ]] && opts+=(--keyring="$keyring")

echo "debootstrap ${opts[*]} $suite $dir $mirror" >&2
debootstrap "${opts[@]}" "$suite" "$dir" "$mirror"

# sbx's default working directory, and less weight in the read-only base.
mkdir -p "$dir/work"
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*

abs=$(cd "$dir" && pwd)
cat <<EOF

Root filesystem ready: $abs ($(du -sh "$abs" | cut -f1))
Use it as the read-only base of a sandbox:

    id=\$(sbx create --image $abs)
    sbx exec "\$id" -- cat /etc/debian_version
    sbx exec --rm --image $abs -- $( ((with_python)) && echo "python3 -c 'import sys; print(sys.version)'" || echo "sh -c 'echo hello'")
EOF
