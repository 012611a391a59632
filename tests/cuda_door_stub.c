// cuda_door_stub.c — a libkgcuda.so as another build of kogpt2 would make it, for
// test_server_device: its door answers, but with another ABI number (built with
// STUB_FLAW_ABI) or with one op missing (STUB_FLAW_HOLE). The loader must refuse both and say
// why, before it calls anything in them (the ops here do nothing).
#include <stddef.h>
#include <string.h>

#include "model/backend_lib.h"

static void stub_op(void) {}

static KgBackendOps stub_ops;
static KgBackendLib stub_lib = {.abi = KG_BACKEND_LIB_ABI,
                                .lib_size = sizeof(KgBackendLib),
                                .ops_size = sizeof(KgBackendOps),
                                .ops = &stub_ops};

__attribute__((visibility("default"))) const KgBackendLib *kg_cuda_backend_lib(void) {
    // every op set (backend.h: from alloc to the end only function pointers), then the flaw
    void (*op)(void) = stub_op;
    for (size_t off = offsetof(KgBackendOps, alloc); off + sizeof op <= sizeof stub_ops;
         off += sizeof op)
        memcpy((char *)&stub_ops + off, &op, sizeof op);
    stub_lib.backend_new = (KgBackend * (*)(int, char *)) stub_op;
#if defined(STUB_FLAW_ABI)
    stub_lib.abi = KG_BACKEND_LIB_ABI + 1;
#elif defined(STUB_FLAW_HOLE)
    stub_ops.attention_forward = NULL;
#else
#error "build with STUB_FLAW_ABI or STUB_FLAW_HOLE"
#endif
    return &stub_lib;
}
