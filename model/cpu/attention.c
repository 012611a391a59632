// attention.c — causal multi-head attention over each sequence's cached keys and values.
// N = rows, C = channels, NH = heads, hs = head size, T = positions seen.
//
// One pass per query row with an online softmax (running max and sum, rescaled as larger
// scores appear), over keys in blocks: no (T, T) score matrix, no scratch beyond a block,
// and the same code for a 512-token prefill and a one-token decode step. Keys and values
// are read through each sequence's block table (backend.h's KgAttnSeq, the addressing a
// GPU's paged attention uses), in runs inside one block; an f32 cache is read in place, in
// the same order of operations as a contiguous one, so its logits are bit for bit the same;
// f16, bf16 and q8_0 rows are widened to f32 first (kv_rows.c).
// Part of ops.c (compiled once per instruction set).

#define ATTN_KEY_BLOCK      128 // scores kept on the stack per step
#define ATTN_ROWS_PER_TASK  32
#define ATTN_SGEMM_MIN_ROWS 8 // from this many query rows a task multiplies with sgemm

static inline __attribute__((always_inline)) float dot(const float *a, const float *b, size_t n) {
    vf acc = {0};
    size_t i = 0;
    for (; i + VLEN <= n; i += VLEN)
        acc += vf_load(a + i) * vf_load(b + i);
    float s = vf_sum(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

// out (hs) += sum_t e[t] * v_t (hs) over nt keys. The keys are the inner loop so that the
// accumulators stay in registers, four vectors of out at a time.
static inline __attribute__((always_inline)) void
weighted_sum(float *out, const float *e, const float *v, size_t ld, size_t nt, size_t hs) {
    size_t d = 0;
    for (; d + 4 * VLEN <= hs; d += 4 * VLEN) {
        vf a0 = vf_load(out + d), a1 = vf_load(out + d + VLEN);
        vf a2 = vf_load(out + d + 2 * VLEN), a3 = vf_load(out + d + 3 * VLEN);
        for (size_t t = 0; t < nt; t++) {
            const float *vt = v + t * ld + d;
            a0 += e[t] * vf_load(vt);
            a1 += e[t] * vf_load(vt + VLEN);
            a2 += e[t] * vf_load(vt + 2 * VLEN);
            a3 += e[t] * vf_load(vt + 3 * VLEN);
        }
        vf_store(out + d, a0);
        vf_store(out + d + VLEN, a1);
        vf_store(out + d + 2 * VLEN, a2);
        vf_store(out + d + 3 * VLEN, a3);
    }
    for (; d + VLEN <= hs; d += VLEN) {
        vf a = vf_load(out + d);
        for (size_t t = 0; t < nt; t++)
            a += e[t] * vf_load(v + t * ld + d);
        vf_store(out + d, a);
    }
    for (; d < hs; d++)
        for (size_t t = 0; t < nt; t++)
            out[d] += e[t] * v[t * ld + d];
}

// row[0, n) <- softmax(row[0, n)), in place. The max and the sum run in VLEN lanes and the
// exp loop vectorizes by itself: done one element after another (a loop-carried max and
// sum), this was most of a 512-token prompt's attention time.
static inline void softmax_row(float *row, size_t n) {
    vf vm = vf_set1(-INFINITY), vs = {0};
    size_t t = 0;
    for (; t + VLEN <= n; t += VLEN)
        vm = vf_maxv(vm, vf_load(row + t));
    float m = vf_max(vm);
    for (; t < n; t++)
        m = row[t] > m ? row[t] : m;
    for (t = 0; t < n; t++)
        row[t] = kg_expf(row[t] - m);
    for (t = 0; t + VLEN <= n; t += VLEN)
        vs += vf_load(row + t);
    float l = vf_sum(vs);
    for (; t < n; t++)
        l += row[t];
    float inv = 1.0f / l;
    for (t = 0; t < n; t++)
        row[t] *= inv;
}

// The rows of head h at positions [t, t + *nt) of s's keys (or values, base v) as f32 rows hs
// apart: in place when the cache is f32 and the run lies in one block, else converted into
// buf (room for max rows). *nt shrinks to the run that fits: the rest of t's block, at most
// max. A block of the inference pool holds a head's rows one after another (kv.h).
static inline __attribute__((always_inline)) const float *
kv_rows(const KgAttnSeq *s, const void *base, size_t t, size_t h, size_t *nt, size_t hs, float *buf,
        size_t max, size_t *ld) {
    const size_t room = ((size_t)1 << s->block_shift) - (t & (((size_t)1 << s->block_shift) - 1));
    if (*nt > room) *nt = room;
    const char *p = (const char *)base + kg_attn_offset(s, t, h);
    if (s->kv_dtype == KG_F32) {
        *ld = s->row_stride / sizeof(float);
        return (const float *)p;
    }
    if (*nt > max) *nt = max;
    kv_load_rows(buf, p, s->row_stride, s->kv_dtype, *nt, hs);
    *ld = hs;
    return buf;
}

// Training's forward (f32, every key in one block): the probabilities of row q are kept in
// att (p + 1, then zeros up to the row's end, Tk): the whole row's scores, then softmax_row,
// since they are saved anyway.
static void attend_row_saved(float *out, float *att, size_t Tk, const float *q, const float *k,
                             const float *v, size_t ld, size_t p, size_t hs, float scale) {
    for (size_t t = 0; t <= p; t++)
        att[t] = dot(q, k + t * ld, hs) * scale;
    softmax_row(att, p + 1);
    for (size_t t = p + 1; t < Tk; t++)
        att[t] = 0.0f;
    memset(out, 0, hs * sizeof *out);
    weighted_sum(out, att, v, ld, p + 1, hs);
}

// One query row q (hs) at position p against keys/values 0..p of head h of s: out (hs).
// Inlined with hs = 64 (every GPT-2 size) the head loops unroll into registers. The keys go
// ATTN_KEY_BLOCK at a time (online softmax), each block read in runs that stay inside one KV
// block; buf (2 * ATTN_KV_RUN * hs floats) takes converted rows of an f16/bf16/q8_0 cache.
static inline __attribute__((always_inline)) void attend_row(float *out, const float *q,
                                                             const KgAttnSeq *s, size_t h, size_t p,
                                                             size_t hs, float scale, float *buf,
                                                             size_t run_max) {
    float sc[ATTN_KEY_BLOCK];
    float m = -INFINITY, l = 0.0f;
    memset(out, 0, hs * sizeof *out);
    for (size_t t0 = 0; t0 <= p; t0 += ATTN_KEY_BLOCK) {
        size_t nt = p + 1 - t0 < ATTN_KEY_BLOCK ? p + 1 - t0 : ATTN_KEY_BLOCK;
        float bm = -INFINITY;
        for (size_t t = 0, run, ld; t < nt; t += run) {
            run = nt - t;
            const float *k = kv_rows(s, s->k, t0 + t, h, &run, hs, buf, run_max, &ld);
            for (size_t u = 0; u < run; u++) {
                sc[t + u] = dot(q, k + u * ld, hs) * scale;
                bm = sc[t + u] > bm ? sc[t + u] : bm;
            }
        }
        if (bm > m) { // rescale what was accumulated under the smaller max
            float corr = kg_expf(m - bm);
            l *= corr;
            for (size_t i = 0; i < hs; i++)
                out[i] *= corr;
            m = bm;
        }
        for (size_t t = 0; t < nt; t++) {
            sc[t] = kg_expf(sc[t] - m);
            l += sc[t];
        }
        for (size_t t = 0, run, ld; t < nt; t += run) {
            run = nt - t;
            const float *v = kv_rows(s, s->v, t0 + t, h, &run, hs, buf, run_max, &ld);
            weighted_sum(out, sc + t, v, ld, run, hs);
        }
    }
    float inv = 1.0f / l;
    for (size_t i = 0; i < hs; i++)
        out[i] *= inv;
}

typedef struct {
    float *out;
    const float *q;
    size_t ld_q;
    const KgAttnSeq *seqs;
    size_t n_seq, NH, hs;
    float **scratch; // per thread: converted KV rows, or the sgemm path's scores and K, V
} AttnJob;

// Task t -> (sequence, head, block of rows), enumerated sequence by sequence.
static const KgAttnSeq *task_seq(const AttnJob *j, size_t *t, size_t rows_per_task) {
    const KgAttnSeq *s = j->seqs;
    for (;; s++) { // n_seq is small (the batch); a scan is cheaper than a table
        size_t tasks = j->NH * ((s->n + rows_per_task - 1) / rows_per_task);
        if (*t < tasks) return s;
        *t -= tasks;
    }
}

#ifdef KG_HAVE_OPENBLAS
// dst (Tk, hs) = head h's rows at positions [0, Tk) of base (s's keys or values), gathered
// from their blocks (and widened to f32).
static void gather_rows(float *dst, const KgAttnSeq *s, const void *base, size_t h, size_t Tk,
                        size_t hs) {
    for (size_t t = 0, run; t < Tk; t += run) {
        run = Tk - t;
        const size_t room =
            ((size_t)1 << s->block_shift) - (t & (((size_t)1 << s->block_shift) - 1));
        if (run > room) run = room;
        kv_load_rows(dst + t * hs, (const char *)base + kg_attn_offset(s, t, h), s->row_stride,
                     s->kv_dtype, run, hs);
    }
}

// A block of query rows [r0, r1) of one head, as two matrix multiplies (prefill): the keys and
// values gathered from their blocks into scratch (K, V (Tk, hs)), the scores
// S (rows, Tk) = q K^T / sqrt(hs), a causal softmax per row, then out = S V. Keys past a row's
// position get probability 0; the few wasted products of that triangle cost less than the
// dot-product loop saves.
static void attend_block_sgemm(const AttnJob *j, const KgAttnSeq *s, size_t h, size_t r0, size_t r1,
                               float *scratch) {
    const size_t hs = j->hs, C = j->NH * hs, rows = r1 - r0, Tk = s->pos0 + r1;
    float *S = scratch, *K = S + rows * Tk, *V = K + Tk * hs;
    gather_rows(K, s, s->k, h, Tk, hs);
    gather_rows(V, s, s->v, h, Tk, hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)Tk, (int)hs,
                1.0f / sqrtf((float)hs), j->q + (s->row0 + r0) * j->ld_q + h * hs, (int)j->ld_q, K,
                (int)hs, 0.0f, S, (int)Tk);
    for (size_t r = 0; r < rows; r++) {
        float *row = S + r * Tk;
        size_t valid = s->pos0 + r0 + r + 1; // keys 0 .. position
        softmax_row(row, valid);
        for (size_t t = valid; t < Tk; t++)
            row[t] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)hs, (int)Tk, 1.0f, S,
                (int)Tk, V, (int)hs, 0.0f, j->out + (s->row0 + r0) * C + h * hs, (int)C);
}
#endif

static void attention_task(void *ctx, size_t t, int thread) {
    const AttnJob *j = ctx;
    const KgAttnSeq *s = task_seq(j, &t, ATTN_ROWS_PER_TASK);
    size_t h = t % j->NH, r0 = t / j->NH * ATTN_ROWS_PER_TASK;
    size_t r1 = r0 + ATTN_ROWS_PER_TASK < s->n ? r0 + ATTN_ROWS_PER_TASK : s->n;
    const size_t hs = j->hs, C = j->NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
#ifdef KG_HAVE_OPENBLAS
    if (!s->att && r1 - r0 >= ATTN_SGEMM_MIN_ROWS &&
        (r1 - r0 + 2 * hs) * (s->pos0 + r1) <= CPU_SCRATCH_FLOATS) {
        attend_block_sgemm(j, s, h, r0, r1, j->scratch[thread]);
        return;
    }
#endif
    // an f16/bf16/q8_0 cache's rows are widened into scratch, keys and values a run each
    const size_t run_max = CPU_SCRATCH_FLOATS / 2 / hs;
    float *buf = j->scratch[thread];
    for (size_t r = r0; r < r1; r++) {
        size_t row = s->row0 + r;
        float *o = j->out + row * C + h * hs;
        const float *q = j->q + row * j->ld_q + h * hs;
        size_t Tk = s->pos0 + s->n;
        if (s->att) { // training: f32, every position in one block
            const char *k = (const char *)s->k + kg_attn_offset(s, 0, h);
            const char *v = (const char *)s->v + kg_attn_offset(s, 0, h);
            attend_row_saved(o, s->att + (h * s->n + r) * Tk, Tk, q, (const float *)k,
                             (const float *)v, s->row_stride / sizeof(float), s->pos0 + r, hs,
                             scale);
        } else if (hs == 64) { // GPT-2's head size at every scale: a copy with the loops unrolled
            attend_row(o, q, s, h, s->pos0 + r, 64, scale, buf, run_max);
        } else {
            attend_row(o, q, s, h, s->pos0 + r, hs, scale, buf, run_max);
        }
    }
}

static void cpu_attention_forward(KgBackend *be, float *out, const float *q, size_t ld_q,
                                  const KgAttnSeq *seqs, size_t n_seq, size_t NH, size_t hs) {
    AttnJob j = {out, q, ld_q, seqs, n_seq, NH, hs, cpu_of(be)->scratch};
    size_t n_tasks = 0;
    for (size_t i = 0; i < n_seq; i++)
        n_tasks += NH * ((seqs[i].n + ATTN_ROWS_PER_TASK - 1) / ATTN_ROWS_PER_TASK);
    cpu_pool_run(cpu_of(be)->pool, attention_task, &j, n_tasks);
}

typedef struct {
    float *dq;
    const float *dout, *q;
    size_t ld_q;
    const KgAttnSeq *seqs;
    size_t n_seq, NH, hs;
    float **scratch; // per thread: one row's softmax gradient
} AttnBackJob;

// out (n) += a * x (n)
static inline void add_scaled(float *out, float a, const float *x, size_t n) {
    size_t i = 0;
    for (; i + VLEN <= n; i += VLEN)
        vf_store(out + i, vf_load(out + i) + a * vf_load(x + i));
    for (; i < n; i++)
        out[i] += a * x[i];
}

// One (sequence, head): every row's dq, and dk/dv of the head's columns, which only this
// task writes. Softmax backward: dpre = att * (datt - sum(att * datt)).
static void attention_backward_task(void *ctx, size_t t, int thread) {
    const AttnBackJob *j = ctx;
    const KgAttnSeq *s = j->seqs;
    const size_t NH = j->NH, hs = j->hs, C = NH * hs;
    while (t >= NH) { // one task per (sequence, head)
        t -= NH;
        s++;
    }
    size_t h = t, Tk = s->pos0 + s->n;
    const float scale = 1.0f / sqrtf((float)hs);
    float *dpre = j->scratch[thread]; // (Tk) <= n_ctx <= CPU_SCRATCH_FLOATS
    // training's keys and values: f32, every position in one block
    const size_t ld = s->row_stride / sizeof(float), at = kg_attn_offset(s, 0, h);
    const float *k = (const float *)((const char *)s->k + at);
    const float *v = (const float *)((const char *)s->v + at);
    float *dk = (float *)((char *)s->dk + at), *dv = (float *)((char *)s->dv + at);
    for (size_t r = 0; r < s->n; r++) {
        size_t row = s->row0 + r, p = s->pos0 + r;
        const float *att = s->att + (h * s->n + r) * Tk;
        const float *dout = j->dout + row * C + h * hs, *q = j->q + row * j->ld_q + h * hs;
        float sum = 0.0f;
        for (size_t u = 0; u <= p; u++) {
            dpre[u] = dot(dout, v + u * ld, hs); // datt
            sum += att[u] * dpre[u];
        }
        float *dq = j->dq + row * j->ld_q + h * hs;
        for (size_t u = 0; u <= p; u++) {
            float d = att[u] * (dpre[u] - sum) * scale;
            add_scaled(dq, d, k + u * ld, hs);
            add_scaled(dk + u * ld, d, q, hs);
            add_scaled(dv + u * ld, att[u], dout, hs);
        }
    }
}

static void cpu_attention_backward(KgBackend *be, float *dq, const float *dout, const float *q,
                                   size_t ld_q, const KgAttnSeq *seqs, size_t n_seq, size_t NH,
                                   size_t hs) {
    AttnBackJob j = {dq, dout, q, ld_q, seqs, n_seq, NH, hs, cpu_of(be)->scratch};
    cpu_pool_run(cpu_of(be)->pool, attention_backward_task, &j, n_seq * NH);
}
