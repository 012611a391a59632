// bench_tokenizer.c — encode throughput of kgtok on a JSONL file of strings (one per line).
//
//   build/bench_tokenizer TOKENIZER INPUT.jsonl [ROUNDS]
//   bench/bench_tokenizer.sh [BUILD_DIR]   (both tokenizers next to the references)
//
// Prints "<impl>\t<MB>\t<seconds>\t<MB/s>" lines: line by line (best of ROUNDS passes), the
// whole input joined by newlines in one call, and decoding the ids back (line by line).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    char **line; // (n) NUL-terminated strings
    size_t n, cap, bytes;
} Lines;

static int read_lines(const char *path, Lines *ls) {
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t cap = 0;
    ssize_t got;
    if (!f) return -1;
    while ((got = getline(&buf, &cap, f)) > 0) {
        cJSON *j_s = cJSON_ParseWithLength(buf, (size_t)got);
        if (cJSON_IsString(j_s)) {
            char err[KG_ERRLEN];
            if (KG_GROW(ls->line, &ls->cap, ls->n + 1, err)) return -1;
            ls->line[ls->n] = strdup(j_s->valuestring);
            ls->bytes += strlen(j_s->valuestring);
            ls->n++;
        }
        cJSON_Delete(j_s);
    }
    free(buf);
    fclose(f);
    return 0;
}

static void report(const char *impl, double bytes, double seconds) {
    printf("%s\t%.2f\t%.3f\t%.2f\n", impl, bytes / 1e6, seconds, bytes / 1e6 / seconds);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER INPUT.jsonl [ROUNDS]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    char err[KG_ERRLEN];
    Tokenizer *t = NULL;
    if (tok_open(&t, argv[1], err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    Lines ls = {0};
    if (read_lines(argv[2], &ls) || !ls.n) {
        fprintf(stderr, "cannot read strings from %s\n", argv[2]);
        return 1;
    }
    const char *impl = tok_kind(t) == TOK_SPM ? "kgtok (libsentencepiece shim)" : "kgtok (C BPE)";
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = kg_now_s();
        tokens = 0;
        for (size_t i = 0; i < ls.n; i++) {
            int *ids;
            size_t n;
            if (tok_encode(t, ls.line[i], strlen(ls.line[i]), &ids, &n, err)) {
                fprintf(stderr, "line %zu: %s\n", i + 1, err);
                return 1;
            }
            tokens += n;
            free(ids);
        }
        double dt = kg_now_s() - t0;
        if (dt < best) best = dt;
    }
    report(impl, (double)ls.bytes, best);

    // All lines in one call (newline-joined): long inputs, no per-call overhead.
    char *all = malloc(ls.bytes + ls.n + 1), *p = all;
    for (size_t i = 0; all && i < ls.n; i++)
        p += sprintf(p, "%s\n", ls.line[i]);
    int *ids = NULL;
    size_t n = 0;
    double t0 = kg_now_s();
    if (all && tok_encode(t, all, (size_t)(p - all), &ids, &n, err) == KG_OK) {
        char label[128];
        snprintf(label, sizeof(label), "%s, one call", impl);
        report(label, (double)(p - all), kg_now_s() - t0);
        char *text = NULL;
        t0 = kg_now_s();
        if (tok_decode(t, ids, n, &text, NULL, err) == KG_OK) {
            snprintf(label, sizeof(label), "%s, decode", impl);
            report(label, (double)(p - all), kg_now_s() - t0);
        }
        free(text);
    }
    fprintf(stderr, "%zu lines, %zu tokens per pass\n", ls.n, tokens);
    free(ids);
    free(all);
    for (size_t i = 0; i < ls.n; i++)
        free(ls.line[i]);
    free(ls.line);
    tok_free(t);
    return 0;
}
