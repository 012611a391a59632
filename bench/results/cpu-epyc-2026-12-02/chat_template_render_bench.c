// chat_template_render_bench.c — renders chat template argv[1] (0 CHAT_TEMPLATE_USR_SYS, 1
// CHAT_TEMPLATE_PLAIN, 2 the one below: trim, strip, in, startswith, upper, length, a slice,
// loop attributes) over 64 messages argv[2] times; prints ns per render. Link it against either
// side's server/chat_template/*.c and base/ (chat_template_render_rounds.sh).
#include "server/chat_template/chat_template.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static const char HEAVY[] =
    "{%- for m in messages -%}{%- set c = (m.content or '') | trim -%}"
    "{%- if loop.first and m.role == 'system' %}{{ c.strip() ~ '\\n' }}"
    "{%- elif 'x' in c or c.startswith('Q') %}{{ '<usr>' ~ c.upper() | length ~ c[:3] if false "
    "else c.lower() }}"
    "{%- else %}{{ loop.index ~ ':' ~ c.rstrip('.') ~ (messages[-1].role | string) }}{%- endif -%}"
    "{%- endfor -%}{{ messages | length }}"
    "{%- if add_generation_prompt %}<sys>{% endif %}";
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int which = atoi(argv[1]), R = atoi(argv[2]);
    const char *src = which == 0 ? CHAT_TEMPLATE_USR_SYS : which == 1 ? CHAT_TEMPLATE_PLAIN : HEAVY;
    char err[KG_ERRLEN];
    ChatTemplate *t;
    if (chat_template_parse(&t, src, strlen(src), err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ChatMessage msgs[64];
    static const char *roles[] = {"system", "user", "assistant"};
    for (int i = 0; i < 64; i++)
        msgs[i] =
            (ChatMessage){i == 0 ? "system" : roles[1 + (i & 1)],
                          i % 3 ? "Question: 안녕하세요, 오늘 날씨가 어떤가요? x marks the spot."
                                : "  Quiet line.  "};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    size_t total = 0;
    for (int r = 0; r < R; r++) {
        char *out;
        size_t n;
        if (chat_template_render(t, msgs, 64, 1, "<s>", "</s>", &out, &n, err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        total += n;
        free(out);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / R);
    chat_template_free(t);
    return total == 0;
}
