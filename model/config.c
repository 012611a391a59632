#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "base/kg_json.h"

// Reads an optional integer field into *out within [lo, hi]; absent leaves *out alone.
static int json_size(const cJSON *j_root, const char *key, size_t *out, double lo, double hi,
                     char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_root, key);
    if (!j || cJSON_IsNull(j)) return KG_OK;
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= lo && v <= hi && v == floor(v)))
        return kg_err(err, KG_EFORMAT, "config.json: %s must be an integer in %.0f..%.0f", key, lo,
                      hi);
    *out = (size_t)v;
    return KG_OK;
}

// Token ids may be absent or null (-1).
static int json_token_id(const cJSON *j_root, const char *key, int *out, char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_root, key);
    if (!j || cJSON_IsNull(j)) return KG_OK;
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= 0 && v < GPT2_MAX_VOCAB && v == floor(v)))
        return kg_err(err, KG_EFORMAT, "config.json: %s must be a token id or null", key);
    *out = (int)v;
    return KG_OK;
}

// activation_function -> the kernels' switch. gelu_new, gelu_pytorch_tanh and gelu_fast are
// one function, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written three ways.
static const struct {
    const char *name;
    Gpt2Gelu kind;
} ACTIVATIONS[] = {
    {"gelu_new", GPT2_GELU_TANH},  {"gelu_pytorch_tanh", GPT2_GELU_TANH},
    {"gelu_fast", GPT2_GELU_TANH}, {"gelu", GPT2_GELU_ERF},
    {"relu", GPT2_RELU},
};

// GPT2Config options that change the math: refused unless at the value computed here, so a
// model is never served as something it is not. reorder_and_upcast_attn is accepted: it
// only computes the same attention in float32, as these kernels always do.
static int check_unsupported(const cJSON *j_root, char *err) {
    static const struct {
        const char *key;
        int supported; // the one boolean value this engine computes
        const char *why;
    } OPTS[] = {
        {"add_cross_attention", 0, "cross-attention needs an encoder"},
        {"scale_attn_by_inverse_layer_idx", 0, "attention is scaled by 1/sqrt(head size) only"},
        {"scale_attn_weights", 1, "attention is always scaled by 1/sqrt(head size)"},
    };
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_root, OPTS[i].key);
        if (!j || cJSON_IsNull(j)) continue;
        if (!cJSON_IsBool(j))
            return kg_err(err, KG_EFORMAT, "config.json: %s must be a boolean", OPTS[i].key);
        if (cJSON_IsTrue(j) != OPTS[i].supported)
            return kg_err(err, KG_EUNSUP, "config.json: %s %s is not computed here (%s)",
                          OPTS[i].key, OPTS[i].supported ? "false" : "true", OPTS[i].why);
    }
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j_root, "model_type"));
    char shown[41];
    if (type && strcmp(type, "gpt2"))
        return kg_err(err, KG_EUNSUP, "config.json: model_type %s is not computed here (gpt2 only)",
                      kg_show(shown, sizeof shown, type, strlen(type)));
    return KG_OK;
}

static int parse_fields(Gpt2Config *c, const cJSON *j_root, char *err) {
    int rc;
    size_t n_positions = 0;
    if ((rc = json_size(j_root, "n_layer", &c->n_layer, 1, GPT2_MAX_LAYERS, err)) ||
        (rc = json_size(j_root, "n_head", &c->n_head, 1, GPT2_MAX_EMBD, err)) ||
        (rc = json_size(j_root, "n_embd", &c->n_embd, 1, GPT2_MAX_EMBD, err)) ||
        (rc = json_size(j_root, "n_ctx", &c->n_ctx, 1, GPT2_MAX_CTX, err)) ||
        (rc = json_size(j_root, "n_positions", &n_positions, 1, GPT2_MAX_CTX, err)) ||
        (rc = json_size(j_root, "vocab_size", &c->vocab_size, 1, GPT2_MAX_VOCAB, err)) ||
        (rc = json_size(j_root, "n_inner", &c->n_inner, 1, 4.0 * GPT2_MAX_EMBD, err)) ||
        (rc = json_token_id(j_root, "bos_token_id", &c->bos_id, err)) ||
        (rc = json_token_id(j_root, "eos_token_id", &c->eos_id, err)) ||
        (rc = json_token_id(j_root, "pad_token_id", &c->pad_id, err)) ||
        (rc = check_unsupported(j_root, err)))
        return rc;
    if (n_positions) c->n_ctx = n_positions; // the size of wpe; n_ctx is its older alias

    const cJSON *j_eps = cJSON_GetObjectItemCaseSensitive(j_root, "layer_norm_epsilon");
    if (j_eps) {
        // checked as the float it becomes: 1e-50 would round to 0, 0.99999999999 to 1
        float eps = cJSON_IsNumber(j_eps) ? (float)j_eps->valuedouble : NAN;
        if (!(eps > 0 && eps < 1))
            return kg_err(err, KG_EFORMAT, "config.json: layer_norm_epsilon must be in (0, 1)");
        c->ln_eps = eps;
    }
    const cJSON *j_act = cJSON_GetObjectItemCaseSensitive(j_root, "activation_function");
    if (j_act) {
        const char *a = cJSON_GetStringValue(j_act);
        size_t i = 0, n = sizeof ACTIVATIONS / sizeof ACTIVATIONS[0];
        if (!a) return kg_err(err, KG_EFORMAT, "config.json: activation_function must be a string");
        while (i < n && strcmp(a, ACTIVATIONS[i].name))
            i++;
        char shown[41];
        if (i == n)
            return kg_err(err, KG_EUNSUP,
                          "config.json: activation_function %s is not computed here (gelu_new, "
                          "gelu, gelu_fast, gelu_pytorch_tanh or relu)",
                          kg_show(shown, sizeof shown, a, strlen(a)));
        c->gelu = ACTIVATIONS[i].kind;
    }
    const cJSON *j_tie = cJSON_GetObjectItemCaseSensitive(j_root, "tie_word_embeddings");
    if (j_tie) {
        if (!cJSON_IsBool(j_tie))
            return kg_err(err, KG_EFORMAT, "config.json: tie_word_embeddings must be a boolean");
        c->tie_embeddings = cJSON_IsTrue(j_tie);
    }
    return KG_OK;
}

Gpt2Config gpt2_config_shape(size_t n_layer, size_t n_embd, size_t n_head, size_t n_ctx,
                             size_t vocab_size) {
    return (Gpt2Config){.n_layer = n_layer,
                        .n_head = n_head,
                        .n_embd = n_embd,
                        .n_ctx = n_ctx,
                        .vocab_size = vocab_size,
                        .n_inner = 4 * n_embd,
                        .ln_eps = 1e-5f,
                        .gelu = GPT2_GELU_TANH,
                        .bos_id = -1,
                        .eos_id = -1,
                        .pad_id = -1,
                        .tie_embeddings = 1};
}

int gpt2_config_parse(Gpt2Config *c, const char *json, size_t len, char *err) {
    *c = gpt2_config_shape(12, 768, 12, 1024, 50257); // GPT2Config's defaults
    c->n_inner = 0;                                   // 4 n_embd of the file's n_embd, below
    // model_type "gpt2\u0000x" or an activation "relu\u0000" would compare as the prefix
    int rc = kg_json_check_nul(json, len, "config.json", err);
    if (rc) return rc;
    const char *end = NULL;
    cJSON *j_root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!j_root) return kg_err(err, KG_EFORMAT, "config.json: not valid JSON");
    while (end < json + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    if (end != json + len)
        rc = kg_err(err, KG_EFORMAT, "config.json: trailing bytes after the JSON value");
    else if (!cJSON_IsObject(j_root))
        rc = kg_err(err, KG_EFORMAT, "config.json: the top level must be an object");
    else
        rc = parse_fields(c, j_root, err);
    cJSON_Delete(j_root);
    if (rc) return rc;

    if (c->n_embd % c->n_head)
        return kg_err(err, KG_EFORMAT, "config.json: n_embd %zu is not divisible by n_head %zu",
                      c->n_embd, c->n_head);
    if (!c->n_inner) c->n_inner = 4 * c->n_embd;
    return KG_OK;
}

int gpt2_config_load(Gpt2Config *c, const char *path, char *err) {
    char *buf;
    size_t len;
    int rc = kg_read_file(path, 1 << 20, &buf, &len, err); // over 1 MiB: KG_EFORMAT
    if (rc) return rc;
    rc = gpt2_config_parse(c, buf, len, err);
    free(buf);
    return rc;
}

int gpt2_config_save(const Gpt2Config *c, const char *path, char *err) {
    int rc = KG_ENOMEM;
    char *text = NULL;
    cJSON *j_root = cJSON_CreateObject();
    if (!j_root) goto end;
    char eps[32];
    snprintf(eps, sizeof eps, "%.6g", (double)c->ln_eps);
    cJSON *j_arch = cJSON_AddArrayToObject(j_root, "architectures");
    if (!j_arch || !cJSON_AddItemToArray(j_arch, cJSON_CreateString("GPT2LMHeadModel"))) goto end;
    if (!cJSON_AddStringToObject(j_root, "model_type", "gpt2") ||
        !cJSON_AddNumberToObject(j_root, "n_layer", (double)c->n_layer) ||
        !cJSON_AddNumberToObject(j_root, "n_head", (double)c->n_head) ||
        !cJSON_AddNumberToObject(j_root, "n_embd", (double)c->n_embd) ||
        !cJSON_AddNumberToObject(j_root, "n_positions", (double)c->n_ctx) ||
        !cJSON_AddNumberToObject(j_root, "n_ctx", (double)c->n_ctx) ||
        !cJSON_AddNumberToObject(j_root, "vocab_size", (double)c->vocab_size) ||
        !cJSON_AddNumberToObject(j_root, "n_inner", (double)c->n_inner) ||
        // the float's shortest decimal (1e-05, not 9.99999974737875e-06)
        !cJSON_AddNumberToObject(j_root, "layer_norm_epsilon", strtod(eps, NULL)) ||
        !cJSON_AddStringToObject(j_root, "activation_function",
                                 c->gelu == GPT2_GELU_ERF ? "gelu"
                                 : c->gelu == GPT2_RELU   ? "relu"
                                                          : "gelu_new") ||
        !cJSON_AddBoolToObject(j_root, "tie_word_embeddings", c->tie_embeddings))
        goto end;
    const char *ids[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
    const int vals[] = {c->bos_id, c->eos_id, c->pad_id};
    for (int i = 0; i < 3; i++) {
        cJSON *j = vals[i] >= 0 ? cJSON_CreateNumber(vals[i]) : cJSON_CreateNull();
        if (!j || !cJSON_AddItemToObject(j_root, ids[i], j)) goto end;
    }
    text = cJSON_Print(j_root);
    if (!text) goto end;
    FILE *f = fopen(path, "wb");
    if (!f) {
        rc = kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
        goto end;
    }
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (fclose(f) != 0 || !ok) {
        rc = kg_err(err, KG_EIO, "write %s: %s", path, strerror(errno));
        goto end;
    }
    rc = KG_OK;
end:
    if (rc == KG_ENOMEM) kg_err(err, rc, "%s: out of memory", path);
    cJSON_free(text);
    cJSON_Delete(j_root);
    return rc;
}
