// fuzz_pytorch.c — a PyTorch checkpoint image through pytorch_parse(): the zip's central
// directory and local headers (ZIP64 included), the data.pkl pickle (opcodes, the globals
// allowlist, memo, marks), storages and views. An input that starts with a pickle's PROTO
// byte (0x80) goes to pickle_read_state_dict() alone, so both readers are reached directly.
// Any input must give KG_OK or one error line, never a read outside the image; on KG_OK
// every tensor lies inside the image or in the copies with the size its dtype and shape say,
// that size computed here without overflow (issue 24: a stride-0 view of 2^62 + 16 F32
// elements once passed as 64 bytes). Structure-aware: tests/tools/fuzz_corpus.py's "wide" seeds
// write every shape, stride, offset and numel as an 8-byte LONG1, and under libFuzzer a quarter of
// the mutations set one of those to a value at the edge of 64-bit sizes (2^k plus a little),
// which random bytes reach about once in 2^60 tries.
#include <string.h>

#include "base/kg.h"
#include "fuzz.h"
#include "model/pickle.h"
#include "model/pytorch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

// Touches the first and last byte: ASan names any byte outside the image or the copies.
static void touch(const uint8_t *p, size_t n) {
    if (!n) return;
    volatile uint8_t first = p[0], last = p[n - 1];
    (void)first;
    (void)last;
}

static void check_pickle(const uint8_t *data, size_t size) {
    PickleDict d;
    memset(&d, 0xA5, sizeof d);
    char err[KG_ERRLEN];
    int rc = pickle_read_state_dict(&d, data, size, err);
    if (rc != KG_OK) {
        FUZZ_CHECK(rc == KG_EFORMAT || rc == KG_ENOMEM);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL && !memchr(err, '\n', strlen(err)));
        return;
    }
    FUZZ_CHECK(d.n_tensors >= 1);
    for (size_t i = 0; i < d.n_tensors; i++) {
        const PickleTensor *t = &d.tensors[i];
        FUZZ_CHECK(t->storage < d.n_storages && t->ndim >= 0 && t->ndim <= PICKLE_MAX_DIMS);
        FUZZ_CHECK((const uint8_t *)t->name >= data && t->name_len <= size);
        touch((const uint8_t *)t->name, t->name_len);
        const PickleStorage *s = &d.storages[t->storage];
        FUZZ_CHECK(s->elem_size >= 1 && s->elem_size <= 8 && s->key_len >= 1 && s->key_len <= 64);
        touch((const uint8_t *)s->key, s->key_len);
    }
    pickle_free(&d);
}

static void check_zip(const uint8_t *data, size_t size) {
    SafeTensors st;
    memset(&st, 0xA5, sizeof st); // the parser must not rely on a zeroed struct
    char err[KG_ERRLEN];
    int rc = pytorch_parse(&st, data, size, err);
    if (rc != KG_OK) {
        FUZZ_CHECK(rc == KG_EFORMAT || rc == KG_EUNSUP || rc == KG_ENOMEM);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL && !memchr(err, '\n', strlen(err)));
        return;
    }
    FUZZ_CHECK(st.map == NULL && st.n_tensors >= 1 && st.n_copied <= st.n_tensors);
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor *t = &st.tensors[i];
        const uint8_t *p = t->data;
        size_t n = 1, nbytes;
        int wraps = 0;
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++)
            wraps |= kg_mul_overflow(n, t->shape[d], &n);
        wraps |= kg_mul_overflow(n, t->elem_size, &nbytes);
        FUZZ_CHECK(!wraps); // a size past 2^64 is an error, never a small number
        FUZZ_CHECK(n == t->n_elems && t->nbytes == nbytes);
        FUZZ_CHECK(p != NULL); // an empty tensor too: any aligned address
        FUZZ_CHECK(t->elem_size == safetensors_dtype_size(t->dtype_name));
        FUZZ_CHECK((uintptr_t)p % t->elem_size == 0); // aligned, as the kernels need
        FUZZ_CHECK(safetensors_find(&st, t->name) != NULL);
        int in_image = p >= data && p <= data + size && t->nbytes <= (size_t)(data + size - p);
        FUZZ_CHECK(t->nbytes == 0 || in_image || st.owned); // else it is one of the copies
        touch(p, t->nbytes);
    }
    safetensors_close(&st);
}

#ifdef KG_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

// splitmix64: the mutator's random bits from libFuzzer's seed.
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int is_long8(const uint8_t *p) { return p[0] == 0x8a && p[1] == 8; } // LONG1, 8 bytes

// One time in four, one 8-byte LONG1 of the input becomes 2^k + d (d -16..48; k 60..62 half
// the time, where one F32 dimension's bytes pass 2^64, else any of 0..62 for products and
// sums of several): the sizes that wrap past 2^64. The zip's lengths stay as they are, so the
// archive still reads. Otherwise libFuzzer's own mutations, its dictionary included.
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t r = mix(seed), n = 0;
    for (size_t i = 0; i + 10 <= size; i++)
        n += is_long8(data + i);
    if (n == 0 || r % 4) return LLVMFuzzerMutate(data, size, max_size);
    uint64_t pick = (r >> 2) % n, d = (r >> 32) % 65;
    uint64_t k = (r >> 20) & 1 ? 60 + (r >> 21) % 3 : (r >> 21) % 63;
    uint64_t v = (1ull << k) + d - 16;
    for (size_t i = 0; i + 10 <= size; i++)
        if (is_long8(data + i) && pick-- == 0) {
            for (int b = 0; b < 8; b++)
                data[i + 2 + b] = (uint8_t)(v >> (8 * b));
            break;
        }
    return size;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size && data[0] == 0x80)
        check_pickle(data, size);
    else
        check_zip(data, size);
    return 0;
}
