// layernorm.c — layer normalization over the channels of each row.
// N = rows, C = channels. Part of ops.c (compiled once per instruction set).

#define LAYERNORM_ROWS_PER_TASK 8

typedef struct {
    float *out, *mean, *rstd;
    const float *inp, *w, *b;
    size_t N, C;
    float eps;
} LayernormJob;

// Two passes over the row (mean, then variance of the centred values): as stable as the
// reference, and the row is in L1 for the second pass anyway.
static void layernorm_row(float *out, float *mean_out, float *rstd_out, const float *x,
                          const float *w, const float *b, size_t C, float eps) {
    float sum = 0.0f;
    for (size_t i = 0; i < C; i++)
        sum += x[i];
    float mean = sum / (float)C;
    float var = 0.0f;
    for (size_t i = 0; i < C; i++)
        var += (x[i] - mean) * (x[i] - mean);
    float rstd = 1.0f / sqrtf(var / (float)C + eps);
    for (size_t i = 0; i < C; i++)
        out[i] = (x[i] - mean) * rstd * w[i] + b[i];
    if (mean_out) *mean_out = mean;
    if (rstd_out) *rstd_out = rstd;
}

static void layernorm_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const LayernormJob *j = ctx;
    size_t n1 = (t + 1) * LAYERNORM_ROWS_PER_TASK < j->N ? (t + 1) * LAYERNORM_ROWS_PER_TASK : j->N;
    for (size_t n = t * LAYERNORM_ROWS_PER_TASK; n < n1; n++)
        layernorm_row(j->out + n * j->C, j->mean ? j->mean + n : NULL, j->rstd ? j->rstd + n : NULL,
                      j->inp + n * j->C, j->w, j->b, j->C, j->eps);
}

static void cpu_layernorm_forward(KgBackend *be, float *out, float *mean, float *rstd,
                                  const float *inp, const float *w, const float *b, size_t N,
                                  size_t C, float eps) {
    LayernormJob j = {out, mean, rstd, inp, w, b, N, C, eps};
    cpu_pool_run(cpu_of(be)->pool, layernorm_task, &j,
                 (N + LAYERNORM_ROWS_PER_TASK - 1) / LAYERNORM_ROWS_PER_TASK);
}

typedef struct {
    float *dinp, *dw, *db;
    const float *dout, *inp, *w, *mean, *rstd;
    size_t N, C, cols_per_task;
} LayernormBackJob;

// Rows: dinp += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd, dnorm = w * dout.
static void layernorm_dinp_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const LayernormBackJob *j = ctx;
    const size_t C = j->C;
    size_t n1 = (t + 1) * LAYERNORM_ROWS_PER_TASK < j->N ? (t + 1) * LAYERNORM_ROWS_PER_TASK : j->N;
    for (size_t n = t * LAYERNORM_ROWS_PER_TASK; n < n1; n++) {
        const float *x = j->inp + n * C, *dout = j->dout + n * C;
        float mean = j->mean[n], rstd = j->rstd[n], dm = 0.0f, dnm = 0.0f;
        for (size_t i = 0; i < C; i++) {
            float dnorm = j->w[i] * dout[i];
            dm += dnorm;
            dnm += dnorm * (x[i] - mean) * rstd;
        }
        dm /= (float)C;
        dnm /= (float)C;
        float *dx = j->dinp + n * C;
        for (size_t i = 0; i < C; i++) {
            float xhat = (x[i] - mean) * rstd;
            dx[i] += (j->w[i] * dout[i] - dm - xhat * dnm) * rstd;
        }
    }
}

// Columns: dw += sum over rows of xhat * dout, db += sum of dout; a task owns its columns.
static void layernorm_dw_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const LayernormBackJob *j = ctx;
    size_t c0 = t * j->cols_per_task,
           c1 = c0 + j->cols_per_task < j->C ? c0 + j->cols_per_task : j->C;
    for (size_t n = 0; n < j->N; n++) {
        const float *x = j->inp + n * j->C, *dout = j->dout + n * j->C;
        for (size_t i = c0; i < c1; i++) {
            j->dw[i] += (x[i] - j->mean[n]) * j->rstd[n] * dout[i];
            j->db[i] += dout[i];
        }
    }
}

static void cpu_layernorm_backward(KgBackend *be, float *dinp, float *dw, float *db,
                                   const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, size_t N, size_t C) {
    CpuPool *pool = cpu_of(be)->pool;
    LayernormBackJob j = {dinp, dw, db, dout, inp, w, mean, rstd, N, C, 64};
    cpu_pool_run(pool, layernorm_dinp_task, &j,
                 (N + LAYERNORM_ROWS_PER_TASK - 1) / LAYERNORM_ROWS_PER_TASK);
    cpu_pool_run(pool, layernorm_dw_task, &j, (C + j.cols_per_task - 1) / j.cols_per_task);
}
