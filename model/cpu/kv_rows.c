// kv_rows.c — the KV cache's rows in each KV dtype: kv_store writes new keys and values into
// their blocks (f32 as they are, f16 and bf16 rounded to nearest even, q8_0 in ggml's blocks
// of 32 along each head), and kv_load_rows reads rows back as f32 for attention.c.
// NH = heads, hs = head size; a row is one position's hs values of one head.
// Part of ops.c (compiled once per instruction set).

#define KV_STORE_ROWS_PER_TASK 16

// dst (hs, dtype dt) = src (hs) f32 rounded to dt (hs a multiple of 32 for q8_0).
static void kv_store_row(void *dst, KgDtype dt, const float *src, size_t hs) {
    size_t i = 0;
    if (dt == KG_F32) {
        memcpy(dst, src, hs * sizeof *src);
    } else if (dt == KG_Q8_0) {
        kg_quantize_rows(dst, KG_Q8_0, src, 1, hs);
    } else if (dt == KG_BF16) {
        uint16_t *d = dst;
        for (; i + VLEN <= hs; i += VLEN) {
            vh h = __builtin_convertvector(vf_round_bf16(vf_load(src + i)) >> 16, vh);
            memcpy(d + i, &h, sizeof h);
        }
        for (; i < hs; i++)
            d[i] = kg_f32_to_bf16(src[i]);
    } else { // KG_F16
        uint16_t *d = dst;
#if defined(__AVX512F__)
        for (; i + 16 <= hs; i += 16)
            _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                                                    _MM_FROUND_TO_NEAREST_INT));
#elif defined(__AVX2__) && defined(__F16C__)
        for (; i + 8 <= hs; i += 8)
            _mm_storeu_si128((__m128i *)(d + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < hs; i++)
            d[i] = kg_f32_to_f16(src[i]);
    }
}

// dst (rows, hs) f32 = rows of dtype dt, stride bytes apart from src.
static inline __attribute__((always_inline)) void
kv_load_rows(float *dst, const char *src, size_t stride, KgDtype dt, size_t rows, size_t hs) {
    for (size_t r = 0; r < rows; r++, src += stride, dst += hs) {
        size_t i = 0;
        if (dt == KG_F32) {
            memcpy(dst, src, hs * sizeof *dst);
        } else if (dt == KG_Q8_0) { // hs / 32 blocks: an f16 scale, 32 int8
            typedef int8_t vi8 __attribute__((vector_size(VLEN)));
            for (size_t b = 0; b < hs / KG_QBLOCK; b++) {
                const char *blk = src + b * KG_Q8_0_BYTES;
                uint16_t dh;
                memcpy(&dh, blk, 2);
                const vf d = vf_set1(kg_f16_to_f32(dh));
                for (int k = 0; k < KG_QBLOCK; k += VLEN) {
                    vi8 q;
                    memcpy(&q, blk + 2 + k, sizeof q);
                    vf_store(dst + b * KG_QBLOCK + k, d * __builtin_convertvector(q, vf));
                }
            }
        } else {
            for (; i + VLEN <= hs; i += VLEN)
                vf_store(dst + i, vf_load_as(src, dt, i));
            for (; i < hs; i++)
                dst[i] = load_as(src, dt, i);
        }
    }
}

typedef struct {
    const KgAttnSeq *seqs;
    size_t n_seq;
    const float *k, *v;
    size_t ld, NH, hs;
} KvStoreJob;

// Task t: up to KV_STORE_ROWS_PER_TASK new rows of one sequence, every head, keys and values.
static void kv_store_task(void *ctx, size_t t, int thread) {
    (void)thread;
    const KvStoreJob *j = ctx;
    const KgAttnSeq *s = j->seqs;
    for (;; s++) { // the batch's sequences in order: a scan (n_seq is the batch)
        size_t tasks = (s->n + KV_STORE_ROWS_PER_TASK - 1) / KV_STORE_ROWS_PER_TASK;
        if (t < tasks) break;
        t -= tasks;
    }
    size_t r0 = t * KV_STORE_ROWS_PER_TASK, r1 = r0 + KV_STORE_ROWS_PER_TASK;
    if (r1 > s->n) r1 = s->n;
    for (size_t r = r0; r < r1; r++)
        for (size_t h = 0; h < j->NH; h++) {
            size_t off = kg_attn_offset(s, s->pos0 + r, h), row = (s->row0 + r) * j->ld + h * j->hs;
            kv_store_row((char *)s->k + off, s->kv_dtype, j->k + row, j->hs);
            kv_store_row((char *)s->v + off, s->kv_dtype, j->v + row, j->hs);
        }
}

static void cpu_kv_store(KgBackend *be, const KgAttnSeq *seqs, size_t n_seq, const float *k,
                         const float *v, size_t ld, size_t NH, size_t hs) {
    KvStoreJob j = {seqs, n_seq, k, v, ld, NH, hs};
    size_t n_tasks = 0;
    for (size_t i = 0; i < n_seq; i++)
        n_tasks += (seqs[i].n + KV_STORE_ROWS_PER_TASK - 1) / KV_STORE_ROWS_PER_TASK;
    cpu_pool_run(cpu_of(be)->pool, kv_store_task, &j, n_tasks);
}
