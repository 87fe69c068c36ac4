# shellcheck shell=bash
# ci/lib-llamacpp.sh — sourced by ci/llamacpp and ci/llama-server (not run on its own).
#
# The pinned llama.cpp inputs and where they live: node-llama-cpp@3.22.1 from the npm registry
# (its llama/gitRelease.bundle is llama.cpp v0.5.0's source) and @node-llama-cpp/linux-x64@3.22.1
# (the prebuilt CPU libraries), unpacked and cloned into
#   ${QC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-conform}/llamacpp/
# Defines NLC_VERSION LLAMA_TAG PY cache_base C BINS SRC PLUGIN, log / die (prefixed with
# $log_tag, default ci/llamacpp), install_deps (apt, only what is missing), fetch,
# build_plugin, build_driver (prints the driver's path) and setup (deps + fetch + plugin).
# The caller sets `root` (the repository) and `set -euo pipefail` before sourcing.
: "${root:?ci/lib-llamacpp.sh: set root before sourcing}"

NLC_VERSION=3.22.1
LLAMA_TAG=v0.5.0
PY=/usr/bin/python3
cache_base="${QC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-conform}"
C="$cache_base/llamacpp"
BINS="$C/pkg/linux-x64/package/bins/linux-x64"
SRC="$C/src"
PLUGIN="$C/libqc_plugin_llamacpp.so"

log_tag="${log_tag:-ci/llamacpp}"
log() { echo "$log_tag: $*" >&2; }
die() { echo "$log_tag: error: $*" >&2; exit 2; }

# ---- packages -------------------------------------------------------------------------
install_deps() {
  local pkgs=(git gcc libc6-dev python3-torch python3-numpy python3-yaml python3-tqdm
              python3-h5py hdf5-tools)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    local SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# ---- fetch + unpack -------------------------------------------------------------------
fetch_pkg() {  # NAME FILE DEST
  local name="$1" file="$2" dest="$3"
  mkdir -p "$C/npm"
  if [ ! -s "$C/npm/$file" ]; then
    log "npm pack $name@$NLC_VERSION"
    local tmp
    tmp="$(mktemp -d "$C/npm/.pack.XXXXXX")"
    (cd "$tmp" && npm pack --silent "$name@$NLC_VERSION" >/dev/null)
    [ -s "$tmp/$file" ] || die "npm pack $name@$NLC_VERSION did not produce $file"
    mv -f "$tmp/$file" "$C/npm/$file"
    rm -rf "$tmp"
  fi
  if [ ! -f "$dest/.unpacked" ]; then
    log "unpacking $file"
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    tar -xzf "$C/npm/$file" -C "$dest.tmp"
    touch "$dest.tmp/.unpacked"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
  fi
}

fetch() {
  mkdir -p "$C/pkg"
  fetch_pkg node-llama-cpp "node-llama-cpp-$NLC_VERSION.tgz" "$C/pkg/node-llama-cpp"
  fetch_pkg @node-llama-cpp/linux-x64 "node-llama-cpp-linux-x64-$NLC_VERSION.tgz" "$C/pkg/linux-x64"
  local info="$C/pkg/node-llama-cpp/package/llama/llama.cpp.info.json"
  grep -q "\"$LLAMA_TAG\"" "$info" || die "$info does not name llama.cpp $LLAMA_TAG"
  for f in libllama.v0.5.0.so libggml.v0.5.0.so libggml-base.so; do
    [ -f "$BINS/$f" ] || die "$BINS/$f missing from @node-llama-cpp/linux-x64@$NLC_VERSION"
  done
  if [ ! -f "$SRC/.cloned" ]; then
    log "cloning llama.cpp $LLAMA_TAG from llama/gitRelease.bundle"
    rm -rf "$SRC.tmp"
    git clone -q "$C/pkg/node-llama-cpp/package/llama/gitRelease.bundle" "$SRC.tmp" 2>/dev/null
    for f in include/llama.h ggml/include/ggml.h ggml/include/gguf.h convert_hf_to_gguf.py \
             conversion/qwen.py gguf-py/gguf/__init__.py; do
      [ -f "$SRC.tmp/$f" ] || die "the bundle has no $f"
    done
    touch "$SRC.tmp/.cloned"
    rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
  fi
}

# ---- build ----------------------------------------------------------------------------
build_plugin() {
  local here="$root/adapters/llamacpp"
  # shellcheck disable=SC2054  # the commas are the linker's (-Wl,-rpath,DIR)
  local cmd=(cc -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Werror=implicit-function-declaration
             -fvisibility=hidden
             -I"$root/include" -I"$SRC/include" -I"$SRC/ggml/include"
             -DQC_LLAMACPP_BINS="\"$BINS\"" -DQC_LLAMACPP_SRC="\"$SRC\""
             -DQC_LLAMACPP_CONVERT="\"$here/qc_convert.py\"" -DQC_LLAMACPP_CACHE="\"$C\""
             -DQC_LLAMACPP_PYTHON="\"$PY\""
             "$here"/qc_llamacpp_*.c -o "$PLUGIN.tmp"
             -L"$BINS" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so
             -Wl,-rpath,"$BINS" -Wl,--no-undefined -lpthread -lm)
  local stamp
  stamp="$( { printf '%s\n' "${cmd[@]}"; cat "$here"/qc_llamacpp_*.[ch] "$root/include/qc/qc_runtime_plugin.h"; } | sha256sum | cut -d' ' -f1)"
  if [ -f "$PLUGIN" ] && [ "$(cat "$PLUGIN.stamp" 2>/dev/null)" = "$stamp" ]; then
    return
  fi
  log "building $PLUGIN"
  "${cmd[@]}"
  mv -f "$PLUGIN.tmp" "$PLUGIN"
  echo "$stamp" > "$PLUGIN.stamp"
}

build_driver() {
  local here="$root/adapters/llamacpp"
  local out="$C/plugin_driver"
  local cmd=(cc -std=c11 -O2 -g -Wall -Wextra -I"$root/include" "$here/tests/plugin_driver.c"
             -o "$out.tmp" -ldl -lm)
  local stamp
  stamp="$( { printf '%s\n' "${cmd[@]}"; cat "$here/tests/plugin_driver.c" "$root/include/qc/qc_runtime_plugin.h"; } | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$out" ] || [ "$(cat "$out.stamp" 2>/dev/null)" != "$stamp" ]; then
    log "building $out"
    "${cmd[@]}"
    mv -f "$out.tmp" "$out"
    echo "$stamp" > "$out.stamp"
  fi
  echo "$out"
}

setup() {
  install_deps
  mkdir -p "$C"
  fetch
  build_plugin
}
