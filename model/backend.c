// backend.c — choosing a backend by name (--device on every binary).
#include "backend.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kg.h"

#ifndef KG_HAVE_CUDA
// A build without the CUDA backend (KG_CUDA off, or no nvcc): there is never a GPU.
KgBackend *kg_cuda_backend_new(int device, char *err) {
    (void)device;
    kg_err(err, KG_EUNSUP, "this build has no CUDA backend (configure with -DKG_CUDA=ON)");
    return NULL;
}

int kg_cuda_device_count(char *why, size_t why_size) {
    if (why && why_size) snprintf(why, why_size, "no GPU found (built without CUDA)");
    return 0;
}
#endif

// Parses "cuda" or "cuda:N" into *gpu; 0 when s is neither.
static int parse_cuda(const char *s, int *gpu) {
    if (strncmp(s, "cuda", 4)) return 0;
    if (!s[4]) return *gpu = 0, 1;
    if (s[4] != ':' || !s[5]) return 0;
    char *end;
    long n = strtol(s + 5, &end, 10);
    if (*end || n < 0 || n > 255) return 0;
    *gpu = (int)n;
    return 1;
}

// KG_OK for a device name, else KG_EINVAL with err naming from.
static int device_check(const char *device, const char *from, char *err) {
    int gpu;
    char shown[41];
    if (!strcmp(device, "auto") || !strcmp(device, "cpu") || parse_cuda(device, &gpu)) return KG_OK;
    return kg_err(err, KG_EINVAL, "%s must be auto, cpu, cuda or cuda:N, not '%s'", from,
                  kg_show(shown, sizeof shown, device, strlen(device)));
}

int kg_device_check(const char *device, char *err) { return device_check(device, "--device", err); }

int kg_device_flag(void *field, const char *value, const char *from, char *err) {
    int rc = device_check(value, from, err);
    if (!rc) *(const char **)field = value;
    return rc;
}

// What "auto" says when it falls back to the CPU (cap bytes into out). Where the machine has
// no NVIDIA driver loaded (no /proc/driver/nvidia: no GPU, or a container given none) plainly
// "no GPU": the CUDA runtime then reports "CUDA driver version is insufficient for CUDA runtime
// version", which reads like a fault. Where a driver is there, its words are the news.
static void cpu_fallback_reason(char *out, size_t cap, const char *why, int gpu_failed) {
    int driver = !access("/proc/driver/nvidia/version", F_OK);
    if (gpu_failed || (driver && strstr(why, "(CUDA: ")))
        snprintf(out, cap, "%s; using the CPU", why);
    else if (strstr(why, "built without CUDA"))
        snprintf(out, cap, "built without CUDA; using the CPU");
    else
        snprintf(out, cap, "no GPU; using the CPU");
}

KgBackend *kg_backend_new(const char *device, int threads, FILE *log, char *err) {
    if (kg_device_check(device, err)) return NULL;
    int gpu = 0;
    char why[256] = "";
    KgBackend *be;
    if (parse_cuda(device, &gpu)) {
        if (!(be = kg_cuda_backend_new(gpu, err))) return NULL;
        if (log) fprintf(log, "device: %s (asked for %s)\n", be->ops->name, device);
        return be;
    }
    int gpu_failed = 0;
    if (!strcmp(device, "auto") && kg_cuda_device_count(why, sizeof why) > 0) {
        if ((be = kg_cuda_backend_new(0, err))) {
            if (log) fprintf(log, "device: %s (auto: %s)\n", be->ops->name, why);
            return be;
        }
        snprintf(why, sizeof why, "the GPU could not be used: %s", err);
        gpu_failed = 1;
    }
    if (!(be = kg_cpu_backend_new(threads, err))) return NULL;
    char reason[300];
    cpu_fallback_reason(reason, sizeof reason, why, gpu_failed);
    if (log)
        fprintf(log, "device: %s, %d threads (%s%s)\n", be->ops->name, be->threads,
                strcmp(device, "auto") ? "asked for cpu" : "auto: ",
                strcmp(device, "auto") ? "" : reason);
    return be;
}

void kg_backend_free(KgBackend *be) {
    if (be) be->ops->destroy(be);
}

const char *kg_precision_note(const KgBackend *be) {
    if (be->mixed != KG_BF16 || be->ops->bf16_native) return NULL;
    return "bf16 operands are emulated: this CPU lacks AVX512-BF16, "
           "so matmuls run slower than at f32";
}
