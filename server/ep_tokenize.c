// ep_tokenize.c — POST /v1/tokenize and POST /v1/detokenize: the tokenizer alone.
//
//   /v1/tokenize {"text"} -> {tokens, pieces}
//   /v1/detokenize {"tokens"} -> {text}
//   At most --max-tokenize tokens either way (422): the reply's tree is ~100 bytes a token.
//   A text is encoded only up to that limit, and one longer than the limit's tokens can hold
//   (tok_max_bytes_per_token) is refused unread.
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "server/http/json_in.h"

enum MHD_Result ep_tokenize(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *text, *param = "model";
    const ApiModel *served;
    size_t len, n = 0;
    int *ids = NULL;
    int rc = api_model(app, j_req, &served, err);
    if (!rc) rc = json_str(j_req, param = "text", &text, &len, err);
    if (!rc && !text) rc = kg_err(err, KG_EINVAL, "text is required");
    if (!rc) rc = tok_encode_max(served->tok, text, len, app->max_tokenize, &ids, &n, err);
    if (rc == KG_ERANGE) // stopped at the limit, or refused by length before encoding
        kg_err(err, KG_ERANGE, "n_tokens (more than %zu) exceeds --max-tokenize (%zu)",
               app->max_tokenize, app->max_tokenize);
    if (rc) {
        free(ids);
        return srv_reply_kg(r, rc, err, param);
    }
    cJSON *j_root = cJSON_CreateObject(), *j_pieces = cJSON_CreateArray();
    if (!cJSON_AddItemToObject(j_root, "tokens", api_ids_json(ids, n)) ||
        !cJSON_AddItemToObject(j_root, "pieces", j_pieces)) {
        cJSON_Delete(j_pieces);
        goto oom;
    }
    for (size_t i = 0; i < n; i++)
        if (!cJSON_AddItemToArray(j_pieces, cJSON_CreateString(tok_piece(served->tok, ids[i]))))
            goto oom;
    free(ids);
    return srv_reply_json(r, 200, j_root);
oom:
    free(ids);
    cJSON_Delete(j_root);
    return srv_reply_error(r, 503, "out of memory", NULL);
}

enum MHD_Result ep_detokenize(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served;
    int *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    const cJSON *j_tokens = cJSON_GetObjectItemCaseSensitive(j_req, "tokens");
    int rc = api_model(app, j_req, &served, err);
    if (!rc) param = "tokens";
    if (!rc)
        rc = j_tokens
                 ? json_ids(j_tokens, "tokens", &ids, &n, 0, (long long)served->vocab_size - 1, err)
                 : kg_err(err, KG_EINVAL, "tokens is required");
    if (!rc && n > app->max_tokenize)
        rc = kg_err(err, KG_ERANGE, "n_tokens (%zu) exceeds --max-tokenize (%zu)", n,
                    app->max_tokenize);
    size_t len = 0;
    if (!rc) rc = tok_decode(served->tok, ids, n, &text, &len, err);
    // a byte token 0x00 decodes to a NUL, which a JSON string of cJSON would silently end at:
    // refused, never cut
    const char *nul = rc ? NULL : memchr(text, 0, len);
    if (nul)
        rc = kg_err(err, KG_ERANGE, "tokens: their text holds a NUL byte (at byte %zu)",
                    (size_t)(nul - text));
    free(ids);
    if (rc) {
        free(text);
        return srv_reply_kg(r, rc, err, param);
    }
    cJSON *j_root = cJSON_CreateObject();
    if (!cJSON_AddStringToObject(j_root, "text", text)) {
        cJSON_Delete(j_root);
        j_root = NULL;
    }
    free(text);
    return srv_reply_json(r, 200, j_root); // NULL: srv_reply_json answers 503
}
