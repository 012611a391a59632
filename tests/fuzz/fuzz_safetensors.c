// fuzz_safetensors.c — a whole .safetensors file image through safetensors_parse(): the
// 8-byte header length, the JSON header, dtypes, shapes, offsets, alignment and metadata. Any input
// must give KG_OK or an error, never a read outside the image; on KG_OK every tensor must
// lie inside the data section with the size its dtype and shape say.
#include <string.h>

#include "base/kg.h"
#include "fuzz.h"
#include "model/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

// The table's promises (safetensors.h), checked on a parse that succeeded.
static void fuzz_check_tensors(const SafeTensors *st, const uint8_t *data, size_t size) {
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)data[i] << (8 * i);
    const uint8_t *begin = data + 8 + hlen, *end = data + size; // the data section
    for (size_t i = 0; i < st->n_tensors; i++) {
        const StTensor *t = &st->tensors[i];
        const uint8_t *p = t->data;
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++)
            n *= t->shape[d];
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        FUZZ_CHECK(n == t->n_elems && t->nbytes == n * t->elem_size);
        FUZZ_CHECK(t->elem_size == safetensors_dtype_size(t->dtype_name));
        FUZZ_CHECK(t->nbytes == 0 || (p >= begin && p <= end && t->nbytes <= (size_t)(end - p)));
        FUZZ_CHECK((uintptr_t)p % t->elem_size == 0); // aligned in memory, as the kernels need
        FUZZ_CHECK(safetensors_find(st, t->name) != NULL);
        if (i > 0 && t->nbytes && st->tensors[i - 1].nbytes) // sorted, not overlapping
            FUZZ_CHECK((const uint8_t *)st->tensors[i - 1].data + st->tensors[i - 1].nbytes <= p);
        if (t->nbytes) { // touch both ends: ASan names any byte outside the image
            volatile uint8_t first = p[0], last = p[t->nbytes - 1];
            (void)first;
            (void)last;
        }
    }
}

// __metadata__'s promises: n_meta pairs of strings, NULL after them, each key found.
static void fuzz_check_meta(const SafeTensors *st) {
    FUZZ_CHECK(st->n_meta == 0 || st->meta != NULL);
    for (size_t i = 0; i < st->n_meta; i++) {
        FUZZ_CHECK(st->meta[2 * i] != NULL && st->meta[2 * i + 1] != NULL);
        FUZZ_CHECK(safetensors_meta(st, st->meta[2 * i]) != NULL);
    }
    FUZZ_CHECK(!st->meta || st->meta[2 * st->n_meta] == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    memset(&st, 0xA5, sizeof st); // the parser must not rely on a zeroed struct
    char err[KG_ERRLEN];
    int rc = safetensors_parse(&st, data, size, err);
    if (rc == KG_OK) {
        FUZZ_CHECK(size >= 8);
        fuzz_check_tensors(&st, data, size);
        fuzz_check_meta(&st);
        safetensors_close(&st);
    } else {
        FUZZ_CHECK(rc == KG_EFORMAT || rc == KG_ENOMEM);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
    }
    return 0;
}
