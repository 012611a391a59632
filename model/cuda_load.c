// cuda_load.c — the CUDA backend from libkgcuda.so, opened only when a GPU is asked for
// (backend_lib.h), and the cheap probe that tells --device auto whether there is a GPU at all.
//
// The probe asks the NVIDIA driver itself (libcuda.so.1: cuInit, cuDeviceGetCount), not the
// CUDA runtime: the driver's library is there only where a driver is installed (in a
// container, only where the NVIDIA Container Toolkit mounted it: a GPU was given), so on a
// machine without a GPU the probe is one failed dlopen and nothing is mapped, where asking
// cudart would map it and cuBLAS (an idle kogpt2d: 195 MiB of RSS against 44) to learn the
// same. It also works where GPUs have no /dev/nvidia* nodes (WSL2). Built only with KG_CUDA
// (backend.c has the stubs).
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_lib.h"
#include "base/dlib.h"
#include "base/kg.h"

// The few driver-API entry points the probe calls (cuda.h's types, written out: this file
// needs no CUDA header). CUresult 0 is CUDA_SUCCESS.
typedef int (*CuInit)(unsigned flags);
typedef int (*CuDeviceGetCount)(int *count);
typedef int (*CuDeviceGet)(int *device, int ordinal);
typedef int (*CuDeviceGetName)(char *name, int len, int device);
typedef int (*CuDeviceTotalMem)(size_t *bytes, int device);
typedef int (*CuDeviceGetAttribute)(int *value, int attrib, int device);
typedef int (*CuGetErrorString)(int result, const char **text);

#define CU_ATTR_CC_MAJOR 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
#define CU_ATTR_CC_MINOR 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

// What this process learned, once each, under one lock: kogpt2d makes a backend per model and
// the trainer asks for the GPU count before it makes one.
static struct {
    pthread_mutex_t lock;
    int probed, n_gpu;
    char why[256]; // the probe's one-line description (kg_cuda_device_count)
    int loaded;    // 1: load_rc and lib hold the answer of the one attempt to load
    int load_rc;
    const KgBackendLib *lib;
    char load_err[KG_ERRLEN];
} g_cuda = {.lock = PTHREAD_MUTEX_INITIALIZER};

// cuGetErrorString's text for r (a driver too old to have it: the number).
static const char *cu_error_text(CuGetErrorString text_of, int r) {
    static __thread char num[32];
    const char *s = NULL;
    if (text_of && text_of(r, &s) == 0 && s) return s;
    snprintf(num, sizeof num, "CUresult %d", r);
    return num;
}

// GPUs the driver sees, with a description of GPU 0 or why there are none in why. Leaves
// libcuda.so.1 open once cuInit ran (the driver may have started threads; the runtime opens
// the same library later).
static int probe_driver(char *why, size_t cap) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "no GPU found (no NVIDIA driver: %s)", e ? e : "libcuda.so.1");
        return 0;
    }
    CuInit init = (CuInit)dlsym(h, "cuInit");
    CuDeviceGetCount get_count = (CuDeviceGetCount)dlsym(h, "cuDeviceGetCount");
    CuGetErrorString text_of = (CuGetErrorString)dlsym(h, "cuGetErrorString");
    if (!init || !get_count) {
        snprintf(why, cap, "no GPU found (CUDA: libcuda.so.1 has no cuInit or cuDeviceGetCount)");
        return 0;
    }
    int n = 0, r = init(0);
    if (r == 0) r = get_count(&n);
    if (r != 0 || n <= 0) {
        // the driver's words, e.g. "no CUDA-capable device is detected"
        snprintf(why, cap, "no GPU found%s%s%s", r ? " (CUDA: " : "",
                 r ? cu_error_text(text_of, r) : "", r ? ")" : "");
        return 0;
    }
    CuDeviceGet get = (CuDeviceGet)dlsym(h, "cuDeviceGet");
    CuDeviceGetName get_name = (CuDeviceGetName)dlsym(h, "cuDeviceGetName");
    CuDeviceTotalMem total_mem = (CuDeviceTotalMem)dlsym(h, "cuDeviceTotalMem_v2");
    CuDeviceGetAttribute attr = (CuDeviceGetAttribute)dlsym(h, "cuDeviceGetAttribute");
    char name[128] = "?";
    size_t bytes = 0;
    int dev = 0, major = 0, minor = 0;
    if (get && get(&dev, 0) == 0) {
        if (get_name) get_name(name, sizeof name, dev);
        if (total_mem) total_mem(&bytes, dev);
        if (attr) {
            attr(&major, CU_ATTR_CC_MAJOR, dev);
            attr(&minor, CU_ATTR_CC_MINOR, dev);
        }
    }
    snprintf(why, cap, "%d GPU%s, cuda:0 %s, %.0f GiB, sm_%d%d", n, n > 1 ? "s" : "", name,
             (double)bytes / (1 << 30), major, minor);
    return n;
}

int kg_cuda_device_count(char *why, size_t why_size) {
    pthread_mutex_lock(&g_cuda.lock);
    if (!g_cuda.probed) {
        g_cuda.n_gpu = probe_driver(g_cuda.why, sizeof g_cuda.why);
        g_cuda.probed = 1;
    }
    int n = g_cuda.n_gpu;
    if (why && why_size) snprintf(why, why_size, "%s", g_cuda.why);
    pthread_mutex_unlock(&g_cuda.lock);
    return n;
}

// The ops of KgBackendOps: the function pointers from alloc to its end (backend.h), all of one
// pointer size.
#define N_OPS ((sizeof(KgBackendOps) - offsetof(KgBackendOps, alloc)) / sizeof(void (*)(void)))

// 0 when the library's table has every op, else the 1-based number of the first missing one.
static size_t first_missing_op(const KgBackendOps *ops) {
    const char *p = (const char *)ops + offsetof(KgBackendOps, alloc);
    for (size_t i = 0; i < N_OPS; i++) {
        void (*op)(void);
        memcpy(&op, p + i * sizeof op, sizeof op);
        if (!op) return i + 1;
    }
    return 0;
}

// The one attempt: open the library, find its door, check what the door returns.
static int load_lib(const KgBackendLib **out, char *err) {
    char path[PATH_MAX];
    void *h = kg_dlib_open(KG_CUDA_LIB_NAME, path, sizeof path, err);
    if (!h) return KG_EIO;
    KgBackendLibDoor door = (KgBackendLibDoor)kg_dlib_symbol(h, path, KG_CUDA_LIB_SYMBOL, err);
    if (!door) return KG_EIO;
    const KgBackendLib *lib = door();
    if (!lib || lib->abi != KG_BACKEND_LIB_ABI || lib->lib_size != sizeof *lib ||
        lib->ops_size != sizeof(KgBackendOps))
        return kg_err(err, KG_EIO,
                      "%s is from another build of kogpt2 (door ABI %d, %zu + %zu bytes; this "
                      "program: %d, %zu + %zu): install the one built with this program",
                      path, lib ? lib->abi : -1, lib ? lib->lib_size : 0, lib ? lib->ops_size : 0,
                      KG_BACKEND_LIB_ABI, sizeof *lib, sizeof(KgBackendOps));
    size_t missing = lib->ops && lib->backend_new ? first_missing_op(lib->ops) : 1;
    if (missing)
        return kg_err(err, KG_EIO, "%s: its op table is incomplete (op %zu of %zu is missing)",
                      path, missing, N_OPS);
    *out = lib;
    return KG_OK;
}

int kg_cuda_lib_load(const KgBackendLib **lib, char *err) {
    pthread_mutex_lock(&g_cuda.lock);
    if (!g_cuda.loaded) {
        g_cuda.load_rc = load_lib(&g_cuda.lib, g_cuda.load_err);
        g_cuda.loaded = 1;
    }
    int rc = g_cuda.load_rc;
    *lib = g_cuda.lib;
    if (rc) kg_err(err, rc, "%s", g_cuda.load_err);
    pthread_mutex_unlock(&g_cuda.lock);
    return rc;
}

KgBackend *kg_cuda_backend_new(int device, char *err) {
    // the library first: a missing or broken one is named even on a machine without a GPU
    const KgBackendLib *lib;
    char why[KG_ERRLEN];
    if (kg_cuda_lib_load(&lib, why)) {
        kg_err(err, KG_EIO, "cuda backend: %s (or use --device cpu)", why);
        return NULL;
    }
    int n = kg_cuda_device_count(why, sizeof why);
    if (n == 0) {
        kg_err(err, KG_EIO, "cuda backend: %s", why);
        return NULL;
    }
    if (device < 0 || device >= n) {
        kg_err(err, KG_EIO, "cuda backend: no GPU %d (%d found)", device, n);
        return NULL;
    }
    return lib->backend_new(device, err);
}
