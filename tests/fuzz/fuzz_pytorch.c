// fuzz_pytorch.c — a PyTorch checkpoint image through pytorch_parse(): the zip's central
// directory and local headers (ZIP64 included), the data.pkl pickle (opcodes, the globals
// allowlist, memo, marks), storages and views. An input that starts with a pickle's PROTO
// byte (0x80) goes to pickle_read_state_dict() alone, so both readers are reached directly.
// Any input must give KG_OK or one error line, never a read outside the image; on KG_OK
// every tensor lies inside the image or in the copies with the size its dtype and shape say.
#include <string.h>

#include "fuzz.h"
#include "model/kg.h"
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
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++)
            n *= t->shape[d];
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        FUZZ_CHECK(n == t->n_elems && t->nbytes == n * t->elem_size);
        FUZZ_CHECK(t->elem_size == safetensors_dtype_size(t->dtype_name));
        FUZZ_CHECK((uintptr_t)p % t->elem_size == 0); // aligned, as the kernels need
        FUZZ_CHECK(safetensors_find(&st, t->name) != NULL);
        int in_image = p >= data && p <= data + size && t->nbytes <= (size_t)(data + size - p);
        FUZZ_CHECK(t->nbytes == 0 || in_image || st.owned); // else it is one of the copies
        touch(p, t->nbytes);
    }
    safetensors_close(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size && data[0] == 0x80)
        check_pickle(data, size);
    else
        check_zip(data, size);
    return 0;
}
