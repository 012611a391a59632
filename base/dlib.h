// dlib.h — a shared library that ships beside the program and is opened only when it is
// needed: the CUDA backend (libkgcuda.so, model/cuda_load.c) and the trainer's NCCL
// all-reduce (libkgnccl.so, train/dist_device.c). A program that runs on the CPU then never
// maps the CUDA runtime, cuBLAS or NCCL.
#ifndef KG_DLIB_H
#define KG_DLIB_H

#include <stddef.h>

// Opens the shared library `name` from the running program's directory (kg_exe_dir: build/
// in a build tree, PREFIX/bin installed; no search path, so the file named in an error is the
// one tried), with every symbol bound at once (RTLD_NOW: a missing dependency such as
// libcublas fails here, not at a first call) and kept private to it (RTLD_LOCAL). The path
// tried goes into path (cap bytes). Returns the handle, or NULL with err filled with the path
// and the dynamic linker's reason (dlerror). Callers keep the handle for the process's life:
// the CUDA runtime registers its kernels at load and is not made to be unloaded.
// Thread safety: safe from any thread (dlerror's text is per thread); dlopen serializes.
void *kg_dlib_open(const char *name, char *path, size_t cap, char *err);

// The address of symbol sym in the library h opened from path, or NULL with err filled
// ("PATH has no symbol SYM"): a file that is not the library it claims to be.
void *kg_dlib_symbol(void *h, const char *path, const char *sym, char *err);

#endif
