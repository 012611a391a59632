#!/usr/bin/env bash
# Runs every test: formatting, a -Werror build with the whole ctest suite (the CUDA backend
# is built and linked when nvcc is found; its GPU tests skip without a GPU), then the suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded code (the CPU thread
# pool, the kernels on it, the engine's scheduler, training's accumulation) under
# ThreadSanitizer, a minute of each libFuzzer target, then valgrind over the command-line
# paths, and last the CPU image, built with podman and tested (docker/test_images.sh), with
# the fleet test in containers and the README's first command run verbatim as root in a fresh
# debian:12 container (docker/test_readme.sh). Tests that need ../shared (data) or a
# reference implementation that is not installed are reported as skipped, never as passed.
#   scripts/test.sh            everything
#   scripts/test.sh quick      the -Werror build and ctest only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== clang-format"
files=$(git ls-files '*.c' '*.h' '*.cc' '*.cu' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
clang-format --dry-run -Werror $files
echo "clang-format: $(echo "$files" | wc -w) files clean"

echo "== build (-Wall -Wextra -Werror) and ctest"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKG_WERROR=ON >/dev/null
cmake --build build
(cd build && ctest --output-on-failure -j "$jobs")
[ "${1:-}" = quick ] && exit 0

echo "== ASan + UBSan build and ctest"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKG_WERROR=ON \
    -DKG_SANITIZE=address,undefined >/dev/null
cmake --build build-asan
# the full-size (KoGPT2-base) parity cases are exercised by the release run above; under
# the sanitizers the small shapes cover the same code paths at a fraction of the time
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 KG_POOL_LOOPS=2000000 \
    ctest --output-on-failure -j "$jobs" -E 'kogpt2_(f32|f16|bf16)')

echo "== ThreadSanitizer build: the thread pool, the CPU kernels, the scheduler, training, HTTP"
tsan_tests='test_cpu_pool test_cpu_matmul test_cpu_matmul_q test_server_sched test_model_sampler test_train_accum test_server_http'
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKG_WERROR=ON \
    -DKG_SANITIZE=thread >/dev/null
# shellcheck disable=SC2086 # one target per word
cmake --build build-tsan --target $tsan_tests
# OpenBLAS's own threads are not instrumented: one thread, so that TSan sees every access
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OPENBLAS_NUM_THREADS=1 \
    KG_POOL_LOOPS=200000 ctest --output-on-failure -R "^($(echo $tsan_tests | tr ' ' '|'))\$")

echo "== libFuzzer targets, 60 s each (scripts/fuzz.sh; crashes in build-fuzz/crashes/)"
scripts/fuzz.sh 60

echo "== valgrind memcheck over the command line"
scripts/valgrind.sh build

echo "== containers: docker/test_images.sh (podman build, the image as an operator runs it), the fleet as containers,"
echo "   docker/test_readme.sh (the README's first command, verbatim, as root in a fresh debian:12),"
echo "   docker/test_images.sh cuda (the CUDA image, on this machine's CPU when it has no GPU)"
# 77: podman cannot run containers here (not root, no user namespaces, ...): skipped, said so
rc=0; docker/test_images.sh || rc=$?
if [ $rc -eq 77 ]; then
    echo "containers: SKIPPED (see the SKIP line above)"
elif [ $rc -ne 0 ]; then
    exit $rc
else
    tests/test_deploy_fleet.sh containers
    # ~70 s on 2 cores: apt-get, libmicrohttpd, the build, a request, SIGTERM; 77 is a skip
    rc=0; docker/test_readme.sh || rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || exit $rc
    # The CUDA image from the install ctest's test_deploy_build_cuda made above (the same
    # build docker/stage_cuda.sh would run; ~1.5 min to stage, build and test, none to
    # compile); without it (no CUDA in build/) stage_cuda.sh builds; 77: no CUDA toolkit
    cuda_prefix=()
    [ -x build/deploy-prefix-cuda/bin/kogpt2d ] && cuda_prefix=(KG_CUDA_PREFIX="$PWD/build/deploy-prefix-cuda")
    rc=0; env "${cuda_prefix[@]}" docker/test_images.sh cuda || rc=$?
    [ $rc -eq 77 ] && echo "containers: the CUDA image SKIPPED (see the SKIP line above)"
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || exit $rc
fi
