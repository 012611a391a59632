#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/kg.h"
#include "base/kg_json.h"
#include "base/le.h"
#include "kgmath.h"

#define SAFETENSORS_WRITE_PIECE (16u << 20) // bytes per fwrite when saving

static const struct {
    const char *name;
    size_t size;
    KgDtype dtype;
} DTYPES[] = {
    {"F32", 4, KG_F32},
    {"F16", 2, KG_F16},
    {"BF16", 2, KG_BF16},
    {"F64", 8, KG_DTYPE_OTHER},
    {"I64", 8, KG_DTYPE_OTHER},
    {"U64", 8, KG_DTYPE_OTHER},
    {"I32", 4, KG_DTYPE_OTHER},
    {"U32", 4, KG_DTYPE_OTHER},
    {"I16", 2, KG_DTYPE_OTHER},
    {"U16", 2, KG_DTYPE_OTHER},
    {"I8", 1, KG_DTYPE_OTHER},
    {"U8", 1, KG_DTYPE_OTHER},
    {"BOOL", 1, KG_DTYPE_OTHER},
    {"F8_E4M3", 1, KG_DTYPE_OTHER},
    {"F8_E5M2", 1, KG_DTYPE_OTHER},
};

size_t safetensors_dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
        if (!strcmp(name, DTYPES[i].name)) return DTYPES[i].size;
    return 0;
}

static int json_uint(const cJSON *j, size_t max, size_t *out) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= 0 && v <= (double)max && v == floor(v))) return 0;
    *out = (size_t)v;
    return 1;
}

// Fills t from one header entry; offsets are checked against the data size here and for
// overlap by the caller once all are known.
static int parse_entry(StTensor *t, const cJSON *j_t, const unsigned char *data, size_t data_size,
                       size_t *begin, char *err) {
    char name[81]; // the tensor's name for a message: a newline in it stays out of the line
    kg_show(name, sizeof name, j_t->string, strlen(j_t->string));
    if (!cJSON_IsObject(j_t)) return kg_err(err, KG_EFORMAT, "tensor %s: not an object", name);
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j_t, "dtype"));
    const cJSON *j_shape = cJSON_GetObjectItemCaseSensitive(j_t, "shape");
    const cJSON *j_off = cJSON_GetObjectItemCaseSensitive(j_t, "data_offsets");
    if (!dt || !(t->elem_size = safetensors_dtype_size(dt)))
        return kg_err(err, KG_EFORMAT, "tensor %s: missing or unknown dtype", name);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt);
    t->dtype = KG_DTYPE_OTHER;
    for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
        if (!strcmp(dt, DTYPES[i].name)) t->dtype = DTYPES[i].dtype;

    if (!cJSON_IsArray(j_shape) || cJSON_GetArraySize(j_shape) > ST_MAX_DIMS)
        return kg_err(err, KG_EFORMAT, "tensor %s: shape must be an array of at most %d dims", name,
                      ST_MAX_DIMS);
    t->ndim = 0;
    t->n_elems = 1;
    const cJSON *j_dim;
    cJSON_ArrayForEach(j_dim, j_shape) {
        size_t d;
        // each factor is bounded by the data size, so the running product cannot overflow
        if (!json_uint(j_dim, data_size, &d))
            return kg_err(err, KG_EFORMAT, "tensor %s: bad dimension in shape", name);
        t->shape[t->ndim++] = d;
        if (kg_mul_overflow(t->n_elems, d, &t->n_elems) || t->n_elems > data_size)
            return kg_err(err, KG_EFORMAT, "tensor %s: shape larger than the file", name);
    }
    size_t b, e;
    if (!cJSON_IsArray(j_off) || cJSON_GetArraySize(j_off) != 2 ||
        !json_uint(cJSON_GetArrayItem(j_off, 0), data_size, &b) ||
        !json_uint(cJSON_GetArrayItem(j_off, 1), data_size, &e) || b > e)
        return kg_err(err, KG_EFORMAT,
                      "tensor %s: data_offsets must be [begin, end] inside the file (%zu bytes of "
                      "data)",
                      name, data_size);
    size_t nbytes;
    if (kg_mul_overflow(t->n_elems, t->elem_size, &nbytes) || e - b != nbytes)
        return kg_err(err, KG_EFORMAT, "tensor %s: %zu bytes of data for %zu %s elements", name,
                      e - b, t->n_elems, dt);
    t->nbytes = e - b;
    t->data = data + b;
    if ((uintptr_t)t->data % t->elem_size)
        return kg_err(err, KG_EFORMAT, "tensor %s: data not aligned to its %zu-byte elements", name,
                      t->elem_size);
    *begin = b;
    return KG_OK;
}

typedef struct {
    size_t begin;
    size_t index;
} OffsetKey;

static int cmp_offset(const void *a, const void *b) {
    const OffsetKey *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// Sorts the table by data offset and rejects overlapping byte ranges.
static int check_overlap(SafeTensors *st, const size_t *begins, char *err) {
    size_t n = st->n_tensors;
    OffsetKey *keys = malloc(n * sizeof *keys);
    StTensor *sorted = malloc(n * sizeof *sorted);
    int rc = KG_OK;
    if (!keys || !sorted) {
        rc = kg_err(err, KG_ENOMEM, "safetensors: out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (OffsetKey){begins[i], i};
    qsort(keys, n, sizeof *keys, cmp_offset);
    for (size_t i = 0; i < n; i++)
        sorted[i] = st->tensors[keys[i].index];
    for (size_t i = 1; i < n; i++)
        if (keys[i].begin - keys[i - 1].begin < sorted[i - 1].nbytes) { // begins are sorted
            char a[81], b[81];
            rc = kg_err(err, KG_EFORMAT, "tensor %s: data overlaps tensor %s",
                        kg_show(a, sizeof a, sorted[i].name, strlen(sorted[i].name)),
                        kg_show(b, sizeof b, sorted[i - 1].name, strlen(sorted[i - 1].name)));
            goto end;
        }
    memcpy(st->tensors, sorted, n * sizeof *sorted);
end:
    free(keys);
    free(sorted);
    return rc;
}

int safetensors_dup_name(const SafeTensors *files, size_t n_files, const char **dup) {
    size_t n = 0;
    *dup = NULL;
    for (size_t f = 0; f < n_files; f++)
        n += files[f].n_tensors;
    const char **names = malloc(n * sizeof *names + 1);
    if (!names) return KG_ENOMEM;
    n = 0;
    for (size_t f = 0; f < n_files; f++)
        for (size_t i = 0; i < files[f].n_tensors; i++)
            names[n++] = files[f].tensors[i].name;
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n && !*dup; i++)
        if (!strcmp(names[i], names[i - 1])) *dup = names[i];
    free(names);
    return KG_OK;
}

static int check_unique_names(const SafeTensors *st, char *err) {
    const char *dup;
    char shown[81];
    if (safetensors_dup_name(st, 1, &dup))
        return kg_err(err, KG_ENOMEM, "safetensors: out of memory");
    if (dup)
        return kg_err(err, KG_EFORMAT, "tensor %s: listed twice in the header",
                      kg_show(shown, sizeof shown, dup, strlen(dup)));
    return KG_OK;
}

// The __metadata__ object into st->meta. Its values must be strings: the format defines it as
// a map of strings, and the reference implementation refuses a file with anything else.
static int parse_meta(SafeTensors *st, const cJSON *j_meta, char *err) {
    const cJSON *j_e;
    char shown[41];
    if (!cJSON_IsObject(j_meta))
        return kg_err(err, KG_EFORMAT, "safetensors: __metadata__ is not an object");
    cJSON_ArrayForEach(j_e, j_meta) {
        if (!cJSON_IsString(j_e))
            return kg_err(err, KG_EFORMAT, "safetensors: __metadata__ %s is not a string",
                          kg_show(shown, sizeof shown, j_e->string, strlen(j_e->string)));
        st->n_meta++;
    }
    if (!(st->meta = calloc(2 * st->n_meta + 1, sizeof *st->meta)))
        return kg_err(err, KG_ENOMEM, "safetensors: out of memory");
    size_t i = 0;
    cJSON_ArrayForEach(j_e, j_meta) {
        if (!(st->meta[i++] = strdup(j_e->string)) || !(st->meta[i++] = strdup(j_e->valuestring)))
            return kg_err(err, KG_ENOMEM, "safetensors: out of memory");
    }
    return KG_OK;
}

static int parse_header(SafeTensors *st, const cJSON *j_root, const unsigned char *data,
                        size_t data_size, char *err) {
    const cJSON *j_meta = cJSON_GetObjectItemCaseSensitive(j_root, "__metadata__");
    int rc = j_meta ? parse_meta(st, j_meta, err) : KG_OK;
    if (rc) return rc;
    size_t n = 0;
    const cJSON *j_t;
    cJSON_ArrayForEach(j_t, j_root) if (strcmp(j_t->string, "__metadata__")) n++;
    st->tensors = calloc(n + 1, sizeof *st->tensors);
    size_t *begins = calloc(n + 1, sizeof *begins);
    if (!st->tensors || !begins) {
        rc = kg_err(err, KG_ENOMEM, "safetensors: out of memory");
        goto end;
    }
    cJSON_ArrayForEach(j_t, j_root) {
        if (!strcmp(j_t->string, "__metadata__")) continue;
        StTensor *t = &st->tensors[st->n_tensors];
        if (!(t->name = strdup(j_t->string))) {
            rc = kg_err(err, KG_ENOMEM, "safetensors: out of memory");
            goto end;
        }
        st->n_tensors++;
        if ((rc = parse_entry(t, j_t, data, data_size, &begins[st->n_tensors - 1], err))) goto end;
    }
    if ((rc = check_unique_names(st, err))) goto end;
    rc = check_overlap(st, begins, err);
end:
    free(begins);
    return rc;
}

int safetensors_parse(SafeTensors *st, const void *buf, size_t size, char *err) {
    *st = (SafeTensors){0};
    const unsigned char *p = buf;
    if (size < 8) return kg_err(err, KG_EFORMAT, "safetensors: file too short (%zu bytes)", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > size - 8 || hlen > ST_MAX_HEADER)
        return kg_err(err, KG_EFORMAT,
                      "safetensors: header length %llu does not fit the file (%zu bytes): "
                      "truncated or not a safetensors file",
                      (unsigned long long)hlen, size);
    // a name, dtype or __metadata__ value holding a NUL would compare as its prefix
    int rc = kg_json_check_nul((const char *)p + 8, hlen, "safetensors", err);
    if (rc) return rc;
    const char *end = NULL;
    cJSON *j_root = cJSON_ParseWithLengthOpts((const char *)p + 8, hlen, &end, 0);
    if (!j_root || !cJSON_IsObject(j_root)) {
        cJSON_Delete(j_root);
        return kg_err(err, KG_EFORMAT, "safetensors: the header is not a JSON object");
    }
    // the header may be padded with spaces after the JSON to align the data
    while (end < (const char *)p + 8 + hlen && *end == ' ')
        end++;
    if (end != (const char *)p + 8 + hlen)
        rc = kg_err(err, KG_EFORMAT, "safetensors: trailing bytes after the header JSON");
    else
        rc = parse_header(st, j_root, p + 8 + hlen, size - 8 - hlen, err);
    cJSON_Delete(j_root);
    if (rc) safetensors_close(st);
    return rc;
}

int safetensors_open_with(SafeTensors *st, const char *path, StParseFn parse, char *err) {
    *st = (SafeTensors){0};
    void *map;
    size_t size;
    int rc = kg_map_file(path, &map, &size, err);
    if (rc) return rc;
    char perr[KG_ERRLEN];
    if ((rc = parse(st, map, size, perr))) {
        munmap(map, size);
        return kg_err(err, rc, "%s: %s", path, perr);
    }
    st->map = map;
    st->map_size = size;
    return KG_OK;
}

int safetensors_open(SafeTensors *st, const char *path, char *err) {
    return safetensors_open_with(st, path, safetensors_parse, err);
}

const StTensor *safetensors_find(const SafeTensors *st, const char *name) {
    for (size_t i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

const char *safetensors_meta(const SafeTensors *st, const char *key) {
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta[2 * i], key)) return st->meta[2 * i + 1];
    return NULL;
}

void safetensors_close(SafeTensors *st) {
    for (size_t i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; st->meta && i < 2 * st->n_meta; i++)
        free(st->meta[i]);
    free(st->meta);
    free(st->owned);
    if (st->map) munmap(st->map, st->map_size);
    *st = (SafeTensors){0};
}

// The header JSON: {"name": {"dtype": .., "shape": [..], "data_offsets": [b, e]}, ...}.
// Bytes of one tensor to write; a quantized one is its blocks.
static size_t write_bytes(const StWrite *t) {
    size_t elems = 1;
    for (int d = 0; d < t->ndim; d++)
        elems *= t->shape[d];
    return kg_dtype_bytes(t->dtype, elems);
}

// The alignment a tensor needs: its element size (a quantized one is written as U8).
static size_t write_align(const StWrite *t) {
    return kg_dtype_quantized(t->dtype) ? 1 : kg_dtype_size(t->dtype);
}

// order (n) = the indices of tensors, stably by alignment, the largest first: the format
// allows no gap between tensors, and as each one's bytes are a multiple of its alignment,
// every tensor then starts aligned.
static void write_order(size_t *order, const StWrite *tensors, size_t n) {
    size_t k = 0;
    for (size_t align = 4; align >= 1; align /= 2)
        for (size_t i = 0; i < n; i++)
            if (write_align(&tensors[i]) == align) order[k++] = i;
}

static char *header_json(const StWrite *tensors, const size_t *order, size_t n,
                         const char *const *meta) {
    char *text = NULL;
    cJSON *j_root = cJSON_CreateObject();
    if (!j_root) return NULL;
    size_t offset = 0;
    cJSON *j_meta = meta && meta[0] ? cJSON_AddObjectToObject(j_root, "__metadata__") : NULL;
    for (size_t i = 0; meta && meta[i]; i += 2)
        if (!j_meta || !cJSON_AddStringToObject(j_meta, meta[i], meta[i + 1])) goto end;
    for (size_t i = 0; i < n; i++) {
        const StWrite *t = &tensors[order[i]];
        const int q = kg_dtype_quantized(t->dtype); // stored as U8 rows of blocks
        cJSON *j_t = cJSON_AddObjectToObject(j_root, t->name);
        cJSON *j_shape = j_t ? cJSON_AddArrayToObject(j_t, "shape") : NULL;
        if (!j_shape || !cJSON_AddStringToObject(j_t, "dtype", q ? "U8" : kg_dtype_name(t->dtype)))
            goto end;
        for (int d = 0; d < t->ndim; d++) {
            size_t dim =
                q && d == t->ndim - 1 ? kg_dtype_bytes(t->dtype, t->shape[d]) : t->shape[d];
            if (!cJSON_AddItemToArray(j_shape, cJSON_CreateNumber((double)dim))) goto end;
        }
        size_t nbytes = write_bytes(t);
        cJSON *j_off = cJSON_AddArrayToObject(j_t, "data_offsets");
        if (!j_off || !cJSON_AddItemToArray(j_off, cJSON_CreateNumber((double)offset)) ||
            !cJSON_AddItemToArray(j_off, cJSON_CreateNumber((double)(offset + nbytes))))
            goto end;
        offset += nbytes;
    }
    text = cJSON_PrintUnformatted(j_root);
end:
    cJSON_Delete(j_root);
    return text;
}

int safetensors_save(const char *path, const StWrite *tensors, size_t n, char *err) {
    return safetensors_save_meta(path, tensors, n, NULL, NULL, err);
}

int safetensors_save_meta(const char *path, const StWrite *tensors, size_t n,
                          const char *const *meta, KgProgress *progress, char *err) {
    size_t *order = malloc(n * sizeof *order + 1);
    char *json = NULL;
    FILE *f = NULL;
    int rc = KG_OK;
    if (order) write_order(order, tensors, n);
    if (!order || !(json = header_json(tensors, order, n, meta))) {
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    size_t hlen = strlen(json);
    size_t padded = (hlen + 8 + 7) / 8 * 8 - 8; // data starts at a multiple of 8
    if (!(f = fopen(path, "wb"))) {
        rc = kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
        goto end;
    }
    unsigned char len8[8];
    kg_put_le64(len8, padded);
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    for (size_t i = 0; ok && i < n; i++) {
        const char *data = tensors[order[i]].data;
        size_t left = write_bytes(&tensors[order[i]]);
        while (ok && left) { // in pieces, so that progress moves inside a large tensor
            size_t piece = left < SAFETENSORS_WRITE_PIECE ? left : SAFETENSORS_WRITE_PIECE;
            ok = fwrite(data, 1, piece, f) == piece;
            progress_advance(progress, piece);
            data += piece;
            left -= piece;
        }
    }
    if (fclose(f) != 0 || !ok) rc = kg_err(err, KG_EIO, "write %s: %s", path, strerror(errno));
end:
    free(order);
    free(json);
    return rc;
}
