// elementwise.c — GELU and the residual add, over flat arrays of n floats.
// The scalar math is kgmath.h's (shared with the CUDA kernels); the loops vectorize.
// Part of ops.c (compiled once per instruction set).

#define ELEMENTWISE_CHUNK 16384 // floats per task

typedef struct {
    float *out;
    const float *a, *b;
    size_t n;
    Gpt2Gelu kind;
} ElementwiseJob;

static size_t chunk_end(const ElementwiseJob *j, size_t t) {
    return (t + 1) * ELEMENTWISE_CHUNK < j->n ? (t + 1) * ELEMENTWISE_CHUNK : j->n;
}

static void gelu_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const ElementwiseJob *j = ctx;
    size_t end = chunk_end(j, t);
    if (j->kind == GPT2_GELU_ERF)
        for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
            j->out[i] = kg_gelu_erf(j->a[i]);
    else
        for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
            j->out[i] = kg_gelu_tanh(j->a[i]);
}

static void residual_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const ElementwiseJob *j = ctx;
    size_t end = chunk_end(j, t);
    for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
        j->out[i] = j->a[i] + j->b[i];
}

static void cpu_gelu_forward(KgBackend *be, float *out, const float *inp, size_t n, Gpt2Gelu kind) {
    ElementwiseJob j = {out, inp, NULL, n, kind};
    cpu_pool_run(cpu_of(be)->pool, gelu_task, &j, (n + ELEMENTWISE_CHUNK - 1) / ELEMENTWISE_CHUNK);
}

static void cpu_residual_forward(KgBackend *be, float *out, const float *a, const float *b,
                                 size_t n) {
    ElementwiseJob j = {out, a, b, n, GPT2_GELU_TANH};
    cpu_pool_run(cpu_of(be)->pool, residual_task, &j,
                 (n + ELEMENTWISE_CHUNK - 1) / ELEMENTWISE_CHUNK);
}
