# Deployment (issues 6 and 29). tests/test_deploy_fleet.sh runs docker/nginx.conf (nginx -t, then
# real nginx) in front of 3 kogpt2d on 127.0.0.1 under load through a rolling restart (0 failed
# requests) and a SIGKILL (reported), checks docker/k8s against a live /metrics, and nginx's own
# 429 and 502 (JSON with Retry-After). Without nginx (Debian's nginx package), python3, curl or
# kogpt2d it exits 77.
# The manifests (docker/k8s: kustomize base, overlays/gpu, monitoring), each test skipped (77)
# without its tool:
#   test_deploy_manifests  python3 + PyYAML: rendered (kubectl kustomize where it has kustomize
#       >= 4, and tests/deploy_k8s.py's own renderer, compared), the workloads, the restricted
#       Pod Security Standard, the HPAs' adapter metrics, the monitoring objects, every metric
#       name against server/metrics.c; both Dockerfiles statically
#   test_deploy_schemas    + node and tests/deploy's npm packages: every rendered object against
#       the Kubernetes / Prometheus Operator schemas (types, required, formats) and their
#       TypeScript types (no unknown field), the Grafana dashboard against Grafana's types, the
#       training MPIJob (docker/k8s/training) against the Kubeflow MPI Operator's CRD schema and
#       admission rules (tests/deploy/mpijob.mjs) and its pod templates as Kubernetes'
#   test_deploy_rules      + promtool (Debian's prometheus): the alerts (check rules, and their
#       unit tests, tests/deploy_alerts_test.yaml), the adapter rules' and the dashboard's queries
# docker_build runs docker/build.sh (the Dockerfile's build steps) into a prefix in the build
# tree and smoke-tests the installed daemon (a CPU build: build.sh passes -DKG_CUDA=OFF unless
# KG_CUDA=ON). test_deploy_build_cuda (only when KG_CUDA is on) runs KG_CUDA=ON docker/build.sh,
# what docker/stage_cuda.sh runs for Dockerfile.cuda (scripts/test.sh stages its install).
# Run: ctest -L deploy. The fleet in containers: tests/test_deploy_fleet.sh containers (CI, after
# docker/test_images.sh), or ctest -L containers in a tree configured with -DKG_CONTAINER_TESTS=ON.
# (docker/check_debootstrap.sh, the package-list proof in a fresh Debian root, is not a ctest:
# it needs root, the Debian mirror and ~10 min.)
set(_deploy_env "KG_SHARED_DIR=${KG_SHARED_DIR};KG_SOURCE_DIR=${CMAKE_SOURCE_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR};KG_PYTHON=${PYTHON3}")
if(PYTHON3)
  foreach(_what manifests schemas rules)
    set(_cmd ${_what})
    if(_what STREQUAL "manifests")
      set(_cmd static)
    endif()
    add_test(NAME test_deploy_${_what}
      COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/deploy_fleet.py ${_cmd} ${CMAKE_SOURCE_DIR}/docker)
    set_tests_properties(test_deploy_${_what} PROPERTIES LABELS "deploy" TIMEOUT 120
      SKIP_RETURN_CODE 77)
  endforeach()
endif()
if(TARGET kogpt2d)
  add_test(NAME test_deploy_fleet COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy_fleet.sh)
  set_tests_properties(test_deploy_fleet PROPERTIES LABELS "deploy" SKIP_RETURN_CODE 77
    TIMEOUT 180 RUN_SERIAL TRUE ENVIRONMENT "${_deploy_env}")
  # The same fleet as podman containers of the image docker/test_images.sh builds (issue 19):
  # scripts/test.sh runs it after building the image; in ctest only when asked for
  # (-DKG_CONTAINER_TESTS=ON; root, podman and the image kogpt2d:latest, else skipped), so
  # that a plain ctest never tests an image older than the tree.
  if(KG_CONTAINER_TESTS)
    add_test(NAME test_deploy_fleet_containers
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy_fleet.sh containers)
    set_tests_properties(test_deploy_fleet_containers PROPERTIES LABELS "deploy;containers"
      SKIP_RETURN_CODE 77 TIMEOUT 180 RUN_SERIAL TRUE ENVIRONMENT "${_deploy_env}")
  endif()
  add_test(NAME test_deploy_build
    COMMAND bash ${CMAKE_SOURCE_DIR}/docker/build.sh ${CMAKE_BINARY_DIR}/deploy-prefix)
  set_tests_properties(test_deploy_build PROPERTIES LABELS "deploy" TIMEOUT 900
    ENVIRONMENT "${_deploy_env};KG_CUDA=OFF;KG_TRAIN=OFF;KG_DOCKER_BUILD_DIR=${CMAKE_BINARY_DIR}/deploy-build")
  # The CUDA image's build steps (docker/Dockerfile.cuda), where this build has CUDA on.
  if(KG_CUDA)
    # one GPU architecture (the main build compiles every kernel for both, under -Werror): the
    # steps are what this test checks, and nvcc's second pass doubled its time
    add_test(NAME test_deploy_build_cuda
      COMMAND bash ${CMAKE_SOURCE_DIR}/docker/build.sh ${CMAKE_BINARY_DIR}/deploy-prefix-cuda
        -DCMAKE_CUDA_ARCHITECTURES=90)
    set_tests_properties(test_deploy_build_cuda PROPERTIES LABELS "deploy;cuda" TIMEOUT 1800
      ENVIRONMENT "${_deploy_env};KG_CUDA=ON;KG_TRAIN=ON;KG_DOCKER_BUILD_DIR=${CMAKE_BINARY_DIR}/deploy-build-cuda")
  endif()
endif()
