# Deployment (issue 6): tests/test_deploy_fleet.sh runs docker/nginx.conf (nginx -t, then real
# nginx) in front of 3 kogpt2d on 127.0.0.1 under load through a rolling restart (0 failed
# requests) and a SIGKILL (reported), and checks docker/k8s/*.yaml and the HPA's metric against
# a live /metrics. Without nginx (Debian's nginx package), python3, curl or kogpt2d it exits 77.
# docker_build runs docker/build.sh (the Dockerfile's build steps) into a prefix in the build
# tree and smoke-tests the installed daemon. Run: ctest -L deploy
set(_deploy_env "KG_SHARED_DIR=${KG_SHARED_DIR};KG_SOURCE_DIR=${CMAKE_SOURCE_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR};KG_PYTHON=${PYTHON3}")
if(TARGET kogpt2d)
  add_test(NAME test_deploy_fleet COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy_fleet.sh)
  set_tests_properties(test_deploy_fleet PROPERTIES LABELS "deploy" SKIP_RETURN_CODE 77
    TIMEOUT 180 RUN_SERIAL TRUE ENVIRONMENT "${_deploy_env}")
  add_test(NAME test_deploy_build
    COMMAND bash ${CMAKE_SOURCE_DIR}/docker/build.sh ${CMAKE_BINARY_DIR}/deploy-prefix)
  set_tests_properties(test_deploy_build PROPERTIES LABELS "deploy" TIMEOUT 900
    ENVIRONMENT "${_deploy_env};KG_DOCKER_BUILD_DIR=${CMAKE_BINARY_DIR}/deploy-build")
endif()
