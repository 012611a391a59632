// backend.cu — the CUDA backend's memory, stream, cuBLAS handle, host staging and op table,
// and the door of libkgcuda.so (backend_lib.h) that hands the table out.
//
// Device memory is plain cudaMalloc; every copy and kernel goes on one stream, so the
// graph's calls run in the order it makes them and only the calls that hand results to
// the host (to_host, sum_squares, logits_topk) wait.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
extern "C" {
#include "../backend_lib.h"
}

CudaBackend *cuda_use(KgBackend *be) {
    CudaBackend *cb = (CudaBackend *)be->impl;
    cudaSetDevice(cb->device); // cheap when already current
    return cb;
}

int cuda_check(CudaBackend *cb, cudaError_t e) {
    if (e == cudaSuccess) return 0;
    if (cb->first_error == cudaSuccess) cb->first_error = e;
    return -1;
}

int cuda_check_blas(CudaBackend *cb, cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? 0 : cuda_check(cb, cudaErrorUnknown);
}

unsigned cuda_grid(size_t n, unsigned threads) {
    size_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < CUDA_ELEMWISE_GRID ? (blocks ? blocks : 1) : CUDA_ELEMWISE_GRID);
}

// Makes the staging rings at least bytes long; waits for the stream first, since pending
// copies and kernels may still use the old rings.
static int stage_grow(CudaBackend *cb, size_t bytes) {
    if (bytes <= cb->stage_cap) return 0;
    cudaStreamSynchronize(cb->stream);
    cudaFreeHost(cb->stage_host);
    cudaFree(cb->stage_dev);
    cb->stage_host = cb->stage_dev = NULL;
    cb->stage_cap = cb->stage_off = 0;
    if (cuda_check(cb, cudaMallocHost((void **)&cb->stage_host, bytes)) ||
        cuda_check(cb, cudaMalloc((void **)&cb->stage_dev, bytes)))
        return -1;
    cb->stage_cap = bytes;
    return 0;
}

void *cuda_stage_begin(CudaBackend *cb, size_t bytes) {
    size_t need = (bytes + 255) / 256 * 256; // each upload 256-byte aligned
    if (need > cb->stage_cap && stage_grow(cb, 2 * need)) return NULL;
    if (cb->stage_off + need > cb->stage_cap) { // wrap: every earlier copy must be done
        if (cuda_check(cb, cudaEventSynchronize(cb->stage_done))) return NULL;
        cb->stage_off = 0;
    }
    return cb->stage_host + cb->stage_off;
}

void *cuda_stage_end(CudaBackend *cb, size_t bytes) {
    char *h = cb->stage_host + cb->stage_off, *d = cb->stage_dev + cb->stage_off;
    cb->stage_off += (bytes + 255) / 256 * 256;
    if (cuda_check(cb, cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, cb->stream)) ||
        cuda_check(cb, cudaEventRecord(cb->stage_done, cb->stream)))
        return NULL;
    return d;
}

void *cuda_stage(CudaBackend *cb, const void *host, size_t bytes) {
    void *h = cuda_stage_begin(cb, bytes);
    if (!h) return NULL;
    memcpy(h, host, bytes);
    return cuda_stage_end(cb, bytes);
}

void *cuda_scratch(CudaBackend *cb, size_t bytes) {
    if (bytes <= cb->scratch_cap) return cb->scratch;
    cudaStreamSynchronize(cb->stream); // kernels queued earlier may still read the old one
    cudaFree(cb->scratch);
    cb->scratch = NULL;
    cb->scratch_cap = 0;
    if (cuda_check(cb, cudaMalloc(&cb->scratch, bytes))) return NULL;
    cb->scratch_cap = bytes;
    return cb->scratch;
}

// --- memory ops ---

static void *cuda_alloc(KgBackend *be, size_t bytes) {
    CudaBackend *cb = cuda_use(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) { // 256-byte aligned
        cudaGetLastError(); // an out-of-memory answer is not sticky; clear it
        return NULL;
    }
    if (cuda_check(cb, cudaMemsetAsync(p, 0, bytes, cb->stream))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(KgBackend *be, void *p) {
    CudaBackend *cb = cuda_use(be);
    if (!p) return;
    cudaStreamSynchronize(cb->stream); // queued kernels may still use p
    cudaFree(p);
}

static const void *cuda_weights_map(KgBackend *be, const void *host, size_t bytes) {
    CudaBackend *cb = cuda_use(be);
    if (KG_GROW(cb->weights, &cb->weights_cap, cb->n_weights + 1, NULL)) return NULL;
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 256) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    // on the ops' stream (a pageable cudaMemcpy on the legacy stream may return before its
    // DMA lands, and the non-blocking stream would not wait for it), then waited for: the
    // host copy may be a mapping the caller unmaps right after
    if (cuda_check(cb, cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, cb->stream)) ||
        cuda_check(cb, cudaStreamSynchronize(cb->stream))) {
        cudaFree(d);
        return NULL;
    }
    cb->weights[cb->n_weights++] = d;
    return d;
}

// Host (pageable) -> device. Waits, so that the caller may reuse src at once.
static void cuda_to_device(KgBackend *be, void *dst, const void *src, size_t bytes) {
    CudaBackend *cb = cuda_use(be);
    if (!cuda_check(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream)))
        cuda_check(cb, cudaStreamSynchronize(cb->stream));
}

// Device -> host, after everything queued before it.
static void cuda_to_host(KgBackend *be, void *dst, const void *src, size_t bytes) {
    CudaBackend *cb = cuda_use(be);
    if (!cuda_check(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream)))
        cuda_check(cb, cudaStreamSynchronize(cb->stream));
}

static void cuda_copy_rows(KgBackend *be, float *dst, size_t ld_dst, const float *src,
                           size_t ld_src, size_t rows, size_t cols) {
    CudaBackend *cb = cuda_use(be);
    if (!rows || !cols) return;
    cuda_check(cb,
               cudaMemcpy2DAsync(dst, ld_dst * sizeof(float), src, ld_src * sizeof(float),
                                 cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, cb->stream));
}

static void cuda_zero(KgBackend *be, void *p, size_t bytes) {
    CudaBackend *cb = cuda_use(be);
    if (bytes) cuda_check(cb, cudaMemsetAsync(p, 0, bytes, cb->stream));
}

static void cuda_synchronize(KgBackend *be) {
    CudaBackend *cb = cuda_use(be);
    cuda_check(cb, cudaStreamSynchronize(cb->stream));
}

static int cuda_status(KgBackend *be, char *err) {
    CudaBackend *cb = cuda_use(be);
    cuda_check(cb, cudaGetLastError()); // a launch that failed without a checked call
    // a kernel's fault shows only once its stream is waited for: the callers (the end of a
    // forward or an optimizer step) wait anyway
    cuda_check(cb, cudaStreamSynchronize(cb->stream));
    if (cb->first_error == cudaSuccess) return KG_OK;
    return kg_err(err, KG_EIO, "%s: %s", cb->name, cudaGetErrorString(cb->first_error));
}

static void cuda_destroy(KgBackend *be) {
    CudaBackend *cb = cuda_use(be);
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    for (size_t i = 0; i < cb->n_weights; i++)
        cudaFree(cb->weights[i]);
    free(cb->weights);
    cudaFree(cb->scratch);
    cudaFree(cb->stage_dev);
    cudaFreeHost(cb->stage_host);
    cudaFree(cb->partial_dev);
    cudaFreeHost(cb->partial_host);
    cudaFree(cb->topk_dev);
    cudaFreeHost(cb->topk_host);
    if (cb->stage_done) cudaEventDestroy(cb->stage_done);
    if (cb->lt) cublasLtDestroy(cb->lt);
    if (cb->blas) cublasDestroy(cb->blas);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
    free(be);
}

// The host work beside the ops (backend.h), one task after another on the calling thread:
// the rows it runs read host memory (the logits already copied back), and this host has no
// pool of its own.
static void cuda_host_parallel(KgBackend *be, void (*fn)(void *ctx, size_t i, int thread),
                               void *ctx, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++)
        fn(ctx, i, 0);
}

static const KgBackendOps CUDA_OPS = {
    .name = NULL, // each backend's own (cb->name), set on a copy in kg_cuda_backend_new
    .host_memory = 0,
    .matrices_out_major = 1,
    .quant_weights = 0, // refused at load: gpt2_open names the dtype
    .mixed_backward = 1,
    .bf16_native = 1, // cuBLAS on tensor cores (sm_80 and later)
    .act_dtype = KG_F32,
    .kv_dtypes = 1u << KG_F32, // attention.cu reads f32 rows; bf16 is its next step
    .alloc = cuda_alloc,
    .free = cuda_free,
    .weights_map = cuda_weights_map,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .copy_rows = cuda_copy_rows,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .status = cuda_status,
    .destroy = cuda_destroy,
    .encoder_forward = cuda_encoder_forward,
    .layernorm_forward = cuda_layernorm_forward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_gelu_forward = cuda_matmul_gelu_forward,
    .kv_store = cuda_kv_store,
    .attention_forward = cuda_attention_forward,
    .gelu_forward = cuda_gelu_forward,
    .residual_forward = cuda_residual_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_backward = cuda_matmul_backward,
    .attention_backward = cuda_attention_backward,
    .gelu_backward = cuda_gelu_backward,
    .crossentropy_forward_backward = cuda_crossentropy_forward_backward,
    .adamw_update = cuda_adamw_update,
    .sum_squares = cuda_sum_squares,
    .host_parallel = cuda_host_parallel,
    .logits_topk = cuda_logits_topk,
};

// The backend and its op table in one allocation: the table carries this GPU's name.
typedef struct {
    KgBackend be;
    KgBackendOps ops;
} CudaBackendBox;

// KgBackendLib's backend_new (kg_cuda_backend_new's contract, backend.h); the loader has
// already found the GPU through the driver, the runtime is asked again in its own words.
static KgBackend *cuda_backend_new(int device, char *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return kg_err(err, KG_EIO, "cuda backend: no GPU found (CUDA: %s)", cudaGetErrorString(e)),
               (KgBackend *)NULL;
    if (device < 0 || device >= n)
        return kg_err(err, KG_EIO, "cuda backend: no GPU %d (%d found)", device, n),
               (KgBackend *)NULL;
    cudaDeviceProp p;
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&p, device) != cudaSuccess)
        return kg_err(err, KG_EIO, "cuda backend: GPU %d: %s", device,
                      cudaGetErrorString(cudaGetLastError())),
               (KgBackend *)NULL;
    CudaBackendBox *box = (CudaBackendBox *)calloc(1, sizeof *box);
    CudaBackend *cb = (CudaBackend *)calloc(1, sizeof *cb);
    if (!box || !cb) {
        free(box);
        free(cb);
        return kg_err(err, KG_ENOMEM, "cuda backend: out of memory"), (KgBackend *)NULL;
    }
    cb->device = device;
    snprintf(cb->name, sizeof cb->name, "cuda:%d %.120s", device, p.name);
    box->ops = CUDA_OPS;
    box->ops.name = cb->name;
    box->be.ops = &box->ops;
    box->be.threads = 1;
    box->be.mixed = KG_F32;
    box->be.kv_dtype = KG_F32;
    box->be.impl = cb;
    int rc = KG_EIO;
    const char *what = "stream";
    if (cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking) != cudaSuccess) goto fail;
    what = "cuBLAS";
    if (cublasCreate(&cb->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasLtCreate(&cb->lt) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    // plain f32 (no TF32): matches the CPU to ~1e-6; mixed precision is asked for explicitly
    if (cublasSetStream(cb->blas, cb->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    what = "event";
    if (cudaEventCreateWithFlags(&cb->stage_done, cudaEventDisableTiming) != cudaSuccess) goto fail;
    rc = KG_ENOMEM;
    what = "memory";
    if (stage_grow(cb, CUDA_STAGE_BYTES) ||
        cudaMalloc((void **)&cb->partial_dev, CUDA_SUM_BLOCKS * sizeof(double)) != cudaSuccess ||
        cudaMallocHost((void **)&cb->partial_host, CUDA_SUM_BLOCKS * sizeof(double)) !=
            cudaSuccess ||
        cudaMalloc(&cb->topk_dev, CUDA_TOPK_MAX * sizeof(KgCandidate) + 64) != cudaSuccess ||
        cudaMallocHost(&cb->topk_host, CUDA_TOPK_MAX * sizeof(KgCandidate) + 64) != cudaSuccess)
        goto fail;
    return &box->be;
fail:
    kg_err(err, rc, "cuda backend: GPU %d (%s): cannot create the %s: %s", device, p.name, what,
           cudaGetErrorString(cudaGetLastError()));
    cuda_destroy(&box->be);
    return NULL;
}

static const KgBackendLib CUDA_LIB = {
    .abi = KG_BACKEND_LIB_ABI,
    .lib_size = sizeof(KgBackendLib),
    .ops_size = sizeof(KgBackendOps),
    .ops = &CUDA_OPS,
    .backend_new = cuda_backend_new,
};

// The library's one exported symbol (KG_CUDA_LIB_SYMBOL; everything else is hidden).
extern "C" __attribute__((visibility("default"))) const KgBackendLib *kg_cuda_backend_lib(void) {
    return &CUDA_LIB;
}
