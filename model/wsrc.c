// wsrc.c — a model directory's weight files (wsrc.h): which format to read, the shards of
// an index, one lookup over all of them, and the line that says what was loaded.
#include "wsrc.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/kg_json.h"
#include "pytorch.h"

typedef enum { FMT_SAFETENSORS, FMT_PYTORCH } WsrcFormat;

// In order of preference: safetensors maps in place with no parsing beyond its header.
static const struct {
    const char *file;
    WsrcFormat fmt;
    int index;
} CANDIDATES[] = {
    {"model.safetensors", FMT_SAFETENSORS, 0},
    {"model.safetensors.index.json", FMT_SAFETENSORS, 1},
    {"pytorch_model.bin", FMT_PYTORCH, 0},
    {"pytorch_model.bin.index.json", FMT_PYTORCH, 1},
};

// Formats a directory may hold that are not read, and the Python that converts them.
static const struct {
    const char *file, *what, *flag;
} FOREIGN[] = {
    {"tf_model.h5", "TensorFlow", "from_tf=True"},
    {"flax_model.msgpack", "Flax", "from_flax=True"},
};

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0; // a dangling HF-cache symlink counts: its open says why
}

static int open_file(SafeTensors *st, const char *path, WsrcFormat fmt, char *err) {
    return fmt == FMT_PYTORCH ? pytorch_open(st, path, err) : safetensors_open(st, path, err);
}

// A shard name from an index: a plain file name in the same directory, never a path.
static int plain_file(const char *s) {
    size_t n = strlen(s);
    return n > 0 && n < 256 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

// Index of shard name in names[0..n), adding it when new. -1 when there are too many.
static long shard_slot(const char **names, size_t *n, const char *name) {
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(names[i], name)) return (long)i;
    if (*n >= WSRC_MAX_SHARDS) return -1;
    names[*n] = name;
    return (long)(*n)++;
}

// Every weight_map entry must be in the shard it names.
static int check_weight_map(const WeightSrc *w, const cJSON *j_map, const char **names,
                            size_t n_names, const char *path, char *err) {
    const cJSON *j_e;
    cJSON_ArrayForEach(j_e, j_map) {
        const char *file = cJSON_GetStringValue(j_e);
        long s = shard_slot(names, &n_names, file); // present: the loop below found them all
        char tname[81], fname[81];
        if (!safetensors_find(&w->files[s], j_e->string))
            return kg_err(err, KG_EFORMAT,
                          "%s: tensor %s: the index puts it in %s, which does not hold it", path,
                          kg_show(tname, sizeof tname, j_e->string, strlen(j_e->string)),
                          kg_show(fname, sizeof fname, file, strlen(file)));
    }
    return KG_OK;
}

// The shards of an index's weight_map: each mapped and read like a single file.
static int open_index(WeightSrc *w, const char *dir, const char *path, WsrcFormat fmt, char *err) {
    char *text;
    size_t len;
    int rc = kg_read_file(path, WSRC_MAX_INDEX, &text, &len, err);
    if (rc) return rc;
    // a tensor or shard name holding a NUL would be looked up as its prefix
    if ((rc = kg_json_check_nul(text, len, path, err))) {
        free(text);
        return rc;
    }
    cJSON *j_root = cJSON_ParseWithLength(text, len);
    const cJSON *j_map = cJSON_GetObjectItemCaseSensitive(j_root, "weight_map");
    const char **names = calloc(WSRC_MAX_SHARDS, sizeof *names);
    size_t n_names = 0, n_entries = 0;
    if (!names) {
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    if (!cJSON_IsObject(j_map)) {
        rc = kg_err(err, KG_EFORMAT, "%s: not an index (no \"weight_map\" object)", path);
        goto end;
    }
    const cJSON *j_e;
    cJSON_ArrayForEach(j_e, j_map) {
        const char *file = cJSON_GetStringValue(j_e);
        if (++n_entries > WSRC_MAX_ENTRIES || !file || !plain_file(file) ||
            shard_slot(names, &n_names, file) < 0) {
            char tname[81];
            rc = kg_err(err, KG_EFORMAT,
                        "%s: weight_map entry %s: not a file name in the directory, or "
                        "too many entries or shards",
                        path, kg_show(tname, sizeof tname, j_e->string, strlen(j_e->string)));
            goto end;
        }
    }
    if (!n_names) {
        rc = kg_err(err, KG_EFORMAT, "%s: the weight_map is empty", path);
        goto end;
    }
    if (!(w->files = calloc(n_names, sizeof *w->files))) {
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    for (size_t i = 0; i < n_names; i++) {
        char shard[4096];
        if (kg_path_join(shard, sizeof shard, dir, names[i])) {
            rc = kg_err(err, KG_EINVAL, "%s: path too long", dir);
            goto end;
        }
        if ((rc = open_file(&w->files[i], shard, fmt, err))) goto end;
        w->n_files++;
    }
    rc = check_weight_map(w, j_map, names, n_names, path, err);
end:
    free(names);
    cJSON_Delete(j_root);
    free(text);
    return rc;
}

// No tensor name in two shards (the lookup would pick one silently).
static int check_unique(const WeightSrc *w, char *err) {
    const char *dup;
    char shown[81];
    if (w->n_files < 2) return KG_OK; // a single file's reader has checked it
    if (safetensors_dup_name(w->files, w->n_files, &dup))
        return kg_err(err, KG_ENOMEM, "%s: out of memory", w->path);
    if (dup)
        return kg_err(err, KG_EFORMAT, "%s: tensor %s is in two shards", w->path,
                      kg_show(shown, sizeof shown, dup, strlen(dup)));
    return KG_OK;
}

static int cmp_data(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    uintptr_t p = (uintptr_t)x->data, q = (uintptr_t)y->data;
    return (p > q) - (p < q);
}

// "pytorch_model.bin: F32, 474.7 MiB, 148 tensors (146 in place, 2 copied)"; bytes shared
// by several tensors (a tied head on wte's storage) are counted once.
static void describe(WeightSrc *w) {
    size_t bytes[3] = {0}, other = 0, n = 0, copied = 0;
    const char *other_name = NULL; // the first non-float dtype (U8: q8_0/q4_0 blocks)
    for (size_t f = 0; f < w->n_files; f++) {
        const SafeTensors *st = &w->files[f];
        const StTensor **by_data = malloc(st->n_tensors * sizeof *by_data + 1);
        for (size_t i = 0; by_data && i < st->n_tensors; i++)
            by_data[i] = &st->tensors[i];
        if (by_data) qsort(by_data, st->n_tensors, sizeof *by_data, cmp_data);
        for (size_t i = 0; i < st->n_tensors; i++) {
            const StTensor *t = by_data ? by_data[i] : &st->tensors[i];
            if (by_data && i && t->data == by_data[i - 1]->data &&
                t->nbytes == by_data[i - 1]->nbytes)
                continue; // the same bytes again
            if (t->dtype == KG_DTYPE_OTHER) {
                other += t->nbytes;
                if (!other_name) other_name = t->dtype_name;
            } else
                bytes[t->dtype] += t->nbytes;
        }
        free(by_data);
        n += st->n_tensors;
        copied += st->n_copied;
    }
    char dtypes[32] = "";
    size_t total = other;
    int named[3] = {0};
    for (int k = 0; k < 3; k++) { // the dtypes present, the one with the most bytes first
        int best = -1;
        for (int d = 0; d < 3; d++)
            if (bytes[d] && !named[d] && (best < 0 || bytes[d] > bytes[best])) best = d;
        if (best < 0) break;
        named[best] = 1;
        total += bytes[best];
        snprintf(dtypes + strlen(dtypes), sizeof dtypes - strlen(dtypes), "%s%s", k ? "+" : "",
                 kg_dtype_name((KgDtype)best));
    }
    if (other_name)
        snprintf(dtypes + strlen(dtypes), sizeof dtypes - strlen(dtypes), "%s%s",
                 dtypes[0] ? "+" : "", other_name);
    const char *base = strrchr(w->path, '/');
    char shards[32] = "";
    if (w->n_files > 1) snprintf(shards, sizeof shards, " in %zu shards", w->n_files);
    snprintf(w->what, sizeof w->what,
             "%.100s: %s, %.1f MiB%s, %zu tensors (%zu in place, %zu copied)",
             base ? base + 1 : w->path, dtypes[0] ? dtypes : "no tensors",
             (double)total / (1 << 20), shards, n, n - copied, copied);
}

// No weights we read: say what is there instead, and how to convert it.
static int no_weights(const char *dir, char *err) {
    char path[4096];
    for (size_t i = 0; i < sizeof FOREIGN / sizeof FOREIGN[0]; i++)
        if (!kg_path_join(path, sizeof path, dir, FOREIGN[i].file) && exists(path))
            return kg_err(err, KG_EUNSUP,
                          "%s: only %s weights (%s), which are not read; convert them once with "
                          "transformers: GPT2LMHeadModel.from_pretrained(DIR, %s)"
                          ".save_pretrained(OUT)",
                          dir, FOREIGN[i].what, FOREIGN[i].file, FOREIGN[i].flag);
    return kg_err(err, KG_EIO,
                  "%s: no model.safetensors, model.safetensors.index.json or pytorch_model.bin "
                  "(nor its index)",
                  dir);
}

int wsrc_open_dir(WeightSrc *w, const char *dir, char *err) {
    *w = (WeightSrc){0};
    size_t c = 0, n = sizeof CANDIDATES / sizeof CANDIDATES[0];
    for (; c < n; c++) {
        if (kg_path_join(w->path, sizeof w->path, dir, CANDIDATES[c].file))
            return kg_err(err, KG_EINVAL, "%s: path too long", dir);
        if (exists(w->path)) break;
    }
    if (c == n) return no_weights(dir, err);
    int rc;
    if (CANDIDATES[c].index) {
        rc = open_index(w, dir, w->path, CANDIDATES[c].fmt, err);
    } else if (!(w->files = calloc(1, sizeof *w->files))) {
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", w->path);
    } else {
        rc = open_file(w->files, w->path, CANDIDATES[c].fmt, err);
        w->n_files = rc ? 0 : 1;
    }
    if (!rc) rc = check_unique(w, err);
    if (rc) {
        wsrc_close(w);
        return rc;
    }
    describe(w);
    return KG_OK;
}

const StTensor *wsrc_find(const WeightSrc *w, const char *name) {
    for (size_t f = 0; f < w->n_files; f++) {
        const StTensor *t = safetensors_find(&w->files[f], name);
        if (t) return t;
    }
    return NULL;
}

void wsrc_drop_pages(const WeightSrc *w, const StTensor *t) {
    const char *p = t->data;
    for (size_t f = 0; f < w->n_files; f++) {
        const char *map = w->files[f].map;
        if (map && p >= map && p + t->nbytes <= map + w->files[f].map_size)
            kg_drop_pages(p, t->nbytes);
    }
}

void wsrc_close(WeightSrc *w) {
    for (size_t f = 0; f < w->n_files; f++)
        safetensors_close(&w->files[f]);
    free(w->files);
    *w = (WeightSrc){0};
}
