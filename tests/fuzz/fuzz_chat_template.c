// fuzz_chat_template.c — a chat template's source (tokenizer_config.json's chat_template, or
// --chat-template FILE: untrusted text) through chat_template_parse() and, when it parses,
// chat_template_render() of a fixed conversation, with and without the generation prompt.
// The input is passed with its length and no terminating NUL. A failure must be one line
// "chat template: ..." with a code the server answers with a 4xx (or KG_ENOMEM); a success
// must be NUL-terminated and at most CHAT_TEMPLATE_MAX_OUTPUT bytes. The limits on depth,
// output, memory and work keep every input fast (libFuzzer's -timeout and -rss_limit_mb).
// Seeds: tests/tools/chat_template_vectors.py writes corpus/fuzz_chat_template/.
#include <string.h>

#include "fuzz.h"
#include "server/chat_template/chat_template.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

static void fuzz_check_error(int rc, const char *err) {
    FUZZ_CHECK(rc == KG_EFORMAT || rc == KG_EUNSUP || rc == KG_ERANGE || rc == KG_EINVAL ||
               rc == KG_ENOMEM);
    FUZZ_CHECK(!strncmp(err, "chat template: ", 15) && !strchr(err, '\n'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const ChatMessage CONV[] = {
        {"system", "친절하게 답해요."}, {"user", "안녕? "}, {"assistant", " 반가워요!"},
        {"user", "What's up?"},         {"tool", NULL},     {"user", "  끝 \xe3\x80\x80"}};
    ChatTemplate *t;
    char err[KG_ERRLEN];
    int rc = chat_template_parse(&t, (const char *)data, size, err);
    if (rc != KG_OK) {
        FUZZ_CHECK(!t);
        fuzz_check_error(rc, err);
        return 0;
    }
    for (int gen = 0; gen < 2; gen++) {
        char *out = NULL;
        size_t n = 0;
        rc = chat_template_render(t, CONV, sizeof CONV / sizeof *CONV, gen, "<s>",
                                  gen ? "</s>" : NULL, &out, &n, err);
        if (rc == KG_OK) {
            FUZZ_CHECK(out && out[n] == '\0' && n <= CHAT_TEMPLATE_MAX_OUTPUT);
        } else {
            FUZZ_CHECK(!out);
            fuzz_check_error(rc, err);
        }
        free(out);
    }
    chat_template_free(t);
    return 0;
}
