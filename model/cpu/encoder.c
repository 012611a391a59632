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
