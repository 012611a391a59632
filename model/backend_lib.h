// backend_lib.h — the door of a backend built as a shared library: the CUDA backend
// (model/cuda/) is libkgcuda.so, installed beside the programs and opened by cuda_load.c only
// when a GPU is asked for, so that a program on the CPU never maps the CUDA runtime or cuBLAS.
//
// The library exports one symbol, KG_CUDA_LIB_SYMBOL, a KgBackendLibDoor: it returns the
// library's KgBackendLib, whose op table is the backend's whole interface. The loader checks
// the ABI and the sizes the library was built with against its own before it reads further,
// and that no op is missing, so a library from another build is refused, never called.
#ifndef BACKEND_LIB_H
#define BACKEND_LIB_H

#include <stddef.h>

#include "backend.h"

// Raised when KgBackendLib's or KgBackendOps's meaning changes in a way their sizes do not
// show (an op's arguments, an op replaced by another of the same size).
#define KG_BACKEND_LIB_ABI 1

#define KG_CUDA_LIB_NAME   "libkgcuda.so"
#define KG_CUDA_LIB_SYMBOL "kg_cuda_backend_lib"

typedef struct {
    int abi;         // KG_BACKEND_LIB_ABI as the library was built (these three fields first,
    size_t lib_size; // in every version, so a loader can read them before trusting the rest)
    size_t ops_size; // sizeof(KgBackendOps) there
    // Every op; name NULL (each backend made by backend_new carries a copy naming its GPU).
    const KgBackendOps *ops;
    // A backend on GPU `device`, as kg_cuda_backend_new (backend.h) promises.
    KgBackend *(*backend_new)(int device, char *err);
} KgBackendLib;

// The type of KG_CUDA_LIB_SYMBOL: the library's door, static for the process's life.
typedef const KgBackendLib *(*KgBackendLibDoor)(void);

// Opens libkgcuda.so from beside the program once per process (later calls return the same
// answer, failure included) and checks its door. KG_OK with *lib; KG_EIO with err naming the
// file and why (the dynamic linker's words for a missing or broken file or a missing CUDA
// library, a missing door, another build's ABI, a missing op). Needs no GPU: only the
// library's ops need one. Maps the CUDA runtime and cuBLAS. Thread-safe.
int kg_cuda_lib_load(const KgBackendLib **lib, char *err);

#endif
