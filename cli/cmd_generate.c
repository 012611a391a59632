// kogpt2 generate — a prompt continued with sampled text, streamed to stdout piece by piece
// as it is produced, with /v1/generate's sampling flags, defaults and ranges; or, with
// --json, one object at the end with the HTTP API's field names.
//
// The loop is the server engine's for one sequence: prefill the prompt into a KV cache, then
// per token: penalties, sample, stop at end-of-text (unless --ignore-eos), decode the token
// into text (never half a UTF-8 character), look for the stop strings (bytes that may begin
// one wait for the next token), feed the token and go on until --max-tokens or n_ctx.
#define _GNU_SOURCE // memmem
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/flags.h"
#include "base/kg.h"
#include "commands.h"
#include "model/sampler.h"
#include "model/sampler_utf8.h"

#define GEN_MAX_STOP     4   // stop strings (as the HTTP API: OpenAI's limit)
#define GEN_MAX_STOP_LEN 256 // bytes per stop string
#define GEN_PREFILL_ROWS 256 // prompt tokens per forward pass (as kogpt2d's prefill chunk)

typedef struct {
    CliModelArgs model;
    const char *text, *tokens;
    const char *max_tokens_flag, *top_k_flag; // ranges known once the config is read
    long long max_tokens, top_k, seed;        // seed -1: a random one
    double temperature, top_p, repetition, frequency, presence;
    const char *stop[GEN_MAX_STOP];
    size_t n_stop;
    int ignore_eos, json;
    int no_utf8_strict; // kogpt2d's utf8_strict (model/sampler_utf8.h) is on unless given
    int *ids;           // the prompt, once known (--tokens: parsed with the flags); malloc'd
    size_t n_ids;
} GenArgs;

// --stop STR (field: the GenArgs): KG_OK, or KG_EINVAL with err (too many, empty, too long).
static int add_stop(void *field, const char *s, const char *from, char *err) {
    GenArgs *a = field;
    if (a->n_stop == GEN_MAX_STOP)
        return kg_err(err, KG_EINVAL, "%s: at most %d stop strings", from, GEN_MAX_STOP);
    if (!s[0]) return kg_err(err, KG_EINVAL, "%s: a stop string must not be empty", from);
    if (strlen(s) > GEN_MAX_STOP_LEN)
        return kg_err(err, KG_EINVAL, "%s: at most %d bytes per stop string", from,
                      GEN_MAX_STOP_LEN);
    a->stop[a->n_stop++] = s;
    return KG_OK;
}

// /v1/generate's sampling fields as flags, with its defaults and ranges.
static const KgFlag GENERATE_ROWS[] = {
    {.name = "text",
     .short_name = 'x',
     .kind = KG_FLAG_STR,
     .metavar = "TEXT",
     KG_FLAG_AT(GenArgs, text),
     .help = "the prompt as text"},
    {.name = "tokens",
     .short_name = 't',
     .kind = KG_FLAG_STR,
     .metavar = "LIST",
     KG_FLAG_AT(GenArgs, tokens),
     .help = "the prompt as token ids, comma-separated"},
    {.name = "max-tokens",
     .short_name = 'n',
     .kind = KG_FLAG_STR,
     .metavar = "N",
     KG_FLAG_AT(GenArgs, max_tokens_flag),
     .def_text = "32",
     .help = "tokens to generate at most, 1..n_ctx (checked once the model's n_ctx is known)"},
    {.name = "temperature",
     .short_name = 'e',
     .kind = KG_FLAG_NUM,
     .metavar = "X",
     KG_FLAG_AT(GenArgs, temperature),
     .def = "1",
     .lo = 0,
     .hi = 100,
     .help = "0 is greedy: always the likeliest token"},
    {.name = "top-k",
     .short_name = 'k',
     .kind = KG_FLAG_STR,
     .metavar = "K",
     KG_FLAG_AT(GenArgs, top_k_flag),
     .def_text = "0: no cut",
     .help = "sample among the K likeliest, 0..V (checked once the vocabulary V is known)"},
    {.name = "top-p",
     .short_name = 'p',
     .kind = KG_FLAG_NUM,
     .opts = KG_FLAG_OPEN_LOW,
     .metavar = "P",
     KG_FLAG_AT(GenArgs, top_p),
     .def = "1",
     .lo = 0,
     .hi = 1,
     .help = "sample among the likeliest with mass P (0 would keep no token)"},
    {.name = "seed",
     .short_name = 's',
     .kind = KG_FLAG_INT,
     .metavar = "S",
     KG_FLAG_AT(GenArgs, seed),
     .min = 0,
     .max = (1ll << 53) - 1, // what a JSON number holds
     .def_text = "a random seed, shown on stderr",
     .help = "the same seed, prompt and flags give the same text"},
    {.name = "stop",
     .short_name = 'S',
     .kind = KG_FLAG_FUNC,
     .metavar = "STR",
     .offset = 0,
     .set = add_stop,
     .help = "end before the first STR in the text (repeat it: up to 4, each 1..256 bytes); the "
             "text stops before it, nothing after is printed"},
    {.name = "repetition-penalty",
     .short_name = 'r',
     .kind = KG_FLAG_NUM,
     .opts = KG_FLAG_OPEN_LOW,
     .metavar = "X",
     KG_FLAG_AT(GenArgs, repetition),
     .def = "1",
     .lo = 0,
     .hi = 100, // a factor: 0 would divide by zero
     .help = "> 1 discourages any token seen in the prompt or the text; 1: off"},
    {.name = "frequency-penalty",
     .short_name = 'f',
     .kind = KG_FLAG_NUM,
     .metavar = "X",
     KG_FLAG_AT(GenArgs, frequency),
     .def = "0",
     .lo = -2,
     .hi = 2,
     .help = "minus X per time a token was generated"},
    {.name = "presence-penalty",
     .short_name = 'y',
     .kind = KG_FLAG_NUM,
     .metavar = "X",
     KG_FLAG_AT(GenArgs, presence),
     .def = "0",
     .lo = -2,
     .hi = 2,
     .help = "minus X once a token was generated"},
    {.name = "ignore-eos",
     .short_name = 'I',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(GenArgs, ignore_eos),
     .help = "go on past the end-of-text token"},
    {.name = "no-utf8-strict",
     .short_name = 'U',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(GenArgs, no_utf8_strict),
     .help = "let the model draw byte tokens that never become a character (by default they are "
             "masked, as kogpt2d's utf8_strict does)"},
    {.name = "json",
     .short_name = 'J',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(GenArgs, json),
     .help = "print no stream but one JSON object at the end: text, tokens, finish_reason "
             "(length, stop or eos), prompt_tokens, generated_tokens, usage, timings, seed (as "
             "kogpt2d's /v1/generate and /v1/completions name them)"},
    CLI_MODEL_FLAGS(GenArgs),
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"},
};

static const KgFlagTable GENERATE_FLAGS = {
    .program = "kogpt2 generate",
    .usage = "[--model DIR] (--text TEXT | --tokens ID,ID,...) [--max-tokens N]\n"
             "                       [--temperature X] [--top-k K] [--top-p P] [--seed S]\n"
             "                       [--stop STR]... [options]",
    .flags = GENERATE_ROWS,
    .n_flags = sizeof GENERATE_ROWS / sizeof GENERATE_ROWS[0],
    .notes = "Output: the generated text only (not the prompt), written as each token completes a\n"
             "UTF-8 character, then one newline; on stderr the device, the model and a last line\n"
             "with the token counts, tokens/s, finish_reason and seed.\n"};

// The generate command's flags into a: -1 to go on, else the exit code (0 after --help or
// --version, 2 after a usage error, with its line printed).
static int parse_generate_args(int argc, char **argv, GenArgs *a) {
    *a = (GenArgs){.max_tokens = 32, .seed = -1}; // seed -1: none given
    char err[KG_ERRLEN] = "";
    int first, rc = cli_flags_parse(&GENERATE_FLAGS, a, argc, argv, &first);
    if (rc >= 0) return rc;
    const char *wrong = cli_prompt_error(argc, argv, first, a->text, a->tokens, err);
    if (wrong) {
        fprintf(stderr, "kogpt2 generate: %s\n", wrong);
        return 2;
    }
    if ((rc = cli_model_resolve(&a->model, err))) {
        fprintf(stderr, "kogpt2 generate: %s\n", err);
        return rc == KG_EINVAL ? 2 : 1;
    }
    const Gpt2Config *cfg = &a->model.config;
    if ((a->max_tokens_flag && kg_flag_int("--max-tokens", a->max_tokens_flag, 1,
                                           (long long)cfg->n_ctx, &a->max_tokens, err)) ||
        (a->top_k_flag &&
         kg_flag_int("--top-k", a->top_k_flag, 0, (long long)cfg->vocab_size, &a->top_k, err)) ||
        (a->tokens && cli_prompt_ids(&a->model, NULL, a->tokens, NULL, &a->ids, &a->n_ids, err)))
        goto bad_value;
    return -1;
bad_value:
    fprintf(stderr, "kogpt2 generate: %s\n", err);
    free(a->ids);
    return 2;
}

// ---------------------------------------------------------------------------------------
// The text: what was generated, checked against the stop strings. Bytes at its end that
// could still grow into a stop string wait until the next token shows whether they do.

typedef struct {
    KgBuf text;        // the generated text so far
    size_t released;   // text[0 .. released) went out: the answer (a stop string and what
                       // follows it never do)
    const char **stop; // (n_stop) none empty
    size_t n_stop;
} GenText;

// The offset of the first stop string in the text, or -1. A new match ends in what the last
// token added, so the search starts a stop string's length before what went out.
static long gen_find_stop(const GenText *g) {
    long best = -1;
    for (size_t i = 0; g->text.p && i < g->n_stop; i++) {
        size_t ls = strlen(g->stop[i]);
        size_t from = g->released > ls ? g->released - ls : 0;
        const char *hit = memmem(g->text.p + from, g->text.len - from, g->stop[i], ls);
        if (hit && (best < 0 || hit - g->text.p < best)) best = hit - g->text.p;
    }
    return best;
}

// How many bytes at the end of the text begin a stop string (they must wait).
static size_t gen_held_back(const GenText *g) {
    size_t hold = 0;
    for (size_t i = 0; i < g->n_stop; i++)
        for (size_t k = strlen(g->stop[i]) - 1; k > hold; k--)
            if (k <= g->text.len && !memcmp(g->text.p + g->text.len - k, g->stop[i], k)) {
                hold = k;
                break;
            }
    return hold;
}

// ---------------------------------------------------------------------------------------
// Generation

typedef enum { FINISH_LENGTH, FINISH_STOP, FINISH_EOS } Finish;
static const char *const FINISH_NAMES[] = {"length", "stop", "eos"};

typedef struct {
    KgBuf ids; // the generated ids, int each: the end-of-text token is not one of them
    size_t n;  // ids generated
    Finish finish;
    double prefill_ms, decode_ms;
} GenResult;

// Hands out text[released .. upto): to out (flushed at once: a reader sees each piece as it
// comes), or nowhere when out is NULL (--json prints it all at the end).
static int gen_release(GenText *g, size_t upto, FILE *out, char *err) {
    if (upto <= g->released) return KG_OK;
    if (out && (fwrite(g->text.p + g->released, 1, upto - g->released, out) != upto - g->released ||
                fflush(out)))
        return kg_err(err, KG_EIO, "write: the output is closed or full");
    g->released = upto;
    return KG_OK;
}

// Generates from the prompt in a->ids on cm, streaming the text to out (NULL: none), into g
// and r. KG_OK, or an error with err filled (what was generated before it stays in g and r).
static int generate(CliModel *cm, const GenArgs *a, uint64_t seed, GenText *g, GenResult *r,
                    FILE *out, char *err) {
    const Gpt2 *m = &cm->m;
    const size_t V = m->config.vocab_size, n_ctx = m->config.n_ctx;
    const int eos = m->config.eos_id >= 0 ? m->config.eos_id : tok_special(cm->tok).eos;
    KgPenalties pen = {.presence = (float)a->presence,
                       .frequency = (float)a->frequency,
                       .repetition = (float)a->repetition};
    Sampler *sampler =
        sampler_new(V, (float)a->temperature, (size_t)a->top_k, (float)a->top_p, seed);
    SamplerPenalty *penalty = NULL;
    TokStream *stream = tok_stream_new(cm->tok);
    KvSeq kv = {0};
    float *penalized = NULL;
    const char *piece;
    size_t piece_len;
    double t0 = kg_now_ms();
    int rc = !sampler || !stream ? kg_err(err, KG_ENOMEM, "out of memory") : KG_OK;
    if (!rc) rc = sampler_penalty_new(&penalty, V, &pen, err);
    if (!rc) rc = sampler_penalty_prompt(penalty, a->ids, a->n_ids, err);
    // the stream and the UTF-8 mask start from the prompt's last token, or its last byte
    // tokens (tok_stream_prime): a prompt ending inside a character goes on with it, as in
    // kogpt2d's engine
    SamplerUtf8 utf8;
    SamplerUtf8State utf8_at = {0};
    int byte_id[256];
    tok_byte_ids(cm->tok, V, byte_id);
    sampler_utf8_init(&utf8, byte_id);
    const int strict = !a->no_utf8_strict && utf8.any;
    size_t from = 0;
    if (!rc) rc = tok_stream_prime(stream, a->ids, a->n_ids, &from, err);
    for (size_t i = from; !rc && i < a->n_ids; i++)
        sampler_utf8_accept(&utf8_at, tok_byte(cm->tok, a->ids[i]));
    if (!rc && (strict || sampler_penalty_active(penalty)) &&
        !(penalized = malloc(V * sizeof *penalized)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) rc = kv_init(&kv, m, err);
    if (!rc) rc = gpt2_prefill(m, &cm->s, &kv, a->ids, a->n_ids, 1, err);
    double t1 = kg_now_ms();
    r->prefill_ms = t1 - t0;
    while (!rc) {
        const float *logits = cm->s.logits_host, *row = logits; // row 0: the last token's
        if (sampler_penalty_active(penalty)) {
            sampler_penalty_apply(penalty, penalized, logits);
            row = penalized;
        }
        if (strict) {
            sampler_utf8_mask(&utf8, &utf8_at, penalized, row, V);
            row = penalized;
        }
        int id = sampler_sample(sampler, row);
        if (id < 0) {
            rc = kg_err(err, KG_EINTERNAL, "the model's logits are not numbers");
            break;
        }
        if ((rc = sampler_penalty_accept(penalty, id, err))) break;
        if (strict) sampler_utf8_accept(&utf8_at, tok_byte(cm->tok, id));
        if (id == eos && !a->ignore_eos) { // what the stream held back, then the end
            if (!(rc = tok_stream_flush(stream, &piece, &piece_len, err)) &&
                !(rc = buf_append(&g->text, piece, piece_len)))
                rc = gen_release(g, g->text.len, out, err);
            r->finish = FINISH_EOS;
            break;
        }
        if ((rc = tok_stream_push(stream, id, &piece, &piece_len, err))) break;
        if (buf_append(&g->text, piece, piece_len) || buf_append(&r->ids, &id, sizeof id)) {
            rc = kg_err(err, KG_ENOMEM, "out of memory");
            break;
        }
        r->n++;
        long stop = gen_find_stop(g);
        int at_length = r->n >= (size_t)a->max_tokens || kv.len + 1 > n_ctx;
        size_t upto = stop >= 0 ? (size_t)stop : g->text.len - gen_held_back(g);
        if (at_length && stop < 0) { // the end: nothing can match any more
            if ((rc = tok_stream_flush(stream, &piece, &piece_len, err)) ||
                (rc = buf_append(&g->text, piece, piece_len)))
                break;
            upto = g->text.len;
        }
        if ((rc = gen_release(g, upto, out, err))) break;
        if (stop >= 0 || at_length) {
            r->finish = stop >= 0 ? FINISH_STOP : FINISH_LENGTH;
            break;
        }
        Gpt2Seq seq = {.kv = &kv, .tokens = &id, .n = 1, .logits = GPT2_LOGITS_LAST};
        rc = gpt2_forward(m, &cm->s, &seq, 1, err);
    }
    r->decode_ms = kg_now_ms() - t1;
    if (rc == KG_ENOMEM && !err[0]) kg_err(err, rc, "out of memory");
    kv_free(&kv);
    free(penalized);
    tok_stream_free(stream);
    sampler_penalty_free(penalty);
    sampler_free(sampler);
    return rc;
}

// A seed when none was given: different for every run, within what --seed accepts.
static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                 ((uint64_t)getpid() * 0x9E3779B97F4A7C15ull);
    return x & ((1ull << 53) - 1);
}

// The --json object: /v1/generate's fields (prompt, text, tokens, finish_reason,
// prompt_tokens, generated_tokens, timings), /v1/completions' usage, and the seed. 0, or 1
// on OOM.
static int print_json(const GenArgs *a, const GenText *g, const GenResult *r, uint64_t seed) {
    int rc = 1;
    char *out = NULL, *text = strndup(g->text.p ? g->text.p : "", g->released); // not a stop
    const int *ids = (const int *)r->ids.p;
    cJSON *j_root = cJSON_CreateObject();
    cJSON *j_prompt = cJSON_AddArrayToObject(j_root, "prompt");
    for (size_t i = 0; j_prompt && i < a->n_ids; i++)
        if (!cJSON_AddItemToArray(j_prompt, cJSON_CreateNumber(a->ids[i]))) goto end;
    if (!j_prompt || !text || !cJSON_AddStringToObject(j_root, "text", text)) goto end;
    cJSON *j_tokens = cJSON_AddArrayToObject(j_root, "tokens");
    for (size_t i = 0; j_tokens && i < r->n; i++)
        if (!cJSON_AddItemToArray(j_tokens, cJSON_CreateNumber(ids[i]))) goto end;
    cJSON *j_usage, *j_timings;
    if (!j_tokens || !cJSON_AddStringToObject(j_root, "finish_reason", FINISH_NAMES[r->finish]) ||
        !cJSON_AddNumberToObject(j_root, "prompt_tokens", (double)a->n_ids) ||
        !cJSON_AddNumberToObject(j_root, "generated_tokens", (double)r->n) ||
        !(j_usage = cJSON_AddObjectToObject(j_root, "usage")) ||
        !cJSON_AddNumberToObject(j_usage, "prompt_tokens", (double)a->n_ids) ||
        !cJSON_AddNumberToObject(j_usage, "completion_tokens", (double)r->n) ||
        !cJSON_AddNumberToObject(j_usage, "total_tokens", (double)(a->n_ids + r->n)) ||
        !(j_timings = cJSON_AddObjectToObject(j_root, "timings")) ||
        !cJSON_AddNumberToObject(j_timings, "total_ms", r->prefill_ms + r->decode_ms) ||
        !cJSON_AddNumberToObject(j_timings, "prefill_ms", r->prefill_ms) ||
        !cJSON_AddNumberToObject(j_timings, "decode_ms", r->decode_ms) ||
        !cJSON_AddNumberToObject(j_root, "seed", (double)seed) ||
        !(out = cJSON_PrintUnformatted(j_root)))
        goto end;
    puts(out);
    rc = 0;
end:
    free(text);
    cJSON_free(out);
    cJSON_Delete(j_root);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    GenArgs a;
    int rc = parse_generate_args(argc, argv, &a);
    if (rc >= 0) return rc;
    char err[KG_ERRLEN] = "";
    CliModel cm;
    GenText g = {.stop = a.stop, .n_stop = a.n_stop};
    GenResult r = {0};
    if (cli_model_open_tokenizer(&cm, &a.model, 1, err)) {
        fprintf(stderr, "kogpt2 generate: %s\n", err);
        free(a.ids);
        return 1;
    }
    if (a.text && cli_prompt_ids(&a.model, a.text, NULL, cm.tok, &a.ids, &a.n_ids, err)) {
        fprintf(stderr, "kogpt2 generate: %s\n", err);
        cli_model_close(&cm);
        free(a.ids);
        return 2;
    }
    if (cli_model_open(&cm, &a.model, GEN_PREFILL_ROWS, 1, stderr, err)) {
        fprintf(stderr, "kogpt2 generate: %s\n", err);
        free(a.ids);
        return 1;
    }
    const char *note = kg_precision_note(cm.be);
    if (note) fprintf(stderr, "kogpt2 generate: %s\n", note);
    fprintf(stderr, "kogpt2 generate: loaded %s%s%s\n", cm.m.src.what, cm.m.warning[0] ? "; " : "",
            cm.m.warning);
    uint64_t seed = a.seed >= 0 ? (uint64_t)a.seed : random_seed();
    rc = generate(&cm, &a, seed, &g, &r, a.json ? NULL : stdout, err);
    if (!rc && a.json && print_json(&a, &g, &r, seed)) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc && !a.json && (putchar('\n') == EOF || fflush(stdout)))
        rc = kg_err(err, KG_EIO, "write: the output is closed or full");
    if (rc) {
        if (!a.json && g.released) putchar('\n'); // the error on a line of its own
        fprintf(stderr, "kogpt2 generate: %s\n", err);
    } else {
        double s = r.decode_ms / 1e3;
        fprintf(stderr,
                "kogpt2 generate: %zu prompt tokens in %.0f ms; %zu tokens generated in %.2f s "
                "(%.1f tokens/s); finish_reason %s; seed %llu\n",
                a.n_ids, r.prefill_ms, r.n, s, s > 0 ? r.n / s : 0.0, FINISH_NAMES[r.finish],
                (unsigned long long)seed);
    }
    buf_free(&g.text);
    buf_free(&r.ids);
    cli_model_close(&cm);
    free(a.ids);
    return rc ? 1 : 0;
}
