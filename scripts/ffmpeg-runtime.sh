#!/usr/bin/env bash
# Bundle Debian 12's FFmpeg 5.1 runtime and development files into one relocatable folder
# (and a .tar.xz of it) for the GPU test machine, which runs Ubuntu 24.04 without any FFmpeg
# libraries and without network access. There, after untarring, ditto is built against the
# bundle through PKG_CONFIG_PATH and run with LD_LIBRARY_PATH (see the env.sh written into it),
# or linked with -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags: CMake's build RPATH then holds
# the bundle's lib/ and, as a DT_RPATH, also finds the libraries' own dependencies at run time.
#
# The library list is not hard-coded: it is the recursive DT_NEEDED closure of the five FFmpeg
# libraries as installed on THIS machine (Debian 12: libavcodec59 libavformat59 libavutil57
# libswscale6 libswresample4), each soname mapped to its package with dpkg -S, minus the
# libraries any Ubuntu 24.04 system has with the same soname (EXCLUDE below). The .debs are
# fetched with apt-get download (no root needed) at the installed versions and unpacked with
# dpkg -x; only the closure's shared objects, the FFmpeg headers and the five .pc files are kept.
#
# Usage: scripts/ffmpeg-runtime.sh [OUT_DIR]     (default .carry/ffmpeg; writes OUT_DIR.tar.xz too)
# Environment: FFMPEG_DEB_CACHE   where the .debs go (default ${TMPDIR:-/tmp}/ditto-ffmpeg-debs)
#              FFMPEG_EXCLUDE_EXTRA  more sonames (space-separated globs) to assume present there
#              FFMPEG_BUDGET_MIB  size the tarball should stay under (default 12; only warns)
# Layout: OUT_DIR/lib/*.so.N (+ lib*.so links for the five), OUT_DIR/lib/pkgconfig/*.pc,
#         OUT_DIR/include/lib{avcodec,avformat,avutil,swscale,swresample}/, OUT_DIR/MANIFEST, OUT_DIR/env.sh
# word splitting of the space-separated lists and glob matching in excluded() are intended
# shellcheck disable=SC2053,SC2206,SC2086,SC2016,SC2012,SC2015
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${1:-.carry/ffmpeg}
OUT=${OUT%/}
CACHE=${FFMPEG_DEB_CACHE:-${TMPDIR:-/tmp}/ditto-ffmpeg-debs}
BUDGET_MIB=${FFMPEG_BUDGET_MIB:-12}
ARCH_DIR=x86_64-linux-gnu

FF_LIBS="libavformat.so.59 libavcodec.so.59 libavutil.so.57 libswscale.so.6 libswresample.so.4"
FF_DEV="libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev"
FF_MODULES="libavcodec libavformat libavutil libswscale libswresample"

# Sonames assumed present on the Ubuntu 24.04 machine (same soname, same or newer, backward
# compatible version): glibc, libgcc/libstdc++ (GCC 13/14 there), zlib, xz, bzip2, zstd,
# OpenSSL 3, GMP, libffi, expat. None of these depends on anything outside this list, so the
# system copies never load a bundled (older) library. GnuTLS is deliberately NOT excluded:
# Ubuntu's libgnutls.so.30 would pull Ubuntu's libunistring.so.5/libnettle 3.9 while the
# bundled libsrt-gnutls/libidn2 pull Debian's nettle 3.8/libunistring.so.2 - mixing is fragile.
EXCLUDE="ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0 libdl.so.2 librt.so.1
  libresolv.so.2 libutil.so.1 libanl.so.1 libgcc_s.so.1 libstdc++.so.6 libatomic.so.1 libz.so.1
  liblzma.so.5 libbz2.so.1.0 libzstd.so.1 libcrypto.so.3 libssl.so.3 libgmp.so.10 libffi.so.8
  libexpat.so.1 ${FFMPEG_EXCLUDE_EXTRA:-}"

die() { echo "ffmpeg-runtime: $*" >&2; exit 1; }
for t in apt-get dpkg dpkg-query ldconfig readelf xz tar pkg-config; do
  command -v "$t" >/dev/null || PATH=$PATH:/sbin:/usr/sbin command -v "$t" >/dev/null || die "needs $t"
done
LDCONFIG=$(PATH=$PATH:/sbin:/usr/sbin command -v ldconfig)
case "$OUT" in ""|/|.|..|.carry) die "refusing output folder '$OUT'";; esac
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/MANIFEST" ]; then
  die "$OUT exists and is not a bundle written by this script; remove it first"
fi

excluded() { local s=$1 p; for p in $EXCLUDE; do [[ $s == $p ]] && return 0; done; return 1; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# soname -> path of the host's copy (x86-64 entries of the ld.so cache)
declare -A HOSTPATH
while read -r so rest; do
  [[ $rest == *x86-64* ]] || continue
  [ -n "${HOSTPATH[$so]:-}" ] || HOSTPATH[$so]=${rest##*=> }
done < <("$LDCONFIG" -p | tail -n +2)

# ---- 1. recursive NEEDED closure of the five libraries, on this machine ----------------------
declare -A SEEN
CLOSURE=() EXCLUDED=()
queue=($FF_LIBS)
while [ ${#queue[@]} -gt 0 ]; do
  so=${queue[0]}; queue=("${queue[@]:1}")
  [ -n "${SEEN[$so]:-}" ] && continue
  SEEN[$so]=1
  if excluded "$so"; then EXCLUDED+=("$so"); continue; fi
  p=${HOSTPATH[$so]:-}
  [ -n "$p" ] || die "$so is not installed here (apt-get install libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4)"
  CLOSURE+=("$so")
  for n in $(needed "$p"); do queue+=("$n"); done
done

# ---- 2. soname -> Debian package (dpkg -S on the host path, usrmerge-aware) -------------------
owner() {
  local p=$1 real c
  real=$(readlink -f "$p")
  for c in "$p" "${p#/usr}" "/usr${p#/usr}" "$real" "${real#/usr}" "/usr${real#/usr}"; do
    dpkg -S "$c" 2>/dev/null | head -n1 | cut -d: -f1 && return 0
  done
  return 1
}
declare -A PKG_OF
PKGS=()
for so in "${CLOSURE[@]}"; do
  pk=$(owner "${HOSTPATH[$so]}") || die "no package owns ${HOSTPATH[$so]} ($so)"
  PKG_OF[$so]=$pk
  [[ " ${PKGS[*]} " == *" $pk "* ]] || PKGS+=("$pk")
done
PKGS+=($FF_DEV)

# ---- 3. download the .debs (installed versions) -------------------------------------------
mkdir -p "$CACHE"
APT_OPTS=()
[ "$(id -u)" != 0 ] || APT_OPTS=(-o APT::Sandbox::User=root)   # no "_apt cannot access" warnings
declare -A DEB
for pk in "${PKGS[@]}"; do
  # the installed version (what dpkg -S mapped), else apt's candidate (the archive moved on)
  f=""
  for ver in "$(dpkg-query -W -f='${Version}' "$pk" 2>/dev/null || true)" \
             "$(apt-cache policy "$pk" 2>/dev/null | sed -n 's/^ *Candidate: //p')"; do
    [ -n "$ver" ] && [ "$ver" != "(none)" ] || continue
    f=$(ls "$CACHE/${pk}_${ver//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
    [ -n "$f" ] && break
    if (cd "$CACHE" && apt-get download -q "${APT_OPTS[@]}" "$pk=$ver" >/dev/null 2>&1); then
      f=$(ls "$CACHE/${pk}_${ver//:/%3a}_"*.deb | head -n1)
      break
    fi
  done
  [ -n "$f" ] || die "apt-get download $pk failed (try: cd $CACHE && apt-get download $pk)"
  DEB[$pk]=$f
done

# ---- 4. unpack, keep only what the build and the run need --------------------------------
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/ffmpeg-runtime.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
for pk in "${PKGS[@]}"; do dpkg -x "${DEB[$pk]}" "$STAGE/root"; done
R=$STAGE/root
rm -rf "$OUT"
mkdir -p "$OUT/lib/pkgconfig" "$OUT/include"
for so in "${CLOSURE[@]}"; do
  src=""
  for d in "$R/usr/lib/$ARCH_DIR" "$R/lib/$ARCH_DIR" "$R/usr/lib" "$R/lib"; do
    [ -e "$d/$so" ] && { src=$d/$so; break; }
  done
  if [ -z "$src" ]; then   # soname link missing from the package (ldconfig makes it): find the file
    src=$(find "$R" -name "$(basename "$(readlink -f "${HOSTPATH[$so]}")")" | head -n1)
  fi
  [ -n "$src" ] || die "$so not found in ${PKG_OF[$so]}'s .deb"
  cp -L "$src" "$OUT/lib/$so"   # one regular file per soname, no versioned names
done
for m in $FF_MODULES; do
  cp -r "$R/usr/include/$ARCH_DIR/$m" "$OUT/include/"
  so=$(cd "$OUT/lib" && ls "$m".so.* | head -n1)
  ln -s "$so" "$OUT/lib/$m.so"
  sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
      -e 's|^libdir=.*|libdir=${prefix}/lib|' -e 's|^includedir=.*|includedir=${prefix}/include|' \
      "$R/usr/lib/$ARCH_DIR/pkgconfig/$m.pc" > "$OUT/lib/pkgconfig/$m.pc"
done
cat > "$OUT/env.sh" <<'EOF'
# source this: points pkg-config and the dynamic loader at this FFmpeg bundle
_ff=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export PKG_CONFIG_PATH=$_ff/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$_ff/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset _ff
EOF
{
  echo "# Debian $(cat /etc/debian_version 2>/dev/null || echo '?') FFmpeg runtime bundle, made by scripts/ffmpeg-runtime.sh"
  echo "# assumed present on the target (not bundled): ${EXCLUDED[*]}"
  for pk in "${PKGS[@]}"; do echo "package $pk $(basename "${DEB[$pk]}")"; done
  for so in "${CLOSURE[@]}"; do echo "lib $so ${PKG_OF[$so]}"; done
} > "$OUT/MANIFEST"

# ---- 5. checks: the closure is complete inside the bundle, pkg-config resolves inside it -------
missing=0
for f in "$OUT"/lib/*.so.*; do
  for n in $(needed "$f"); do
    [ -e "$OUT/lib/$n" ] || excluded "$n" || { echo "  $(basename "$f") needs $n: not bundled" >&2; missing=1; }
  done
done
[ $missing = 0 ] || die "bundle is not closed under NEEDED"
absout=$(cd "$OUT" && pwd -P)
pc=$(PKG_CONFIG_LIBDIR="$absout/lib/pkgconfig" PKG_CONFIG_PATH="" pkg-config --cflags --libs $FF_MODULES) \
  || die "pkg-config cannot read the bundle's .pc files"
for w in $pc; do
  case "$w" in -I*|-L*) d=$(cd "${w:2}" && pwd -P); [[ $d == "$absout"* ]] || die "pkg-config points outside: $w";; esac
done
echo "pkg-config: $pc"

# ---- 6. tarball ------------------------------------------------------------------------------
TAR=$OUT.tar.xz
tar -C "$(dirname "$OUT")" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -cf - "$(basename "$OUT")" | xz -9e -T1 > "$TAR.tmp"
mv "$TAR.tmp" "$TAR"

echo "bundled ${#CLOSURE[@]} libraries from $((${#PKGS[@]})) packages; not bundled: ${EXCLUDED[*]}"
echo "largest libraries (bytes, package):"
for so in "${CLOSURE[@]}"; do echo "$(stat -c %s "$OUT/lib/$so") $so ${PKG_OF[$so]}"; done | sort -rn | head -n 12 | sed 's/^/  /'
echo "$OUT: $(du -sb "$OUT" | cut -f1) bytes unpacked"
bytes=$(stat -c %s "$TAR")
echo "$TAR: $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1048576 }') MiB)"
if [ "$bytes" -gt $((BUDGET_MIB * 1048576)) ]; then
  echo "WARNING: $TAR is over the ${BUDGET_MIB} MiB budget" >&2
fi
