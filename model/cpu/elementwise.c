// elementwise.c — the MLP's activation (GELU, ReLU) and the residual add, over flat arrays of n
// floats. The scalar math is kgmath.h's (shared with the CUDA kernels); the loops vectorize. Part
// of ops.c (compiled once per instruction set).

#define ELEMENTWISE_CHUNK 16384 // floats per task

typedef struct {
    float *out;
    const float *a, *b;
    size_t n;
    Gpt2Gelu kind;
} ElementwiseJob;

#define CROSSENTROPY_ROWS_PER_TASK 4

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
    else if (j->kind == GPT2_RELU)
        for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
            j->out[i] = kg_relu(j->a[i]);
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

// out += gelu'(a) * b
static void gelu_backward_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const ElementwiseJob *j = ctx;
    size_t end = chunk_end(j, t);
    if (j->kind == GPT2_GELU_ERF)
        for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
            j->out[i] += kg_gelu_erf_grad(j->a[i]) * j->b[i];
    else if (j->kind == GPT2_RELU)
        for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
            j->out[i] += kg_relu_grad(j->a[i]) * j->b[i];
    else
        for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
            j->out[i] += kg_gelu_tanh_grad(j->a[i]) * j->b[i];
}

static void cpu_gelu_backward(KgBackend *be, float *dinp, const float *inp, const float *dout,
                              size_t n, Gpt2Gelu kind) {
    ElementwiseJob j = {dinp, inp, dout, n, kind};
    cpu_pool_run(cpu_of(be)->pool, gelu_backward_task, &j,
                 (n + ELEMENTWISE_CHUNK - 1) / ELEMENTWISE_CHUNK);
}

typedef struct {
    float *losses, *logits;
    const int *targets;
    size_t N, V;
    float dscale;
} CrossentropyJob;

// One row: loss = logsumexp - logit[target]; the row becomes (softmax - onehot) * dscale.
static void crossentropy_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const CrossentropyJob *j = ctx;
    size_t n1 =
        (t + 1) * CROSSENTROPY_ROWS_PER_TASK < j->N ? (t + 1) * CROSSENTROPY_ROWS_PER_TASK : j->N;
    for (size_t n = t * CROSSENTROPY_ROWS_PER_TASK; n < n1; n++) {
        float *x = j->logits + n * j->V;
        int target = j->targets[n];
        if (target < 0) {
            j->losses[n] = 0.0f;
            memset(x, 0, j->V * sizeof *x);
            continue;
        }
        float m = -INFINITY;
        for (size_t i = 0; i < j->V; i++)
            m = x[i] > m ? x[i] : m;
        float zt = x[(size_t)target] - m;
        double sum = 0.0; // 51,200 terms: a float sum would lose ~1e-5 of the loss
        for (size_t i = 0; i < j->V; i++) {
            x[i] = kg_expf(x[i] - m); // x now holds exp(logit - max)
            sum += x[i];
        }
        j->losses[n] = (float)(log(sum) - zt);
        float inv = (float)(j->dscale / sum);
        for (size_t i = 0; i < j->V; i++)
            x[i] *= inv;
        x[target] -= j->dscale;
    }
}

static void cpu_crossentropy_forward_backward(KgBackend *be, float *losses, float *logits,
                                              const int *targets, size_t N, size_t V,
                                              float dscale) {
    CrossentropyJob j = {losses, logits, targets, N, V, dscale};
    cpu_pool_run(cpu_of(be)->pool, crossentropy_task, &j,
                 (N + CROSSENTROPY_ROWS_PER_TASK - 1) / CROSSENTROPY_ROWS_PER_TASK);
}

typedef struct {
    float *params, *m, *v;
    const float *grads;
    size_t n;
    const KgAdamWStep *a;
} AdamWJob;

static void adamw_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const AdamWJob *j = ctx;
    // scalars in locals and restrict pointers: the stores cannot alias them, so it vectorizes
    const KgAdamWStep a = *j->a;
    float *restrict p = j->params, *restrict m = j->m, *restrict v = j->v;
    const float *restrict g = j->grads;
    size_t end = (t + 1) * ELEMENTWISE_CHUNK < j->n ? (t + 1) * ELEMENTWISE_CHUNK : j->n;
    for (size_t i = t * ELEMENTWISE_CHUNK; i < end; i++)
        kg_adamw_update(&p[i], &m[i], &v[i], g[i] * a.grad_scale, a.lr, a.beta1, a.beta2, a.eps,
                        a.weight_decay, a.b1c, a.b2c);
}

static void cpu_adamw_update(KgBackend *be, float *params, const float *grads, float *m, float *v,
                             size_t n, const KgAdamWStep *a) {
    AdamWJob j = {params, m, v, grads, n, a};
    cpu_pool_run(cpu_of(be)->pool, adamw_task, &j, (n + ELEMENTWISE_CHUNK - 1) / ELEMENTWISE_CHUNK);
}

// A fixed split into SUM_PARTS slices, each summed in order and the slices added in order:
// the result does not depend on the thread count.
#define SUM_PARTS 64

typedef struct {
    const float *x;
    size_t n;
    double part[SUM_PARTS];
} SumJob;

static void sum_squares_task(void *ctx, size_t t, int thread) {
    (void)thread;
    SumJob *j = ctx;
    double s = 0;
    for (size_t i = j->n * t / SUM_PARTS; i < j->n * (t + 1) / SUM_PARTS; i++)
        s += (double)j->x[i] * j->x[i];
    j->part[t] = s;
}

static double cpu_sum_squares(KgBackend *be, const float *x, size_t n) {
    SumJob j = {.x = x, .n = n};
    cpu_pool_run(cpu_of(be)->pool, sum_squares_task, &j, SUM_PARTS);
    double s = 0;
    for (size_t t = 0; t < SUM_PARTS; t++)
        s += j.part[t];
    return s;
}

static size_t cpu_logits_topk(KgBackend *be, const float *logits, size_t V, float temperature,
                              size_t k, KgCandidate *out) {
    (void)be;
    return logits_topk(logits, V, temperature, k < V ? k : V, out);
}
