// test_cuda_load.c — the CUDA backend as a library opened only when asked for (issue 34
// item 6): the GPU probe maps neither the CUDA runtime nor cuBLAS; libkgcuda.so loads without
// a GPU (dlopen needs only its libraries) and hands out a complete op table through its one
// door; what it maps is what the loader opened; a CUDA backend asked for where there is no GPU
// is a clear error, and where there is one it works.
//
// What is mapped comes from /proc/self/maps (the kernel's list of this process's mappings).
// Runs in every CUDA build, GPU or not (ctest label gpu).
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"
#include "model/backend_lib.h"

// 1 when a file whose name contains `name` is mapped into this process.
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    REQUIRE(f, "cannot read /proc/self/maps");
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

// Every op of the table by name (an op added to backend.h and not here fails the count).
#define OP(field)                                                                                  \
    { #field, (const void *)(ops->field) }
static void check_ops_complete(const KgBackendOps *ops) {
    struct {
        const char *name;
        const void *fn;
    } list[] = {
        OP(alloc),
        OP(free),
        OP(weights_map),
        OP(to_device),
        OP(to_host),
        OP(copy_rows),
        OP(zero),
        OP(synchronize),
        OP(status),
        OP(destroy),
        OP(encoder_forward),
        OP(layernorm_forward),
        OP(matmul_forward),
        OP(matmul_gelu_forward),
        OP(kv_store),
        OP(attention_forward),
        OP(gelu_forward),
        OP(residual_forward),
        OP(encoder_backward),
        OP(layernorm_backward),
        OP(matmul_backward),
        OP(attention_backward),
        OP(gelu_backward),
        OP(crossentropy_forward_backward),
        OP(adamw_update),
        OP(sum_squares),
        OP(host_parallel),
        OP(logits_topk),
    };
    size_t n = sizeof list / sizeof list[0];
    // backend.h: from alloc to the end of KgBackendOps only function pointers
    size_t slots = (sizeof *ops - offsetof(KgBackendOps, alloc)) / sizeof(void (*)(void));
    CHECK_MSG(slots == n, "KgBackendOps has %zu ops, this test lists %zu", slots, n);
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(list[i].fn != NULL, "op %s is NULL", list[i].name);
    printf("  %zu ops, all set\n", n);
}

int main(void) {
    static const char *const HEAVY[] = {"libcudart", "libcublas", KG_CUDA_LIB_NAME};
    for (size_t i = 0; i < 3; i++)
        CHECK_MSG(!mapped(HEAVY[i]), "%s is mapped before anything asked for a GPU", HEAVY[i]);

    // the probe: the driver only
    char why[256];
    int n_gpu = kg_cuda_device_count(why, sizeof why);
    printf("probe: %d GPU(s): %s\n", n_gpu, why);
    CHECK_MSG(n_gpu >= 0 && why[0], "probe: %d, '%s'", n_gpu, why);
    CHECK_MSG(n_gpu > 0 || !strncmp(why, "no GPU found", 12), "no GPU but: '%s'", why);
    for (size_t i = 0; i < 3; i++)
        CHECK_MSG(!mapped(HEAVY[i]), "the GPU probe mapped %s", HEAVY[i]);

    // the library: no GPU needed to open it and read its door
    const KgBackendLib *lib = NULL;
    char err[KG_ERRLEN] = "";
    REQUIRE(kg_cuda_lib_load(&lib, err) == KG_OK && lib, "%s", err);
    CHECK(lib->abi == KG_BACKEND_LIB_ABI);
    CHECK(lib->lib_size == sizeof(KgBackendLib) && lib->ops_size == sizeof(KgBackendOps));
    CHECK(lib->backend_new != NULL);
    REQUIRE(lib->ops, "no op table");
    check_ops_complete(lib->ops);
    CHECK_MSG(!lib->ops->host_memory && lib->ops->matrices_out_major,
              "CUDA's table: host_memory %d, matrices_out_major %d", lib->ops->host_memory,
              lib->ops->matrices_out_major);
    for (size_t i = 0; i < 3; i++)
        CHECK_MSG(mapped(HEAVY[i]), "%s is not mapped after the library was loaded", HEAVY[i]);
    const KgBackendLib *again = NULL;
    CHECK(kg_cuda_lib_load(&again, err) == KG_OK && again == lib); // opened once

    // a backend: an error naming the cause without a GPU, a working one with
    KgBackend *be = kg_cuda_backend_new(0, err);
    if (n_gpu == 0) {
        CHECK_MSG(!be && strstr(err, "cuda backend: no GPU found"), "no GPU: '%s'", err);
        printf("cuda:0 without a GPU: %s\n", err);
    } else {
        REQUIRE(be, "%s", err);
        CHECK_MSG(!strncmp(be->ops->name, "cuda:0", 6), "name '%s'", be->ops->name);
        CHECK(be->ops->logits_topk == lib->ops->logits_topk);
        void *p = be->ops->alloc(be, 1024);
        CHECK(p != NULL);
        be->ops->free(be, p);
        CHECK(be->ops->status(be, err) == KG_OK);
        printf("cuda:0: %s\n", be->ops->name);
        kg_backend_free(be);
    }
    char bad[KG_ERRLEN];
    CHECK(!kg_cuda_backend_new(n_gpu + 1, bad) && strstr(bad, "cuda backend"));
    printf("cuda:%d: %s\n", n_gpu + 1, bad);
    return check_report();
}
