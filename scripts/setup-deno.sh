#!/usr/bin/env bash
# Installs the deno driver's runtime: the pinned npm packages `deno` (its
# binary) and `pyodide` from agent-deno/package.json and package-lock.json,
# into SBX_DENO_HOME (default /usr/local/lib/sbx/deno, where sbx looks), and
# makes the per-host Pyodide snapshot so the first sandbox starts fast.
# Usage: scripts/setup-deno.sh          (called by scripts/setup.sh; needs npm)
#        /usr/libexec/sbx/setup-deno.sh  (installed by the Debian package)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# In the sources the package files are agent-deno/; installed, PREFIX/share/sbx/deno.
pkg=$here/../agent-deno
[[ -f $pkg/package-lock.json ]] || pkg=$here/../../share/sbx/deno
prefix=${SBX_DENO_HOME:-/usr/local/lib/sbx/deno}

if ! command -v npm >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup-deno: need npm (apt-get install npm) to install deno and pyodide" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

want=$(sha256sum "$pkg/package-lock.json" | cut -d' ' -f1)
if [[ -f "$prefix/.installed-lock" && "$(cat "$prefix/.installed-lock")" == "$want" ]] &&
   compgen -G "$prefix/node_modules/@deno/linux-*/deno" >/dev/null && [[ -f "$prefix/node_modules/pyodide/pyodide.mjs" ]]; then
  echo "setup-deno: deno and pyodide already installed in $prefix"
else
  mkdir -p "$prefix"
  cp "$pkg/package.json" "$pkg/package-lock.json" "$prefix/"
  # --ignore-scripts: the deno package's postinstall only links the binary
  # that its platform package (@deno/linux-*) already ships.
  (cd "$prefix" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  chmod -R a+rX "$prefix"
  echo "$want" >"$prefix/.installed-lock"
  echo "setup-deno: installed $("$prefix"/node_modules/@deno/linux-*/deno --version | head -1), pyodide $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$prefix/node_modules/pyodide/package.json" | head -1) in $prefix"
fi
