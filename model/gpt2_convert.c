// gpt2_convert.c — any model directory gpt2_open reads (safetensors, shards, a PyTorch
// checkpoint, a Hugging Face cache snapshot) written once as a clean model.safetensors
// directory, so that later loads map it in place with no parsing; optionally with the layer
// matrices in q8_0/q4_0 blocks, so that a quantized model loads without quantizing.
//
// Progress (base/progress.h, to the caller's stream) counts bytes of weights: those each
// float conversion produces, then those safetensors_save_meta writes to the file.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "base/progress.h"
#include "gpt2.h"

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

static int is_copied(const char *name) {
    for (size_t i = 0; i < sizeof COPIED / sizeof COPIED[0]; i++)
        if (!strcmp(name, COPIED[i])) return 1;
    return kg_ends_with(name, ".model") || kg_ends_with(name, ".spiece"); // SentencePiece
}

// Copies the regular file from to to (through a temporary name, renamed when complete);
// nothing when both are the same file (a hard link).
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

// Elements of a tensor to write (a vector or a matrix).
static size_t write_elems(const StWrite *w) {
    return w->ndim == 2 ? w->shape[0] * w->shape[1] : w->shape[0];
}

// Bytes of a tensor in the file (q8_0/q4_0: its blocks).
static size_t write_bytes(const StWrite *w) { return kg_dtype_bytes(w->dtype, write_elems(w)); }

// The tensors to write (gpt2_export_tensors: each as m holds it or as the files do, names in
// *names_out), those not in blocks converted to a float dtype unless it is KG_DTYPE_AUTO;
// conversions go into *owned, each advanced on pr as it is done.
// The caller frees *out, *names_out and *owned.
static int collect_tensors(const Gpt2 *m, KgDtype dtype, KgProgress *pr, StWrite **out,
                           char (**names_out)[80], size_t *n_out, void **owned, char *err) {
    size_t cap = gpt2_param_tensors(&m->config, NULL) + 1, n = 0, bytes = 0;
    StWrite *w = calloc(cap, sizeof *w);
    char(*names)[80] = *names_out = calloc(cap, sizeof *names);
    int to_float = dtype != KG_DTYPE_AUTO && !kg_dtype_quantized(dtype);
    if (!w || !names || gpt2_export_tensors(m, w, names, &n)) {
        free(w);
        return kg_err(err, KG_ENOMEM, "convert: out of memory");
    }
    for (size_t i = 0; to_float && i < n; i++)
        if (w[i].dtype != dtype) bytes += kg_dtype_bytes(dtype, write_elems(&w[i]));
    char *cursor = *owned = bytes ? malloc(bytes) : NULL;
    if (bytes && !cursor) {
        free(w);
        return kg_err(err, KG_ENOMEM, "convert: out of memory for %zu bytes", bytes);
    }
    uint64_t written = 0; // the file's bytes of weights, once converted
    for (size_t i = 0; i < n; i++)
        written += to_float && w[i].dtype != dtype ? kg_dtype_bytes(dtype, write_elems(&w[i]))
                                                   : write_bytes(&w[i]);
    progress_start(pr, pr->out, "convert", (uint64_t)bytes + written, 10);
    for (size_t i = 0; to_float && i < n; i++)
        if (w[i].dtype != dtype) {
            kg_dtype_convert(cursor, dtype, w[i].data, w[i].dtype, write_elems(&w[i]));
            w[i].dtype = dtype;
            w[i].data = cursor;
            cursor += kg_dtype_bytes(dtype, write_elems(&w[i]));
            progress_advance(pr, kg_dtype_bytes(dtype, write_elems(&w[i])));
        }
    *out = w;
    *n_out = n;
    return KG_OK;
}

// Opens src as gpt2_convert will write it: quantized at load for a q8_0/q4_0 dtype (the same
// blocks a load with that dtype serves, bit for bit), else as stored; a quantized src cannot
// go back to floats (KG_EUNSUP).
static int open_source(Gpt2 *m, const char *src, KgBackend *be, KgDtype dtype, char *err) {
    int quantize = dtype != KG_DTYPE_AUTO && kg_dtype_quantized(dtype);
    int rc = gpt2_open(m, src, be, quantize ? dtype : KG_DTYPE_AUTO, err);
    if (rc || quantize || dtype == KG_DTYPE_AUTO || !kg_dtype_quantized(m->dtype)) return rc;
    kg_err(err, KG_EUNSUP,
           "convert: %s holds %s blocks; they do not convert back to %s (convert the original "
           "model)",
           src, kg_dtype_name(m->dtype), kg_dtype_name(dtype));
    gpt2_close(m);
    return KG_EUNSUP;
}

int gpt2_convert(const char *src, const char *out, KgDtype dtype, FILE *progress, char *what,
                 char *err) {
    if (dtype != KG_DTYPE_AUTO && (dtype < KG_F32 || dtype > KG_Q4_0))
        return kg_err(err, KG_EINVAL, "convert: unknown dtype %d", (int)dtype);
    // in place, the source's weights would be replaced (and blocks never convert back): any
    // spelling of src (D/, ./D, a symlink to it) is the same directory
    struct stat a, b;
    if (stat(src, &a) == 0 && stat(out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return kg_err(err, KG_EINVAL,
                      "convert: %s is the source directory %s: converting in place would replace "
                      "its weights; write to another directory",
                      out, src);
    KgBackend *be = kg_cpu_backend_new(1, err);
    if (!be) return KG_ENOMEM;
    Gpt2 m;
    StWrite *w = NULL;
    char(*names)[80] = NULL;
    void *owned = NULL;
    size_t n = 0;
    char path[PATH_MAX], tmp[PATH_MAX + 8] = "";
    KgProgress pr = {.out = progress};
    int rc = open_source(&m, src, be, dtype, err); // every check a load makes
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
    // "format" as transformers' save_pretrained writes it; the blocks' scheme for gpt2_open
    const char *quant = m.dtype == KG_Q8_0 ? "q8_0" : m.dtype == KG_Q4_0 ? "q4_0" : NULL;
    const char *meta[] = {"format", "pt", quant ? GPT2_META_QUANT : NULL, quant, NULL};
    if ((rc = collect_tensors(&m, dtype, &pr, &w, &names, &n, &owned, err)) ||
        (rc = safetensors_save_meta(tmp, w, n, meta, &pr, err)))
        goto end;
    progress_end(&pr, pr.done);
    if (rename(tmp, path) != 0) {
        rc = kg_err(err, KG_EIO, "rename %s: %s", tmp, strerror(errno));
        goto end;
    }
    rc = copy_side_files(src, out, err);
end:
    if (rc && tmp[0]) unlink(tmp);
    free(w);
    free(names);
    free(owned);
    gpt2_close(&m);
done:
    kg_backend_free(be);
    return rc;
}
