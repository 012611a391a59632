// encoder.c — token plus position embeddings. N = rows, C = channels.
// Part of ops.c (compiled once per instruction set).

// out (N, C) = wte[tokens[n]] + wpe[pos[n]], rows widened from their stored dtype.
static void cpu_encoder_forward(KgBackend *be, float *out, const int *tokens, const int *pos,
                                KgMat wte, KgMat wpe, size_t N, size_t C) {
    (void)be; // one row copy per token: too little work to hand to the pool
    for (size_t n = 0; n < N; n++) {
        size_t te = (size_t)tokens[n] * C, pe = (size_t)pos[n] * C;
        for (size_t i = 0; i < C; i++)
            out[n * C + i] =
                load_as(wte.data, wte.dtype, te + i) + load_as(wpe.data, wpe.dtype, pe + i);
    }
}

typedef struct {
    float *dwte, *dwpe;
    const float *dout;
    const int *tokens, *pos;
    size_t N, C;
} EncoderBackJob;

#define ENCODER_COLS_PER_TASK 64

// A task owns a range of columns of dwte and dwpe, so repeated tokens never race.
static void encoder_backward_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const EncoderBackJob *j = ctx;
    size_t c0 = t * ENCODER_COLS_PER_TASK;
    size_t c1 = c0 + ENCODER_COLS_PER_TASK < j->C ? c0 + ENCODER_COLS_PER_TASK : j->C;
    for (size_t n = 0; n < j->N; n++) {
        const float *d = j->dout + n * j->C;
        float *te = j->dwte + (size_t)j->tokens[n] * j->C, *pe = j->dwpe + (size_t)j->pos[n] * j->C;
        for (size_t c = c0; c < c1; c++) {
            te[c] += d[c];
            pe[c] += d[c];
        }
    }
}

static void cpu_encoder_backward(KgBackend *be, float *dwte, float *dwpe, const float *dout,
                                 const int *tokens, const int *pos, size_t N, size_t C) {
    EncoderBackJob j = {dwte, dwpe, dout, tokens, pos, N, C};
    cpu_pool_run(cpu_of(be)->pool, encoder_backward_task, &j,
                 (C + ENCODER_COLS_PER_TASK - 1) / ENCODER_COLS_PER_TASK);
}
