// gpt2_convert.c — any model directory gpt2_open reads (safetensors, shards, a PyTorch
// checkpoint, a Hugging Face cache snapshot) written once as a clean model.safetensors
// directory, so that later loads map it in place with no parsing.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt2.h"
#include "kg.h"

// The files besides the weights that a model directory carries: its config and whatever
// its tokenizer and generation defaults need.
static const char *const COPIED[] = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
};

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n > t && !strcmp(s + n - t, tail);
}

static int is_copied(const char *name) {
    for (size_t i = 0; i < sizeof COPIED / sizeof COPIED[0]; i++)
        if (!strcmp(name, COPIED[i])) return 1;
    return ends_with(name, ".model") || ends_with(name, ".spiece"); // SentencePiece
}

// Copies the regular file from to to (through a temporary name, renamed when complete);
// nothing when both are the same file (converting a directory in place).
static int copy_file(const char *from, const char *to, char *err) {
    struct stat a, b;
    if (stat(from, &a) != 0 || !S_ISREG(a.st_mode)) return KG_OK; // not a file: not ours
    if (stat(to, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return KG_OK;
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    int rc = kg_copy_file(from, tmp, err);
    if (!rc && rename(tmp, to) != 0)
        rc = kg_err(err, KG_EIO, "rename %s: %s", tmp, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

static int copy_side_files(const char *src, const char *out, char *err) {
    DIR *d = opendir(src);
    if (!d) return kg_err(err, KG_EIO, "opendir %s: %s", src, strerror(errno));
    int rc = KG_OK;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        char from[PATH_MAX], to[PATH_MAX];
        if (!is_copied(e->d_name)) continue;
        if (kg_path_join(from, sizeof from, src, e->d_name) ||
            kg_path_join(to, sizeof to, out, e->d_name))
            rc = kg_err(err, KG_EINVAL, "%s: path too long", e->d_name);
        else
            rc = copy_file(from, to, err);
    }
    closedir(d);
    return rc;
}

// The model's tensors in parameter order (gpt2_param_tensors: GPT2LMHeadModel names, in *p,
// which the names point into), each in its stored dtype or converted to dtype; conversions
// go into *owned. The caller frees *out, *p and *owned.
static int collect_tensors(const Gpt2 *m, int dtype, StWrite **out, Gpt2ParamTensor **pout,
                           size_t *n_out, void **owned, char *err) {
    size_t n = gpt2_param_tensors(&m->config, NULL), bytes = 0;
    Gpt2ParamTensor *p = *pout = calloc(n, sizeof *p);
    const StTensor **t = calloc(n, sizeof *t);
    StWrite *w = calloc(n, sizeof *w);
    int rc = KG_OK;
    if (!p || !t || !w) {
        rc = kg_err(err, KG_ENOMEM, "convert: out of memory");
        goto end;
    }
    gpt2_param_tensors(&m->config, p);
    for (size_t i = 0; i < n; i++) { // gpt2_open found each of them, with or without prefix
        t[i] = wsrc_find(&m->src, p[i].name);
        if (!t[i] && !strncmp(p[i].name, "transformer.", 12))
            t[i] = wsrc_find(&m->src, p[i].name + 12);
        KgDtype to = dtype == GPT2_DTYPE_AUTO ? t[i]->dtype : (KgDtype)dtype;
        if (to != t[i]->dtype) bytes += t[i]->n_elems * kg_dtype_size(to);
    }
    char *cursor = *owned = bytes ? malloc(bytes) : NULL;
    if (bytes && !cursor) {
        rc = kg_err(err, KG_ENOMEM, "convert: out of memory for %zu bytes", bytes);
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        KgDtype to = dtype == GPT2_DTYPE_AUTO ? t[i]->dtype : (KgDtype)dtype;
        w[i] = (StWrite){p[i].name, to, p[i].ndim, {p[i].shape[0], p[i].shape[1]}, t[i]->data};
        if (to != t[i]->dtype) {
            kg_dtype_convert(cursor, to, t[i]->data, t[i]->dtype, t[i]->n_elems);
            w[i].data = cursor;
            cursor += t[i]->n_elems * kg_dtype_size(to);
        }
    }
    *out = w;
    *n_out = n;
    w = NULL;
end:
    free(t);
    free(w);
    return rc;
}

int gpt2_convert(const char *src, const char *out, int dtype, char *what, char *err) {
    if (dtype != GPT2_DTYPE_AUTO && dtype != KG_F32 && dtype != KG_F16 && dtype != KG_BF16)
        return kg_err(err, KG_EINVAL, "convert: unknown dtype %d", dtype);
    KgBackend *be = kg_cpu_backend_new(1, err);
    if (!be) return KG_ENOMEM;
    Gpt2 m;
    StWrite *w = NULL;
    Gpt2ParamTensor *p = NULL;
    void *owned = NULL;
    size_t n = 0;
    char path[PATH_MAX], tmp[PATH_MAX + 8] = "";
    int rc = gpt2_open(&m, src, be, GPT2_DTYPE_AUTO, err); // every check a load makes
    if (rc) goto done;
    if (what) snprintf(what, KG_ERRLEN, "%s", m.src.what);
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        rc = kg_err(err, KG_EIO, "mkdir %s: %s", out, strerror(errno));
        goto end;
    }
    if (kg_path_join(path, sizeof path, out, "model.safetensors")) {
        rc = kg_err(err, KG_EINVAL, "%s: path too long", out);
        goto end;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if ((rc = collect_tensors(&m, dtype, &w, &p, &n, &owned, err)) ||
        (rc = safetensors_save(tmp, w, n, err)))
        goto end;
    if (rename(tmp, path) != 0) {
        rc = kg_err(err, KG_EIO, "rename %s: %s", tmp, strerror(errno));
        goto end;
    }
    rc = copy_side_files(src, out, err);
end:
    if (rc && tmp[0]) unlink(tmp);
    free(w);
    free(p);
    free(owned);
    gpt2_close(&m);
done:
    kg_backend_free(be);
    return rc;
}
