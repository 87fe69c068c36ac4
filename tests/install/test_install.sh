#!/usr/bin/env bash
# test_install.sh — the installed package works from outside the tree (CTest `install_package`,
# label install).
#
#   test_install.sh BUILD_DIR SOURCE_DIR INTREE_CONSUMER [CMAKE] [CC] [EXTRA_FLAGS]
#
# 1. `cmake --install BUILD_DIR --prefix $tmp/prefix`; the installed headers are exactly the
#    public API (include/qc/ of the source tree: no harness header), the static libraries, the
#    CMake package and the pkg-config file are there;
# 2. tests/install/consumer built against the installed package with
#    find_package(qwen_conform CONFIG REQUIRED), and run on a fixture model;
# 3. the same consumer.c built with `cc $(pkg-config --cflags --libs qwen-conform)`, and run;
# 4. both print exactly what the in-tree build of consumer.c (INTREE_CONSUMER) prints: the
#    reference and optimized logit checksums of one forward.
# EXTRA_FLAGS: compiler/linker flags the libraries need from their consumer (the sanitizer
# flags of a QC_SANITIZE build; empty normally).
set -uo pipefail
build="$1" src="$2" intree="$3"
cmake_bin="${4:-cmake}" cc="${5:-cc}" extra="${6:-}"
model="$src/fixtures/tiny-f32-tied-flat/model"

fails=0
ok() { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
tmp="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

# ---- 1. install ----
if "$cmake_bin" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  ok "cmake --install to a temp prefix"
else
  bad "cmake --install failed:"; cat "$tmp/install.log"; exit 1
fi
want_headers="$(cd "$src/include/qc" && ls *.h | sort)"
got_headers="$(cd "$prefix/include/qc" 2>/dev/null && ls *.h | sort)"
if [ "$want_headers" = "$got_headers" ]; then
  ok "installed headers = include/qc/ ($(echo $got_headers | wc -w) files)"
else
  bad "installed headers differ from include/qc/: $(diff <(echo "$want_headers") <(echo "$got_headers") | tr '\n' ' ')"
fi
for h in qc_cli.h qc_golden.h qc_runcase.h qc_registry.h qc_check.h qc_opt_kernels.h; do
  [ -e "$prefix/include/qc/$h" ] && bad "internal header $h is installed"
done
libdir=""
for d in "$prefix"/lib "$prefix"/lib64 "$prefix"/lib/*-linux-gnu; do
  [ -f "$d/libqc_runtime.a" ] && libdir="$d" && break
done
if [ -n "$libdir" ]; then
  ok "static libraries installed in ${libdir#$prefix/}"
else
  bad "no libqc_runtime.a under $prefix"; exit 1
fi
for f in libqc_reference.a libqc_optimized.a pkgconfig/qwen-conform.pc \
         cmake/qwen_conform/qwen_conformConfig.cmake cmake/qwen_conform/qwen_conformConfigVersion.cmake \
         cmake/qwen_conform/qwen_conformTargets.cmake; do
  [ -f "$libdir/$f" ] || bad "missing $f"
done
for h in "$libdir"/libqc_harness.a "$libdir"/libqc_h_*.a; do # harness/<folder>/ libraries
  if [ -e "$h" ]; then bad "a harness library is installed (it is not an API): ${h##*/}"; fi
done
nm "$libdir/libqc_runtime.a" 2>/dev/null | grep -qE ' U (qc_reference_create|qc_optimized_create|qc_registry_)' \
  && bad "libqc_runtime.a references a backend or the registry"

# ---- the in-tree answer ----
if "$intree" "$model" >"$tmp/intree.out" 2>"$tmp/intree.err"; then
  ok "in-tree consumer: $(grep -c logits "$tmp/intree.out") checksums"
else
  bad "in-tree consumer failed: $(cat "$tmp/intree.err")"; exit 1
fi
grep -q "^reference logits" "$tmp/intree.out" && grep -q "^optimized logits" "$tmp/intree.out" \
  || bad "in-tree consumer printed no checksums: $(cat "$tmp/intree.out")"

same_as_intree() { # $1 label, $2 output file
  if cmp -s "$tmp/intree.out" "$2"; then
    ok "$1: same logit checksums as in-tree ($(grep '^reference' "$2" | sed 's/.*: //'))"
  else
    bad "$1: output differs from in-tree:"; diff "$tmp/intree.out" "$2"
  fi
}

# ---- 2. find_package ----
cflags_cmake=()
[ -n "$extra" ] && cflags_cmake=(-DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra")
if "$cmake_bin" -S "$src/tests/install/consumer" -B "$tmp/b-cmake" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
     "${cflags_cmake[@]}" >"$tmp/cfg.log" 2>&1 \
   && "$cmake_bin" --build "$tmp/b-cmake" >"$tmp/build.log" 2>&1; then
  if grep -q "from $prefix/" "$tmp/cfg.log"; then
    ok "find_package(qwen_conform CONFIG REQUIRED): configured and built"
  else
    bad "find_package found a package outside the prefix: $(grep 'qwen_conform' "$tmp/cfg.log")"
  fi
  if "$tmp/b-cmake/qc_consumer" "$model" >"$tmp/cmake.out" 2>"$tmp/cmake.err"; then
    same_as_intree "find_package consumer" "$tmp/cmake.out"
  else
    bad "find_package consumer failed: $(cat "$tmp/cmake.err")"
  fi
else
  bad "find_package consumer did not configure / build:"; cat "$tmp/cfg.log" "$tmp/build.log" 2>/dev/null | tail -30
fi

# ---- 3. pkg-config ----
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
if pc="$(pkg-config --cflags --libs qwen-conform 2>&1)"; then
  ok "pkg-config --cflags --libs qwen-conform: $pc"
  # shellcheck disable=SC2086
  if "$cc" -O2 $extra -o "$tmp/qc_consumer_pc" "$src/tests/install/consumer/consumer.c" $pc \
       >"$tmp/pc-build.log" 2>&1; then
    ok "pkg-config consumer built"
    if "$tmp/qc_consumer_pc" "$model" >"$tmp/pc.out" 2>"$tmp/pc.err"; then
      same_as_intree "pkg-config consumer" "$tmp/pc.out"
    else
      bad "pkg-config consumer failed: $(cat "$tmp/pc.err")"
    fi
  else
    bad "pkg-config consumer did not build:"; cat "$tmp/pc-build.log"
  fi
  case " $pc " in *" -I$src/include "*|*"$src/include"*) bad "pkg-config points into the source tree";; esac
else
  bad "pkg-config qwen-conform: $pc"
fi

echo "# $fails failed"
[ "$fails" -eq 0 ]
