// train_eval.c — what kogpt2-train does with a model without training it (train.h): export a
// checkpoint as a servable model, and evaluate a model on held-out text (val.h).
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/kg.h"
#include "ckpt.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train.h"

// What export must not write over: its source (the checkpoint would go, train_state.bin
// with it), a checkpoint, a file that is no model's (a data directory's shards, a user's
// notes: --force replaces only a model), and without force a model. KG_EINVAL naming the
// directory and what is in the way.
static int export_check_out(const char *from, const char *out, int force, char *err) {
    struct stat a, b;
    if (!stat(from, &a) && !stat(out, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return kg_err(err, KG_EINVAL,
                      "--out %s is --from %s itself: the export would replace its source; "
                      "choose another --out",
                      out, from);
    CkptDirKind kind;
    char first[256];
    int rc = ckpt_dir_kind(out, &kind, first, sizeof first, err);
    if (rc) return rc;
    if (kind == CKPT_DIR_CKPT)
        return kg_err(err, KG_EINVAL,
                      "--out %s holds a checkpoint (" CKPT_STATE_FILE
                      "): the export would replace it; choose another --out",
                      out);
    if (kind == CKPT_DIR_OTHER)
        return kg_err(err, KG_EINVAL,
                      "--out %s holds %s, which is no model's file: --force replaces only a model "
                      "(config.json, model.safetensors, the tokenizer); move it, or choose "
                      "another --out",
                      out, first);
    if (kind == CKPT_DIR_MODEL && !force)
        return kg_err(err, KG_EINVAL,
                      "--out %s holds a model (%s): --force replaces it, or choose another --out",
                      out, first);
    return KG_OK;
}

int train_export(const char *from, const char *out, KgDtype dtype, int force, char *err) {
    int lock_fd = -1;
    char tok_file[4096];
    KgBackend *be = NULL;
    Gpt2 m;
    int have_model = 0;
    int rc = ckpt_lock(out, "kogpt2-train export", &lock_fd, err);
    if (!rc) rc = ckpt_recover(out, err);
    if (!rc) rc = export_check_out(from, out, force, err);
    if (!rc) rc = ckpt_tokenizer_file(from, tok_file, sizeof tok_file, err);
    if (!rc && !(be = kg_cpu_backend_new(1, err))) rc = KG_ENOMEM;
    Gpt2Config unused = {0}; // the config comes from `from`
    if (!rc && !(rc = gpt2_train_model_new(&m, &unused, from, be, 0, err))) {
        have_model = 1;
        rc = ckpt_save(out, &m, dtype, tok_file, NULL, NULL, err);
    }
    if (have_model) gpt2_close(&m);
    if (be) kg_backend_free(be);
    ckpt_unlock(out, lock_fd);
    return rc;
}

int train_eval(const char *model_dir, const char *path, size_t T, size_t B, uint64_t max_tokens,
               const char *device, int threads, KgDtype precision, FILE *log, TrainEval *out,
               char *err) {
    char tok_file[4096];
    KgBackend *be = NULL;
    Tokenizer *tok = NULL;
    Gpt2 m;
    int have_model = 0;
    Gpt2Train *t = NULL;
    ValSet v = {0};
    int *inputs = NULL, *targets = NULL;
    Dist d = {.rank = 0, .size = 1}; // one process: every collective is the identity
    int rc = ckpt_tokenizer_file(model_dir, tok_file, sizeof tok_file, err);
    if (!rc) rc = tok_open(&tok, tok_file, err);
    if (!rc && !(be = kg_backend_new(device, threads, log, err))) rc = KG_EIO;
    if (!rc && be->ops->mixed_backward) be->mixed = precision; // as train_run (a GPU)
    Gpt2Config unused = {0};                                   // the config comes from model_dir
    if (!rc && !(rc = gpt2_train_model_new(&m, &unused, model_dir, be, 0, err))) have_model = 1;
    if (!rc && !T) T = m.config.n_ctx;
    if (!rc && T > m.config.n_ctx)
        rc = kg_err(err, KG_EINVAL, "eval: --seq %zu exceeds the model's n_ctx %zu", T,
                    m.config.n_ctx);
    if (!rc) rc = val_load(&v, path, tok, m.config.vocab_size, max_tokens, err);
    if (!rc && !(t = gpt2_train_new(&m, B, T, 0, err))) rc = KG_ENOMEM;
    if (!rc && (!(inputs = malloc(B * T * sizeof *inputs)) ||
                !(targets = malloc(B * T * sizeof *targets))))
        rc = kg_err(err, KG_ENOMEM, "eval: out of memory");
    if (!rc) rc = val_score(&m, t, &v, &d, B, T, inputs, targets, &out->res, err);
    if (!rc) {
        out->docs = v.docs;
        out->bytes = v.bytes;
        out->text_bytes = v.text_bytes;
        out->T = T;
    }
    free(inputs);
    free(targets);
    val_free(&v);
    if (t) gpt2_train_free(t);
    if (have_model) gpt2_close(&m);
    if (be) kg_backend_free(be);
    tok_free(tok);
    return rc;
}
