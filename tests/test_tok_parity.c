// test_tok_parity.c — our tokenizers against the reference implementations, line by line.
//
//   test_tok_parity v1   SentencePiece .spiece vs Debian's python3-sentencepiece
//   test_tok_parity v2   tokenizer.json BPE vs @huggingface/tokenizers (npm, tests/node_modules)
//
// tests/ref/tok_corpus.py writes the inputs (>= 20,000 real Korean lines from several corpora
// in ../shared, edge cases, one ~1 MB text); the reference script encodes and decodes them;
// this program encodes each line with kgtok and requires identical ids, decode(ids) equal to
// the reference's decode, and the streaming decoder's output equal to tok_decode's. v2 also
// checks that tokenizer.json (with its spurious id-51200 entry, which we leave out) and
// tokenizer.no_endoftext.json give the same ids. Exit 77 (skipped) when ../shared, python3
// or node_modules are missing.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "tokenizer/tokenizer.h"

#define MAX_SHOWN 10 // mismatches printed in full

typedef struct {
    size_t lines, bytes, tokens;
    size_t id_mismatch, text_mismatch, stream_mismatch, twin_mismatch, errors;
    double seconds; // spent in tok_encode
} Tally;

static const char *env_or(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && v[0] ? v : def;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Decodes ids through a TokStream; returns the concatenated text (malloc'd) or NULL.
static char *stream_decode(const Tokenizer *t, const int *ids, size_t n) {
    TokStream *s = tok_stream_new(t);
    size_t len = 0, cap = 256;
    char *all = malloc(cap), err[KG_ERRLEN];
    const char *piece;
    size_t plen;
    for (size_t i = 0; s && all && i <= n; i++) {
        int rc = i < n ? tok_stream_push(s, ids[i], &piece, &plen, err)
                       : tok_stream_flush(s, &piece, &plen, err);
        if (rc) {
            free(all);
            all = NULL;
            break;
        }
        if (KG_GROW(all, &cap, len + plen + 1, err)) { // geometric: a 1 MB input is linear
            free(all);
            all = NULL;
            break;
        }
        memcpy(all + len, piece, plen);
        len += plen;
    }
    if (all) all[len] = '\0';
    tok_stream_free(s);
    return all;
}

static void show_ids(const char *label, const int *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

// Compares one input line against the reference's answer.
static void compare_line(const Tokenizer *t, const Tokenizer *twin, const char *text,
                         const cJSON *j_ref, Tally *y) {
    char err[KG_ERRLEN], *dec = NULL, *streamed = NULL;
    int *ids = NULL, *twin_ids = NULL;
    size_t n = 0, twin_n = 0, len = strlen(text);
    const cJSON *j_ids = cJSON_GetObjectItemCaseSensitive(j_ref, "ids");
    const cJSON *j_text = cJSON_GetObjectItemCaseSensitive(j_ref, "text");
    y->lines++;
    y->bytes += len;
    double t0 = kg_now_s();
    int rc = tok_encode(t, text, len, &ids, &n, err);
    y->seconds += kg_now_s() - t0;
    if (rc || !cJSON_IsArray(j_ids) || !cJSON_IsString(j_text)) {
        y->errors++;
        fprintf(stderr, "line %zu: %s\n", y->lines, rc ? err : "bad reference line");
        return;
    }
    y->tokens += n;
    int same = (size_t)cJSON_GetArraySize(j_ids) == n;
    const cJSON *j_v = j_ids->child;
    for (size_t i = 0; same && i < n; i++, j_v = j_v->next)
        same = j_v->valueint == ids[i];
    if (!same && y->id_mismatch++ < MAX_SHOWN) {
        fprintf(stderr, "line %zu: ids differ for \"%.200s\"\n", y->lines, text);
        show_ids("ours", ids, n);
        char *r = cJSON_PrintUnformatted(j_ids);
        fprintf(stderr, "  reference: %.400s\n", r ? r : "?");
        free(r);
    }
    if (tok_decode(t, ids, n, &dec, NULL, err) || strcmp(dec, j_text->valuestring)) {
        if (y->text_mismatch++ < MAX_SHOWN)
            fprintf(stderr, "line %zu: decode differs:\n  ours: \"%.200s\"\n  ref:  \"%.200s\"\n",
                    y->lines, dec ? dec : err, j_text->valuestring);
    }
    streamed = stream_decode(t, ids, n);
    if (!streamed || !dec || strcmp(streamed, dec)) {
        if (y->stream_mismatch++ < MAX_SHOWN)
            fprintf(stderr, "line %zu: stream decode differs from tok_decode\n", y->lines);
    }
    if (twin) {
        if (tok_encode(twin, text, len, &twin_ids, &twin_n, err) || twin_n != n ||
            (n && memcmp(twin_ids, ids, n * sizeof(int))))
            y->twin_mismatch++;
    }
    free(ids);
    free(twin_ids);
    free(dec);
    free(streamed);
}

// Runs cmd through the shell; 0 if it exited 0.
static int run(const char *cmd) {
    int rc = system(cmd);
    if (rc) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "v2";
    const char *shared = env_or("KG_SHARED_DIR", "../shared");
    const char *src = env_or("KG_SOURCE_DIR", ".");
    const char *python = env_or("KG_PYTHON", "/usr/bin/python3");
    int v1 = !strcmp(which, "v1");
    char model[4096], twin_path[4096], ref_cmd[16384], path[4096];
    snprintf(model, sizeof(model), "%s/data/kogpt2/%s", shared,
             v1 ? "v1/kogpt2_news_wiki_ko_cased_818bfa919d.spiece" : "v2/tokenizer.json");
    snprintf(twin_path, sizeof(twin_path), "%s/data/kogpt2/v2/tokenizer.no_endoftext.json", shared);
    if (!exists(model) || !exists(shared)) SKIP("%s not found (set KG_SHARED_DIR)", model);
    if (!exists(python)) SKIP("python3 not found at %s (set KG_PYTHON)", python);
    snprintf(path, sizeof(path), "%s/tests/node_modules/@huggingface/tokenizers", src);
    if (!v1 && (!exists(path) || system("node --version > /dev/null 2>&1")))
        SKIP("node or %s missing: run `npm ci --ignore-scripts` in tests/", path);
    if (v1) {
        snprintf(ref_cmd, sizeof(ref_cmd), "%s -c 'import sentencepiece' 2>/dev/null", python);
        if (system(ref_cmd))
            SKIP("%s lacks sentencepiece (apt-get install python3-sentencepiece)", python);
    }

    char dir[] = "/tmp/kg_tok_parity_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp failed");
    char in_path[4200], ref_path[4200];
    snprintf(in_path, sizeof(in_path), "%s/in.jsonl", dir);
    snprintf(ref_path, sizeof(ref_path), "%s/ref.jsonl", dir);
    snprintf(ref_cmd, sizeof(ref_cmd), "%s '%s/tests/ref/tok_corpus.py' '%s' > '%s'", python, src,
             shared, in_path);
    REQUIRE(!run(ref_cmd), "building the inputs failed");
    double t0 = kg_now_s();
    if (v1)
        snprintf(ref_cmd, sizeof(ref_cmd), "%s '%s/tests/ref/tok_ref_spm.py' '%s' < '%s' > '%s'",
                 python, src, model, in_path, ref_path);
    else // the reference reads the file minus the spurious entry: we leave it out, too
        snprintf(ref_cmd, sizeof(ref_cmd),
                 "cd '%s/tests' && node ref/tok_ref_hf.mjs '%s' < '%s' > '%s'", src, twin_path,
                 in_path, ref_path);
    REQUIRE(!run(ref_cmd), "the reference tokenizer failed");
    double ref_seconds = kg_now_s() - t0;

    char err[KG_ERRLEN];
    Tokenizer *t = NULL, *twin = NULL;
    REQUIRE(tok_open(&t, model, err) == KG_OK, "%s", err);
    if (!v1) REQUIRE(tok_open(&twin, twin_path, err) == KG_OK, "%s", err);

    FILE *fin = fopen(in_path, "r"), *fref = fopen(ref_path, "r");
    REQUIRE(fin && fref, "cannot read %s", dir);
    char *lin = NULL, *lref = NULL;
    size_t cin = 0, cref = 0;
    Tally y = {0};
    ssize_t nin;
    while ((nin = getline(&lin, &cin, fin)) > 0) {
        ssize_t nref = getline(&lref, &cref, fref);
        REQUIRE(nref > 0, "reference output ends early at line %zu", y.lines + 1);
        cJSON *j_in = cJSON_ParseWithLength(lin, (size_t)nin);
        cJSON *j_ref = cJSON_ParseWithLength(lref, (size_t)nref);
        REQUIRE(cJSON_IsString(j_in) && j_ref, "bad JSON at line %zu", y.lines + 1);
        compare_line(t, twin, j_in->valuestring, j_ref, &y);
        cJSON_Delete(j_in);
        cJSON_Delete(j_ref);
    }
    free(lin);
    free(lref);
    fclose(fin);
    fclose(fref);
    unlink(in_path);
    unlink(ref_path);
    rmdir(dir);
    tok_free(t);
    tok_free(twin);

    printf("%s: %zu lines compared (%.1f MB, %zu tokens): %zu id mismatches, %zu decode "
           "mismatches, %zu stream mismatches, %zu errors",
           which, y.lines, (double)y.bytes / 1e6, y.tokens, y.id_mismatch, y.text_mismatch,
           y.stream_mismatch, y.errors);
    if (!v1) printf(", %zu tokenizer.json vs no_endoftext mismatches", y.twin_mismatch);
    printf("\n%s: ours %.2f s encoding; reference %.2f s (process, I/O included)\n", which,
           y.seconds, ref_seconds);
    CHECK(y.lines >= 20000);
    CHECK(y.id_mismatch == 0);
    CHECK(y.text_mismatch == 0);
    CHECK(y.stream_mismatch == 0);
    CHECK(y.twin_mismatch == 0);
    CHECK(y.errors == 0);
    return check_report();
}
