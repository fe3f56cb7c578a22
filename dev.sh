#!/usr/bin/env bash
# mgpu-lab entry point. On a fresh Debian 12 machine this installs what is missing, builds, and
#   ./dev.sh demo    runs the main demo (pipeline bubbles on 4 CPU virtual GPUs: ASCII timeline,
#                    trace JSON and a dashboard PNG under out/)
#   ./dev.sh test    runs the whole test suite (under a virtual X server for the dashboard tests;
#                    with the web page built and tested in headless Chromium, label web),
#                    then the sanitizer job: clang + ASan/UBSan build (build-sanitize/) of the
#                    core-only unit tests and the fuzz targets, each fuzzed for 30 s
#                    (MGPU_FUZZ_SECONDS to change; tests/fuzz/CMakeLists.txt says how to fuzz longer)
#   ./dev.sh test-portable   the portability check developers run before they stop (not CI):
#                    the doc tests and the layout-equivalence tests under each OpenBLAS kernel set
#                    this CPU can run and 1 and 2 BLAS threads; reports any figure that changes
#   ./dev.sh build   just installs and builds
#   ./dev.sh web [--dist DIR]   the classroom as a web page (WebAssembly, Debian's emscripten;
#                    build-web/): serves it on http://127.0.0.1:8000 (MGPU_WEB_PORT), or writes the
#                    files an instructor hosts into DIR (docs/browser.md)
#   ./dev.sh docs-update   re-runs every `./build/mgpu` command the README and docs/ show and
#                    rewrites their shown outputs (review `git diff`, commit); `ctest -L docs`
#                    checks them (tests/docs/run_docs.py)
# `demo` builds the mgpu program and the two benchmarks the lesson pages run (bench_ddp,
# bench_pipeline); `test` and `build` build everything (tests, all benchmarks).
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(cmake g++ pkg-config catch2 libimgui-dev libglfw3-dev libgl-dev libopenmpi-dev
  openmpi-bin nlohmann-json3-dev rapidjson-dev libcli11-dev libfmt-dev libstb-dev libopenblas-dev
  zlib1g-dev xvfb xauth libgl1-mesa-dri python3)
# The sanitizer job's compiler: libFuzzer and its ASan/UBSan runtimes come with Debian's clang.
SANITIZE_PACKAGES=(clang libclang-rt-14-dev)
JOBS=$(nproc 2>/dev/null || echo 2)
# The web build (web/CMakeLists.txt): the compiler, and the browser its test drives.
WEB_PACKAGES=(emscripten chromium dpkg-dev bzip2 xz-utils)  # dpkg-dev..: apt-get source unpacks

install_missing() {
  local missing=()
  for p in "${APT_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "==> installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# build [TARGET...]: configure, then build the targets given (default: everything).
build() {
  install_missing
  echo "==> configuring and building (build/)"
  cmake --preset default
  cmake --build --preset default -j"$JOBS" ${1:+--target "$@"}
}

# Readers of user files under ASan/UBSan: the unit tests that need only the core library, the
# fuzz corpus replays, and a bounded libFuzzer run per reader (label fuzz).
sanitize_job() {
  echo "==> sanitizer job: clang + ASan/UBSan (build-sanitize/), unit tests + fuzzing"
  cmake --preset sanitize -DMGPU_FUZZ_SECONDS="${MGPU_FUZZ_SECONDS:-30}"
  # One target, mgpu_sanitize_job (tests/fuzz/CMakeLists.txt): the asan_test_*, fuzz_* and
  # fuzz_replay_* executables, built side by side.
  cmake --build --preset sanitize -j"$JOBS" --target mgpu_sanitize_job
  (cd build-sanitize && ctest -L 'sanitize|fuzz' --output-on-failure -j"$JOBS")
}

# ImGui 1.86 and zlib sources for the web build, from Debian's source packages (never committed):
# needs a deb-src entry, added beside the system's own when there is none.
fetch_web_sources() {
  local deps=build-web/_deps
  if compgen -G "$deps/imgui-1.86*/imgui.cpp" >/dev/null && compgen -G "$deps/zlib-*/crc32.c" >/dev/null; then
    return 0
  fi
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "==> adding a deb-src entry (apt-get source imgui zlib)"
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
        $sudo tee /etc/apt/sources.list.d/mgpu-deb-src.sources >/dev/null
    else
      sed -n 's/^deb /deb-src /p' /etc/apt/sources.list |
        $sudo tee /etc/apt/sources.list.d/mgpu-deb-src.list >/dev/null
    fi
    $sudo apt-get update -q
  fi
  mkdir -p "$deps"
  (cd "$deps" && apt-get source -q imgui zlib)
}

# build_web: the page into build-web/ (index.html, .js, .wasm, .worker.js, the service worker).
build_web() {
  install_missing "${WEB_PACKAGES[@]}"
  fetch_web_sources
  echo "==> building the web page (build-web/)"
  # emcc's JavaScript tools need Debian's node modules (acorn, terser).
  export NODE_PATH=/usr/share/nodejs
  cmake -S web -B build-web -DCMAKE_BUILD_TYPE=Release -DMGPU_WEB_DEPS="$PWD/build-web/_deps" \
    -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake
  cmake --build build-web -j"$JOBS"
}

case "${1:-}" in
  demo)
    build mgpu bench_ddp bench_pipeline  # what the pages run; `./dev.sh test` builds the rest
    mkdir -p out
    ./build/mgpu run pipeline --ranks 4 --schedule 1f1b --microbatches 8 --profile 8xH100-NVLink \
      --trace out/pipeline-1f1b.json
    if [ -x build/mgpu ] && ./build/mgpu viz --help >/dev/null 2>&1; then
      xvfb-run -a ./build/mgpu viz out/pipeline-1f1b.json --screenshot out/pipeline-1f1b.png
      echo "==> wrote out/pipeline-1f1b.json (open in Perfetto or \`./build/mgpu viz\`) and out/pipeline-1f1b.png"
    fi
    ;;
  test)
    install_missing "${SANITIZE_PACKAGES[@]}" "${WEB_PACKAGES[@]}"
    build
    build_web  # the page the web test (label web) loads; MGPU_WEB_REQUIRED: it may not skip here
    echo "==> running the test suite"
    # slow-doc: the doc blocks too slow for CI (`cmake --build build --target docs_slow` runs them).
    (cd build && MGPU_WEB_REQUIRED=1 xvfb-run -a ctest --output-on-failure -j"$JOBS" --timeout 600 -LE slow-doc)
    sanitize_job
    ;;
  test-portable)
    # Before you stop: doc pages and equivalence tests under other BLAS kernels and thread counts.
    build
    tests/portable_check.sh build
    ;;
  build) build ;;
  web)
    if [ "${2:-}" = "--dist" ] && [ -z "${3:-}" ]; then
      echo "usage: ./dev.sh web --dist DIR" >&2
      exit 2
    fi
    build_web
    if [ "${2:-}" = "--dist" ]; then
      python3 web/serve.py --dist "$3" build-web
    else
      exec python3 web/serve.py build-web --port "${MGPU_WEB_PORT:-8000}"
    fi
    ;;
  docs-update)
    build mgpu grade
    pages=(README.md docs/*.md docs/*/*.md)
    # The pages' dashboard commands write screenshots: they need a (virtual) display.
    xvfb-run -a python3 tests/docs/run_docs.py --build build --all --update "${pages[@]}"
    ;;
  *)
    echo "usage: ./dev.sh demo|test|test-portable|build|web [--dist DIR]|docs-update" >&2
    exit 2
    ;;
esac
