// test_server_chat_prompt.c — server/chat_prompt.c, messages into one prompt for
// /v1/chat/completions and /v1/responses (issue 33 item 6: reached only end to end before):
// content as a string, null or text parts, each refusal with its code; the rendering by the
// default model's own chat template and its encoding, where the template's "</s>" must become
// the end-of-text id rather than the characters < / s > (the SentencePiece split); the
// context bound; the reply's default length.
//
// The expected ids are libsentencepiece's (Debian's python3-sentencepiece 0.1.97 on
// models/default/kogpt2-default.model, the shipped tokenizer), one encode per text between the
// special tokens, as Hugging Face's tokenizers treat a rendered template:
//   sp.encode("안녕하세요\n") = [8302, 1790, 13]       sp.encode("안녕\n네") = [8302, 13, 10263]
//   sp.encode("잘 가\n") = [317, 285, 13]              eos_id() = 2
//   sp.encode("</s>안녕하세요\n") = [711, 10561, 10333, 10587, 10289, 11253, 1790, 13]
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_prompt.h"
#include "check.h"

// models/default/tokenizer_config.json's chat_template (the question after </s>, a newline)
static const char DEFAULT_TEMPLATE[] =
    "{% for m in messages %}{% if m.role == 'user' %}{{ eos_token + m.content + '\\n' }}"
    "{% elif m.role == 'assistant' %}{{ m.content }}{% endif %}{% endfor %}";
static const char *const TEXT_PARTS[] = {"text", NULL};

static int ids_equal(const int *got, size_t n, const int *want, size_t n_want) {
    if (n != n_want) return 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void print_ids(const char *what, const int *ids, size_t n) {
    printf("%s:", what);
    for (size_t i = 0; i < n; i++)
        printf(" %d", ids[i]);
    printf("\n");
}

// Adds (role, content JSON) to t: its code, err filled.
static int add(ChatTurns *t, const char *role, const char *content_json, char *err) {
    cJSON *j = content_json ? cJSON_Parse(content_json) : NULL;
    REQUIRE(!content_json || j, "bad test JSON: %s", content_json);
    int rc = chat_turns_add(t, role, j, TEXT_PARTS, "messages[0]", err);
    cJSON_Delete(j);
    return rc;
}

static void test_turns(void) {
    ChatTurns t;
    char err[KG_ERRLEN];
    REQUIRE(chat_turns_init(&t, 3, err) == KG_OK, "%s", err);
    CHECK(add(&t, "user", "\"안녕\"", err) == KG_OK && !strcmp(t.msgs[0].content, "안녕"));
    CHECK(add(&t, "assistant", "null", err) == KG_OK && !strcmp(t.msgs[1].content, ""));
    CHECK(add(&t, "user",
              "[{\"type\": \"text\", \"text\": \"안녕\"}, {\"type\": \"text\", \"text\": "
              "\"하세요\"}]",
              err) == KG_OK);
    CHECK(!strcmp(t.msgs[2].content, "안녕하세요") && !strcmp(t.msgs[2].role, "user"));
    CHECK(t.n == 3);
    CHECK(add(&t, "user", "\"one too many\"", err) == KG_ERANGE && strstr(err, "at most 3"));
    chat_turns_free(&t);
    CHECK(t.n == 0 && t.msgs == NULL);

    REQUIRE(chat_turns_init(&t, 8, err) == KG_OK, "%s", err);
    CHECK(add(&t, "user", NULL, err) == KG_OK && !strcmp(t.msgs[0].content, "")); // absent
    CHECK(add(&t, "user", "5", err) == KG_EINVAL && strstr(err, "messages[0].content"));
    CHECK(add(&t, "user", "[{\"type\": \"image_url\"}]", err) == KG_EUNSUP &&
          strstr(err, "only text parts"));
    CHECK(add(&t, "user", "[{\"type\": \"text\", \"text\": 5}]", err) == KG_EUNSUP);
    CHECK(add(&t, "user", "\"ok\xff\"", err) == KG_EINVAL && strstr(err, "at byte 2"));
    CHECK(add(&t, "\xff", "\"x\"", err) == KG_EINVAL && strstr(err, "role"));
    CHECK(t.n == 1); // a refused message is not added
    chat_turns_free(&t);
}

// The default model's tokenizer and template in served (split: served->chat_split_special).
static void open_default(ApiModel *served, Tokenizer **tok, ChatTemplate **tpl, int split) {
    const char *src = getenv("KG_SOURCE_DIR");
    char path[PATH_MAX], err[KG_ERRLEN];
    snprintf(path, sizeof path, "%s/models/default/kogpt2-default.model", src ? src : "..");
    if (tok_open(tok, path, err)) SKIP("%s (the default model's tokenizer)", err);
    REQUIRE(chat_template_parse(tpl, DEFAULT_TEMPLATE, strlen(DEFAULT_TEMPLATE), err) == KG_OK,
            "%s", err);
    *served = (ApiModel){.name = "default",
                         .tok = *tok,
                         .n_ctx = 512,
                         .vocab_size = tok_vocab_size(*tok),
                         .chat_template = *tpl,
                         .bos_token = "<s>",
                         .eos_token = "</s>",
                         .chat_stop_id = -1,
                         .chat_split_special = split};
}

// The prompt of turns (role, content) pairs under served: its code, *ids and *n.
static int prompt(const ApiModel *served, const char *const (*turns)[2], size_t n_turns, int **ids,
                  size_t *n, char *err) {
    ChatTurns t;
    REQUIRE(chat_turns_init(&t, n_turns, err) == KG_OK, "%s", err);
    for (size_t i = 0; i < n_turns; i++) {
        cJSON *j = cJSON_CreateString(turns[i][1]);
        REQUIRE(chat_turns_add(&t, turns[i][0], j, TEXT_PARTS, "messages", err) == KG_OK, "%s",
                err);
        cJSON_Delete(j); // chat_turns_add copied the content
    }
    *ids = NULL;
    int rc = chat_turns_prompt(served, &t, ids, n, err);
    chat_turns_free(&t);
    return rc;
}

static void test_prompt(void) {
    ApiModel served;
    Tokenizer *tok;
    ChatTemplate *tpl;
    char err[KG_ERRLEN];
    int *ids;
    size_t n = 0;
    open_default(&served, &tok, &tpl, 1);
    REQUIRE(tok_special(tok).eos == 2, "the default tokenizer's eos is %d", tok_special(tok).eos);

    const char *const one[][2] = {{"user", "안녕하세요"}};
    const int want_one[] = {2, 8302, 1790, 13};
    CHECK(prompt(&served, one, 1, &ids, &n, err) == KG_OK);
    CHECK(ids_equal(ids, n, want_one, 4));
    print_ids("</s>안녕하세요\\n, split", ids, n);
    free(ids);

    // two questions: each </s> its id, the texts between encoded alone
    const char *const three[][2] = {{"user", "안녕"}, {"assistant", "네"}, {"user", "잘 가"}};
    const int want_three[] = {2, 8302, 13, 10263, 2, 317, 285, 13};
    CHECK(prompt(&served, three, 3, &ids, &n, err) == KG_OK);
    CHECK(ids_equal(ids, n, want_three, 8));
    print_ids("</s>안녕\\n네</s>잘 가\\n, split", ids, n);
    free(ids);

    // the system role is not in this template: nothing of it reaches the prompt
    const char *const sys[][2] = {{"system", "You are a helpful assistant."},
                                  {"user", "안녕하세요"}};
    CHECK(prompt(&served, sys, 2, &ids, &n, err) == KG_OK && ids_equal(ids, n, want_one, 4));
    free(ids);

    // without the split, </s> is read as characters: what the split is for
    served.chat_split_special = 0;
    const int want_chars[] = {711, 10561, 10333, 10587, 10289, 11253, 1790, 13};
    CHECK(prompt(&served, one, 1, &ids, &n, err) == KG_OK && ids_equal(ids, n, want_chars, 8));
    free(ids);
    served.chat_split_special = 1;

    // the context bound counts the special ids too: 4 tokens do not fit in 3
    served.n_ctx = 3;
    CHECK(prompt(&served, one, 1, &ids, &n, err) == KG_ERANGE &&
          strstr(err, "n_prompt_tokens (4) exceeds n_ctx (3)"));
    free(ids);
    served.n_ctx = 512;

    // an unusable template: chat is refused with the reason kept at start-up
    served.chat_template = NULL;
    snprintf(served.chat_error, sizeof served.chat_error, "the filter 'tojson' is not supported");
    CHECK(prompt(&served, one, 1, &ids, &n, err) == KG_EUNSUP && strstr(err, "tojson"));

    // OpenAI's default reply length: to the end of the context, at least one token
    served.n_ctx = 512;
    CHECK(chat_max_tokens(&served, 10) == 502 && chat_max_tokens(&served, 511) == 1);
    CHECK(chat_max_tokens(&served, 512) == 1 && chat_max_tokens(&served, 600) == 1);
    chat_template_free(tpl);
    tok_free(tok);
}

int main(void) {
    test_turns();
    test_prompt();
    return check_report();
}
