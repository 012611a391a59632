// pytorch.c — a PyTorch zip checkpoint as a tensor table (pytorch.h): the zip's entries
// (zipfile.c), the state dict's records (pickle.c), then each tensor's view checked against
// its storage and pointed into the mapping, or copied when it is not contiguous.
#include "pytorch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "pickle.h"
#include "zipfile.h"

// The pickle: the one entry named PREFIX/data.pkl (PREFIX is the archive's folder, the
// saved file's stem: "archive", "pytorch_model", ...).
static int find_pickle(const ZipFile *z, const ZipEntry **pkl, size_t *prefix_len, char *err) {
    *pkl = NULL;
    for (size_t i = 0; i < z->n; i++) {
        const ZipEntry *e = &z->entries[i];
        if (e->name_len <= 9 || memcmp(e->name + e->name_len - 9, "/data.pkl", 9) ||
            memchr(e->name, '/', e->name_len - 9))
            continue;
        if (*pkl) return kg_err(err, KG_EFORMAT, "pytorch: the zip holds two data.pkl");
        *pkl = e;
        *prefix_len = e->name_len - 9;
    }
    if (!*pkl)
        return kg_err(err, KG_EFORMAT,
                      "pytorch: no data.pkl in the zip: not a PyTorch checkpoint (torch.save)");
    if ((*pkl)->size > PYTORCH_MAX_PICKLE)
        return kg_err(err, KG_EFORMAT, "pytorch: data.pkl of %zu bytes (at most %u)", (*pkl)->size,
                      PYTORCH_MAX_PICKLE);
    return KG_OK;
}

// PREFIX/byteorder, when present (torch >= 1.10), must say "little": storages are raw
// machine words.
static int check_byteorder(const ZipFile *z, const char *prefix, size_t plen, char *err) {
    char name[ZIPFILE_MAX_NAME + 16];
    snprintf(name, sizeof name, "%.*s/byteorder", (int)plen, prefix);
    const ZipEntry *e = zipfile_find(z, name, strlen(name));
    if (e && !(e->size == 6 && !memcmp(e->data, "little", 6)))
        return kg_err(err, KG_EUNSUP, "pytorch: a big-endian checkpoint is not read");
    return KG_OK;
}

// Elements of view t (elements of esize bytes), its bytes, and the last element it reaches
// (offset + sum((shape[d] - 1) * stride[d])); 0 when any of them overflows size_t. Every
// factor is the file's: a stride-0 view of 2^62 + 16 F32 elements is 2^64 + 64 bytes.
static int view_extent(const PickleTensor *t, size_t esize, size_t *n_elems, size_t *nbytes,
                       size_t *last) {
    size_t n = 1, end = t->offset;
    for (int d = 0; d < t->ndim; d++)
        if (kg_mul_overflow(n, t->shape[d], &n)) return 0;
    for (int d = 0; n && d < t->ndim; d++) {
        size_t step;
        if (kg_mul_overflow(t->shape[d] - 1, t->stride[d], &step) ||
            kg_add_overflow(end, step, &end))
            return 0;
    }
    *n_elems = n;
    *last = end;
    return !kg_mul_overflow(n, esize, nbytes);
}

// Bytes a copy of nbytes takes in st->owned: rounded up to 64, so that every copy is aligned.
// 0 when that overflows size_t.
static int copy_size(size_t nbytes, size_t *out) {
    if (kg_add_overflow(nbytes, 63, out)) return 0;
    *out = *out / 64 * 64;
    return 1;
}

// Row-major with no gaps (dimensions of size 1 may have any stride, as in PyTorch).
static int view_contiguous(const PickleTensor *t) {
    size_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect) return 0;
        expect *= t->shape[d];
    }
    return 1;
}

// dst (n_elems, row-major) = the view t of base, elements of esize bytes.
static void gather(uint8_t *dst, const uint8_t *base, const PickleTensor *t, size_t esize) {
    size_t idx[PICKLE_MAX_DIMS] = {0};
    int nd = t->ndim;
    size_t inner = nd ? t->shape[nd - 1] : 1, istride = nd ? t->stride[nd - 1] : 1;
    for (;;) {
        size_t at = t->offset;
        for (int d = 0; d < nd - 1; d++)
            at += idx[d] * t->stride[d];
        if (istride == 1) {
            memcpy(dst, base + at * esize, inner * esize);
            dst += inner * esize;
        } else {
            for (size_t i = 0; i < inner; i++, dst += esize)
                memcpy(dst, base + (at + i * istride) * esize, esize);
        }
        int d = nd - 2; // the odometer over every dimension but the last
        while (d >= 0 && ++idx[d] == t->shape[d])
            idx[d--] = 0;
        if (d < 0) return;
    }
}

static int check_unique(const SafeTensors *st, char *err) {
    const char *dup;
    char shown[81];
    if (safetensors_dup_name(st, 1, &dup)) return kg_err(err, KG_ENOMEM, "pytorch: out of memory");
    if (dup)
        return kg_err(err, KG_EFORMAT, "pytorch: tensor %s appears twice",
                      kg_show(shown, sizeof shown, dup, strlen(dup)));
    return KG_OK;
}

// Storage s's zip entry, PREFIX/data/KEY, or NULL; its name goes into name (cap bytes).
static const ZipEntry *storage_entry(const ZipFile *z, const char *prefix, size_t plen,
                                     const PickleStorage *s, char *name, size_t cap) {
    snprintf(name, cap, "%.*s/data/%.*s", (int)plen, prefix, (int)s->key_len, s->key);
    return zipfile_find(z, name, strlen(name));
}

// One table entry from one pickle record: its storage found and checked, its view inside
// it. data stays NULL when the view must be copied (*copy_bytes says how much).
static int bind_tensor(StTensor *t, const PickleTensor *p, const PickleStorage *s, const ZipFile *z,
                       const char *prefix, size_t plen, size_t *copy_bytes, char *err) {
    char name[ZIPFILE_MAX_NAME + 96], tname[81], sname[121]; // the last two for messages
    if (memchr(p->name, 0, p->name_len) || !(t->name = strndup(p->name, p->name_len)))
        return kg_err(err, KG_EFORMAT, "pytorch: a tensor name holds a NUL byte");
    const ZipEntry *e = storage_entry(z, prefix, plen, s, name, sizeof name);
    kg_show(tname, sizeof tname, p->name, p->name_len);
    kg_show(sname, sizeof sname, name, strlen(name));
    if (!e)
        return kg_err(err, KG_EFORMAT, "pytorch: tensor %s: its storage %s is not in the zip",
                      tname, sname);
    size_t storage_bytes, n, nbytes, last, at_bytes, copy;
    if (kg_mul_overflow(s->numel, s->elem_size, &storage_bytes) || e->size != storage_bytes)
        return kg_err(err, KG_EFORMAT,
                      "pytorch: storage %s holds %zu bytes, the pickle says %zu %s elements", sname,
                      e->size, s->numel, s->dtype_name);
    if (!view_extent(p, s->elem_size, &n, &nbytes, &last) ||
        kg_mul_overflow(p->offset, s->elem_size, &at_bytes))
        return kg_err(err, KG_EFORMAT,
                      "pytorch: tensor %s: its shape, strides or offset overflow 64 bits (a "
                      "crafted file)",
                      tname);
    if (n && last >= s->numel)
        return kg_err(err, KG_EFORMAT,
                      "pytorch: tensor %s: its view runs past its storage %s of %zu elements",
                      tname, sname, s->numel);
    t->dtype = s->dtype;
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", s->dtype_name);
    t->elem_size = s->elem_size;
    t->ndim = p->ndim;
    _Static_assert(PICKLE_MAX_DIMS == ST_MAX_DIMS, "a pickle's shape is a table entry's");
    memcpy(t->shape, p->shape, sizeof p->shape);
    t->n_elems = n;
    t->nbytes = nbytes;
    if (n == 0) { // nothing to read: any aligned address will do
        static const uint64_t EMPTY[1];
        t->data = EMPTY;
        return KG_OK;
    }
    const uint8_t *at = e->data + at_bytes; // inside the entry: offset <= last < numel
    if (view_contiguous(p) && (uintptr_t)at % s->elem_size == 0) {
        t->data = at; // in place: the mapping itself
        return KG_OK;
    }
    if (!copy_size(nbytes, &copy) || kg_add_overflow(*copy_bytes, copy, copy_bytes))
        return kg_err(err, KG_EFORMAT,
                      "pytorch: tensor %s: copying its strided view (%zu bytes) overflows 64 bits "
                      "with the views before it",
                      tname, nbytes);
    return KG_OK;
}

// Copies the views bind_tensor left without data into st->owned: at most twice the file's
// size (a real checkpoint copies a few of its own tensors; many strided views of one storage
// would otherwise ask for any amount of memory).
static int copy_views(SafeTensors *st, const PickleDict *d, const ZipFile *z, const char *prefix,
                      size_t plen, size_t bytes, size_t file_size, char *err) {
    if (!bytes) return KG_OK;
    if (bytes / 2 > file_size)
        return kg_err(err, KG_EFORMAT,
                      "pytorch: copying its strided views would take %zu bytes, more than twice "
                      "the file: not a checkpoint",
                      bytes);
    if (posix_memalign(&st->owned, 64, bytes)) {
        st->owned = NULL;
        return kg_err(err, KG_ENOMEM, "pytorch: out of memory for %zu bytes of copied views",
                      bytes);
    }
    uint8_t *cursor = st->owned;
    for (size_t i = 0; i < st->n_tensors; i++) {
        StTensor *t = &st->tensors[i];
        if (t->data) continue;
        const PickleTensor *p = &d->tensors[i];
        const PickleStorage *s = &d->storages[p->storage];
        char name[ZIPFILE_MAX_NAME + 96];
        gather(cursor, storage_entry(z, prefix, plen, s, name, sizeof name)->data, p, s->elem_size);
        t->data = cursor;
        size_t copy;
        copy_size(t->nbytes, &copy); // bind_tensor summed these without overflow
        cursor += copy;
        st->n_copied++;
    }
    return KG_OK;
}

int pytorch_parse(SafeTensors *st, const void *buf, size_t size, char *err) {
    *st = (SafeTensors){0};
    ZipFile z;
    PickleDict d = {0};
    const ZipEntry *pkl;
    size_t plen = 0, copy_bytes = 0;
    int rc = zipfile_read(&z, buf, size, err);
    if (rc) return rc;
    if ((rc = find_pickle(&z, &pkl, &plen, err)) ||
        (rc = check_byteorder(&z, pkl->name, plen, err)) ||
        (rc = pickle_read_state_dict(&d, pkl->data, pkl->size, err)))
        goto end;
    if (!(st->tensors = calloc(d.n_tensors, sizeof *st->tensors))) {
        rc = kg_err(err, KG_ENOMEM, "pytorch: out of memory");
        goto end;
    }
    for (size_t i = 0; i < d.n_tensors && !rc; i++, st->n_tensors++)
        rc = bind_tensor(&st->tensors[i], &d.tensors[i], &d.storages[d.tensors[i].storage], &z,
                         pkl->name, plen, &copy_bytes, err);
    if (!rc) rc = check_unique(st, err);
    if (!rc) rc = copy_views(st, &d, &z, pkl->name, plen, copy_bytes, size, err);
end:
    pickle_free(&d);
    zipfile_free(&z);
    if (rc) safetensors_close(st);
    return rc;
}

// torch.save before 1.6 wrote a bare pickle stream that starts with a magic number: named
// as such rather than as a broken zip.
static int parse_file(SafeTensors *st, const void *buf, size_t size, char *err) {
    static const uint8_t LEGACY[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20};
    if (size >= sizeof LEGACY && !memcmp(buf, LEGACY, sizeof LEGACY))
        return kg_err(err, KG_EUNSUP,
                      "the legacy format of torch < 1.6 is not read: load it in Python and save "
                      "it again with torch.save (or as safetensors)");
    return pytorch_parse(st, buf, size, err);
}

int pytorch_open(SafeTensors *st, const char *path, char *err) {
    return safetensors_open_with(st, path, parse_file, err);
}
