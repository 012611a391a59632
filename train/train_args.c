// train_args.c — a run's arguments as train_args.json in its checkpoints (train.h), so that
// `kogpt2-train train --resume DIR` continues a run with no other flag.
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "base/kg_json.h"
#include "train.h"

// The fields train_args.json holds besides the paths: name, where in TrainArgs, its kind,
// and an upper bound where the kind's own would let a damaged file hang or overflow a run
// (0: the kind's).
typedef enum { F_U64, F_SIZE, F_FLOAT, F_INT, F_UNSIGNED } FieldKind;
typedef struct {
    const char *name;
    size_t offset;
    FieldKind kind;
    double hi;
} Field;

#define FIELD(name, member, kind)                                                                  \
    { name, offsetof(TrainArgs, member), kind, 0 }
static const Field FIELDS[] = {
    FIELD("steps", steps, F_U64),
    FIELD("batch", B, F_SIZE),
    FIELD("seq", T, F_SIZE),
    {"grad_accum", offsetof(TrainArgs, grad_accum), F_SIZE, CKPT_MAX_GRAD_ACCUM},
    FIELD("lr", lr, F_FLOAT),
    FIELD("min_lr", min_lr, F_FLOAT), // -1: lr / 10
    FIELD("warmup", warmup, F_U64),
    FIELD("weight_decay", weight_decay, F_FLOAT),
    FIELD("clip", clip, F_FLOAT),
    FIELD("seed", seed, F_U64),
    FIELD("val_every", val_every, F_U64),
    FIELD("val_tokens", val_tokens, F_U64),
    FIELD("save_every", save_every, F_U64),
    FIELD("log_every", log_every, F_U64),
    FIELD("keep", keep, F_UNSIGNED),
    FIELD("recompute", recompute, F_INT),
    FIELD("loss_scale", loss_scale, F_FLOAT),
    FIELD("zero", zero, F_INT),
    FIELD("bucket_mb", bucket_mb, F_FLOAT),
};

// An absolute path for p where it exists (a resumed run may start in another directory).
static cJSON *path_json(const char *p) {
    if (!p) return cJSON_CreateNull();
    char abs[PATH_MAX];
    return cJSON_CreateString(realpath(p, abs) ? abs : p);
}

char *train_args_json(const TrainArgs *a) {
    cJSON *j_root = cJSON_CreateObject();
    char *text = NULL;
    if (!j_root || !cJSON_AddItemToObject(j_root, "data", path_json(a->data_dir)) ||
        !cJSON_AddItemToObject(j_root, "val", path_json(a->val)))
        goto end;
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const void *p = (const char *)a + FIELDS[i].offset;
        double x = FIELDS[i].kind == F_U64        ? (double)*(const uint64_t *)p
                   : FIELDS[i].kind == F_SIZE     ? (double)*(const size_t *)p
                   : FIELDS[i].kind == F_FLOAT    ? (double)*(const float *)p
                   : FIELDS[i].kind == F_UNSIGNED ? (double)*(const unsigned *)p
                                                  : (double)*(const int *)p;
        if (!cJSON_AddNumberToObject(j_root, FIELDS[i].name, x)) goto end;
    }
    const char *prec = a->precision == KG_BF16 ? "bf16" : a->precision == KG_F16 ? "fp16" : "f32";
    if (!cJSON_AddStringToObject(j_root, "precision", prec)) goto end;
    const char *wire = a->wire == KG_BF16 ? "bf16" : a->wire == KG_F16 ? "f16" : "f32";
    if (!cJSON_AddStringToObject(j_root, "wire", wire)) goto end;
    text = cJSON_Print(j_root);
end:
    cJSON_Delete(j_root);
    return text;
}

// Sets the field f of a from j (checked: a number in the field's range).
static int field_set(TrainArgs *a, const Field *f, const cJSON *j, const char *path, char *err) {
    double x = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    void *p = (char *)a + f->offset;
    int whole = f->kind != F_FLOAT;
    double lo = f->kind == F_FLOAT ? -1 : 0;
    double hi = f->kind == F_INT || f->kind == F_UNSIGNED ? (double)INT_MAX : 1e18;
    if (!(x >= lo && x <= hi) || (whole && x != floor(x)))
        return kg_err(err, KG_EFORMAT, "%s: \"%s\" is not a %s", path, f->name,
                      whole ? "count" : "number");
    if (f->hi && x > f->hi)
        return kg_err(err, KG_EFORMAT, "%s: \"%s\" is %.0f, over its limit of %.0f", path, f->name,
                      x, f->hi);
    if (f->kind == F_U64)
        *(uint64_t *)p = (uint64_t)x;
    else if (f->kind == F_SIZE)
        *(size_t *)p = (size_t)x;
    else if (f->kind == F_FLOAT)
        *(float *)p = (float)x;
    else if (f->kind == F_UNSIGNED)
        *(unsigned *)p = (unsigned)x;
    else
        *(int *)p = (int)x;
    return KG_OK;
}

// A path field into *dst, its text copied into the owned block at *at.
static int path_set(const char **dst, const cJSON *j, char **at) {
    if (!cJSON_IsString(j)) return cJSON_IsNull(j) || !j ? KG_OK : KG_EFORMAT;
    size_t n = strlen(j->valuestring) + 1;
    memcpy(*at, j->valuestring, n);
    *dst = *at;
    *at += n;
    return KG_OK;
}

int train_args_load(TrainArgs *a, const char *dir, char **owned, char *err) {
    char path[4096];
    *owned = NULL;
    kg_path_join(path, sizeof path, dir, TRAIN_ARGS_FILE);
    char *text = NULL;
    size_t len = 0;
    int rc = kg_read_file(path, 1 << 20, &text, &len, err);
    if (rc) return rc;
    cJSON *j_root = NULL;
    if ((rc = kg_json_check_nul(text, len, path, err))) goto end;
    if (!(j_root = cJSON_ParseWithLength(text, len)) || !cJSON_IsObject(j_root)) {
        rc = kg_err(err, KG_EFORMAT, "%s: not a JSON object", path);
        goto end;
    }
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0] && !rc; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_root, FIELDS[i].name);
        if (j) rc = field_set(a, &FIELDS[i], j, path, err);
    }
    if (rc) goto end;
    const cJSON *j_prec = cJSON_GetObjectItemCaseSensitive(j_root, "precision");
    const char *prec = cJSON_IsString(j_prec) ? j_prec->valuestring : "f32";
    if (!strcmp(prec, "bf16") || !strcmp(prec, "fp16") || !strcmp(prec, "f32"))
        a->precision = !strcmp(prec, "bf16") ? KG_BF16 : !strcmp(prec, "fp16") ? KG_F16 : KG_F32;
    else
        rc = kg_err(err, KG_EFORMAT, "%s: \"precision\" is not f32, bf16 or fp16", path);
    const cJSON *j_wire = cJSON_GetObjectItemCaseSensitive(j_root, "wire");
    const char *wire = cJSON_IsString(j_wire) ? j_wire->valuestring : "f32";
    if (!rc && (!strcmp(wire, "bf16") || !strcmp(wire, "f16") || !strcmp(wire, "f32")))
        a->wire = !strcmp(wire, "bf16") ? KG_BF16 : !strcmp(wire, "f16") ? KG_F16 : KG_F32;
    else if (!rc)
        rc = kg_err(err, KG_EFORMAT, "%s: \"wire\" is not f32, bf16 or f16", path);
    // the paths, copied into one block the caller frees (text is at least as long as both)
    char *at = *owned = malloc(len + 2);
    if (!rc && !at) rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
    if (!rc && (path_set(&a->data_dir, cJSON_GetObjectItemCaseSensitive(j_root, "data"), &at) ||
                path_set(&a->val, cJSON_GetObjectItemCaseSensitive(j_root, "val"), &at)))
        rc = kg_err(err, KG_EFORMAT, "%s: \"data\" or \"val\" is not a path", path);
end:
    cJSON_Delete(j_root);
    free(text);
    if (rc) {
        free(*owned);
        *owned = NULL;
    }
    return rc;
}
