// chat_prompt.c — messages into one prompt: content checked and joined, rendered by the chat
// template, encoded with the template's bos/eos texts as their ids (chat_prompt.h).
#include "chat_prompt.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/http/json_in.h"

int chat_turns_init(ChatTurns *t, size_t cap, char *err) {
    *t = (ChatTurns){
        .msgs = calloc(cap, sizeof *t->msgs), .texts = calloc(cap, sizeof *t->texts), .cap = cap};
    return t->msgs && t->texts ? KG_OK : kg_err(err, KG_ENOMEM, "out of memory");
}

void chat_turns_free(ChatTurns *t) {
    for (size_t i = 0; t->texts && i < t->n; i++)
        free(t->texts[i]);
    free(t->texts);
    free(t->msgs);
    *t = (ChatTurns){0};
}

// 1 when type is one of types (NULL-terminated).
static int chat_type_in(const char *type, const char *const *types) {
    for (; *types; types++)
        if (!strcmp(type, *types)) return 1;
    return 0;
}

// Text parts [{"type", "text"}, ...] of the given types joined into *out (malloc'd).
static int chat_content_parts(const cJSON *j, const char *const *types, const char *where,
                              char **out, char *err) {
    for (const cJSON *p = j->child; p; p = p->next) {
        const cJSON *j_type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *j_text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(j_type) || !chat_type_in(j_type->valuestring, types) ||
            !cJSON_IsString(j_text))
            return kg_err(err, KG_EUNSUP, "%s.content: only text parts are supported", where);
    }
    KgBuf text = {0};
    for (const cJSON *p = j->child; p; p = p->next) {
        const char *part = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        if (buf_append(&text, part, strlen(part))) {
            buf_free(&text);
            return kg_err(err, KG_ENOMEM, "out of memory");
        }
    }
    *out = buf_take(&text, NULL);
    return *out ? KG_OK : kg_err(err, KG_ENOMEM, "out of memory");
}

// A message's content: a string, or an array of text parts (joined). *out is malloc'd.
static int chat_content(const cJSON *j, const char *const *types, const char *where, char **out,
                        char *err) {
    if (cJSON_IsArray(j)) return chat_content_parts(j, types, where, out, err);
    if (j && !cJSON_IsNull(j) && !cJSON_IsString(j))
        return kg_err(err, KG_EINVAL, "%s.content must be a string or an array of text parts",
                      where);
    *out = strdup(cJSON_IsString(j) ? j->valuestring : ""); // absent or null: ""
    return *out ? KG_OK : kg_err(err, KG_ENOMEM, "out of memory");
}

int chat_turns_add(ChatTurns *t, const char *role, const cJSON *j_content,
                   const char *const *part_types, const char *where, char *err) {
    if (t->n == t->cap) return kg_err(err, KG_ERANGE, "at most %zu messages", t->cap);
    if (!json_utf8_valid(role, strlen(role), NULL))
        return kg_err(err, KG_EINVAL, "%s.role: invalid UTF-8", where);
    char *text = NULL;
    int rc = chat_content(j_content, part_types, where, &text, err);
    if (rc) return rc;
    size_t bad;
    if (!json_utf8_valid(text, strlen(text), &bad)) {
        free(text);
        return kg_err(err, KG_EINVAL, "%s.content: invalid UTF-8 at byte %zu", where, bad);
    }
    t->texts[t->n] = text;
    t->msgs[t->n++] = (ChatMessage){.role = role, .content = text};
    return KG_OK;
}

// The first bos/eos text in p (NUL-terminated, len bytes): its offset (len: none), its id
// and its length.
static size_t chat_next_special(const ApiModel *served, const char *p, size_t len, int *id,
                                size_t *id_len) {
    TokSpecial sp = tok_special(served->tok);
    const char *texts[2] = {served->bos_token, served->eos_token};
    const int ids[2] = {sp.bos, sp.eos};
    size_t at = len;
    for (int k = 0; k < 2; k++) {
        const char *f = ids[k] >= 0 && *texts[k] ? strstr(p, texts[k]) : NULL;
        if (f && (size_t)(f - p) < at) {
            at = (size_t)(f - p);
            *id = ids[k];
            *id_len = strlen(texts[k]);
        }
    }
    return at;
}

// Encodes text[0..len) (NUL-terminated: a rendered template) with each bos/eos text as its id; each
// piece between them is checked as a prompt of its own (api_prompt_from), then the whole against
// n_ctx.
static int chat_encode_split(const ApiModel *served, const char *text, size_t len, int **ids,
                             size_t *n, char *err) {
    if (len == 0) return api_prompt_from(served, text, 0, NULL, "messages", ids, n, err); // empty
    KgBuf out = {0}; // (*n) ints
    int rc = KG_OK;
    for (size_t pos = 0; !rc && pos < len;) {
        int id = -1, *seg = NULL;
        size_t id_len = 0, n_seg = 0;
        size_t at = pos + chat_next_special(served, text + pos, len - pos, &id, &id_len);
        if (at > pos)
            rc = api_prompt_from(served, text + pos, at - pos, NULL, "messages", &seg, &n_seg, err);
        if (!rc && n_seg && buf_append(&out, seg, n_seg * sizeof *seg))
            rc = kg_err(err, KG_ENOMEM, "out of memory");
        if (!rc && at < len && buf_append(&out, &id, sizeof id))
            rc = kg_err(err, KG_ENOMEM, "out of memory");
        free(seg);
        pos = at + id_len;
    }
    *n = out.len / sizeof(int);
    if (!rc && *n > served->n_ctx)
        rc = kg_err(err, KG_ERANGE, "n_prompt_tokens (%zu) exceeds n_ctx (%zu)", *n, served->n_ctx);
    if (rc) {
        buf_free(&out);
        return rc;
    }
    *ids = (int *)(void *)buf_take(&out, NULL);
    return KG_OK;
}

int chat_turns_prompt(const ApiModel *served, const ChatTurns *t, int **ids, size_t *n, char *err) {
    if (!served->chat_template) return kg_err(err, KG_EUNSUP, "%s", served->chat_error);
    char *text = NULL;
    size_t len = 0;
    int rc = chat_template_render(served->chat_template, t->msgs, t->n, 1, served->bos_token,
                                  served->eos_token, &text, &len, err);
    if (!rc && served->chat_split_special)
        rc = chat_encode_split(served, text, len, ids, n, err);
    else if (!rc)
        rc = api_prompt_from(served, text, len, NULL, "messages", ids, n, err);
    free(text);
    return rc;
}

long long chat_max_tokens(const ApiModel *served, size_t n_prompt) {
    return n_prompt < served->n_ctx ? (long long)(served->n_ctx - n_prompt) : 1;
}
