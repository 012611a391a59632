// test_server_params.c — server/params.c, the request parsing every endpoint shares (issue 33
// item 6: reached only end to end before): the field table (api_fields: each kind, bounds
// given or taken from the model, null as absent, the first bad field named), the sampling
// table (api_sampling: defaults, the documented ranges, logprobs as a count or as chat's bool
// plus top_logprobs, logit_bias, stop, stream_options, a random seed when none is given),
// the prompt from token ids, the model a request names, and the quoting helpers. The expected
// values are the API's documented contract (README "The HTTP API", OpenAI's ranges), written
// out by hand here; no model, tokenizer or daemon is needed.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api.h"
#include "check.h"
#include "server/http/json_in.h"

static ApiModel model = {.name = "default", .n_ctx = 128, .vocab_size = 12000};

// The parsed JSON text, REQUIRE'd to parse: the tests' requests are ours.
static cJSON *req(const char *json) {
    cJSON *j = cJSON_Parse(json);
    REQUIRE(j, "bad test JSON: %s", json);
    return j;
}

// api_sampling over json with generate's max_tokens default (16) and minimum (1): its code;
// *param and err say which field.
static int sampling(const char *json, ApiSampling *s, const char **param, char *err) {
    cJSON *j = req(json);
    memset(s, 0, sizeof *s);
    *param = NULL;
    err[0] = 0;
    int rc = api_sampling(&model, j, s, 16, 1, param, err);
    cJSON_Delete(j); // s->stop points into the request: the tests below read it before this
    return rc;
}

// The field json refused with code, naming param.
static void refused(const char *json, int code, const char *param) {
    ApiSampling s;
    const char *p;
    char err[KG_ERRLEN];
    int rc = sampling(json, &s, &p, err);
    CHECK_MSG(rc == code && p && !strcmp(p, param), "%s: code %d param %s (%s), want %d %s", json,
              rc, p ? p : "(null)", err, code, param);
    api_sampling_free(&s);
}

static void test_sampling_defaults(void) {
    ApiSampling s;
    const char *p;
    char err[KG_ERRLEN];
    CHECK(sampling("{}", &s, &p, err) == KG_OK);
    CHECK(s.max_tokens == 16 && s.temperature == 1 && s.top_k == 0 && s.top_p == 1);
    CHECK(s.n_logprobs == 0 && s.presence_penalty == 0 && s.frequency_penalty == 0);
    CHECK(s.repetition_penalty == 1 && !s.stream && !s.ignore_eos && s.utf8_strict);
    CHECK(s.n_logit_bias == 0 && s.n_stop == 0 && !s.include_usage);
    // no seed: a random one, a whole number a JSON double holds exactly, new each request
    CHECK(s.seed >= 0 && s.seed < (1ll << 53));
    ApiSampling t;
    CHECK(sampling("{}", &t, &p, err) == KG_OK && t.seed != s.seed);
    api_sampling_free(&s);
    api_sampling_free(&t);
    // null is "not given": the defaults
    CHECK(sampling("{\"temperature\": null, \"stop\": null, \"seed\": null, \"logit_bias\": null,"
                   " \"stream_options\": null}",
                   &s, &p, err) == KG_OK);
    CHECK(s.temperature == 1 && s.n_stop == 0 && s.seed >= 0);
    api_sampling_free(&s);
}

static void test_sampling_values(void) {
    ApiSampling s;
    const char *p;
    char err[KG_ERRLEN];
    int rc = sampling("{\"max_tokens\": 128, \"temperature\": 0, \"top_k\": 12000, \"top_p\": 0.5,"
                      " \"logprobs\": 20, \"seed\": 9007199254740991, \"presence_penalty\": -2,"
                      " \"frequency_penalty\": 2, \"repetition_penalty\": 100, \"stream\": true,"
                      " \"ignore_eos\": true, \"utf8_strict\": false,"
                      " \"stream_options\": {\"include_usage\": true}}",
                      &s, &p, err);
    CHECK_MSG(rc == KG_OK, "the bounds themselves are accepted: %s", err);
    CHECK(s.max_tokens == 128 && s.temperature == 0 && s.top_k == 12000 && s.top_p == 0.5);
    CHECK(s.n_logprobs == 20 && s.seed == 9007199254740991ll && s.presence_penalty == -2);
    CHECK(s.frequency_penalty == 2 && s.repetition_penalty == 100 && s.stream && s.ignore_eos);
    CHECK(!s.utf8_strict && s.include_usage);
    api_sampling_free(&s);

    // chat's logprobs: true with top_logprobs 0..20, true alone is the chosen token's own
    CHECK(sampling("{\"logprobs\": true, \"top_logprobs\": 5}", &s, &p, err) == KG_OK);
    CHECK(s.n_logprobs == 5);
    api_sampling_free(&s);
    CHECK(sampling("{\"logprobs\": true}", &s, &p, err) == KG_OK && s.n_logprobs == 1);
    api_sampling_free(&s);
    // top_logprobs without logprobs would be ignored: refused by name, as OpenAI does
    CHECK(sampling("{\"logprobs\": false, \"top_logprobs\": 5}", &s, &p, err) == KG_EINVAL && p &&
          !strcmp(p, "top_logprobs"));
    api_sampling_free(&s);
    CHECK(sampling("{\"logprobs\": false, \"top_logprobs\": 0}", &s, &p, err) == KG_OK);
    CHECK(s.n_logprobs == 0);
    api_sampling_free(&s);

    // logit_bias: token id strings to biases in -100..100
    CHECK(sampling("{\"logit_bias\": {\"5\": -100, \"11999\": 100, \"0\": 0.5}}", &s, &p, err) ==
          KG_OK);
    CHECK(s.n_logit_bias == 3 && s.logit_bias[0].id == 5 && s.logit_bias[0].bias == -100.0f);
    CHECK(s.logit_bias[1].id == 11999 && s.logit_bias[2].bias == 0.5f);
    api_sampling_free(&s);
    CHECK(s.logit_bias == NULL && s.stop == NULL); // freed and cleared

    // stop: one string, or up to four
    cJSON *j = req("{\"stop\": [\"\\n\", \"END\"]}");
    memset(&s, 0, sizeof s);
    CHECK(api_sampling(&model, j, &s, 16, 1, &p, err) == KG_OK);
    CHECK(s.n_stop == 2 && !strcmp(s.stop[0], "\n") && !strcmp(s.stop[1], "END"));
    api_sampling_free(&s);
    cJSON_Delete(j);
    j = req("{\"stop\": \"###\"}");
    memset(&s, 0, sizeof s);
    CHECK(api_sampling(&model, j, &s, 16, 1, &p, err) == KG_OK);
    CHECK(s.n_stop == 1 && !strcmp(s.stop[0], "###"));
    api_sampling_free(&s);
    cJSON_Delete(j);

    // the endpoint's max_tokens default and minimum (completions' scoring allows 0)
    j = req("{\"max_tokens\": 0}");
    memset(&s, 0, sizeof s);
    CHECK(api_sampling(&model, j, &s, 16, 0, &p, err) == KG_OK && s.max_tokens == 0);
    api_sampling_free(&s);
    cJSON_Delete(j);
    j = req("{}");
    memset(&s, 0, sizeof s);
    CHECK(api_sampling(&model, j, &s, 128, 1, &p, err) == KG_OK && s.max_tokens == 128);
    api_sampling_free(&s);
    cJSON_Delete(j);
}

static void test_sampling_refused(void) {
    // out of range: 422 (KG_ERANGE), the field named
    refused("{\"max_tokens\": 0}", KG_ERANGE, "max_tokens");
    refused("{\"max_tokens\": 129}", KG_ERANGE, "max_tokens"); // past n_ctx
    refused("{\"temperature\": -0.1}", KG_ERANGE, "temperature");
    refused("{\"temperature\": 100.5}", KG_ERANGE, "temperature");
    refused("{\"top_k\": -1}", KG_ERANGE, "top_k");
    refused("{\"top_k\": 12001}", KG_ERANGE, "top_k"); // past the model's vocabulary
    refused("{\"top_p\": 0}", KG_ERANGE, "top_p");     // (0, 1]: 0 itself is out
    refused("{\"top_p\": 1.5}", KG_ERANGE, "top_p");
    refused("{\"logprobs\": 21}", KG_ERANGE, "logprobs");
    refused("{\"logprobs\": true, \"top_logprobs\": 21}", KG_ERANGE, "top_logprobs");
    refused("{\"seed\": -1}", KG_ERANGE, "seed");
    refused("{\"seed\": 9007199254740992}", KG_ERANGE, "seed"); // 2^53
    refused("{\"presence_penalty\": 2.5}", KG_ERANGE, "presence_penalty");
    refused("{\"frequency_penalty\": -2.5}", KG_ERANGE, "frequency_penalty");
    refused("{\"repetition_penalty\": 0}", KG_ERANGE, "repetition_penalty");
    refused("{\"logit_bias\": {\"12000\": 1}}", KG_ERANGE, "logit_bias"); // id = V
    refused("{\"logit_bias\": {\"x\": 1}}", KG_ERANGE, "logit_bias");
    refused("{\"logit_bias\": {\"-1\": 1}}", KG_ERANGE, "logit_bias");
    refused("{\"logit_bias\": {\"5\": 101}}", KG_ERANGE, "logit_bias");
    refused("{\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", KG_ERANGE, "stop");
    // wrong types: 400 (KG_EINVAL)
    refused("{\"max_tokens\": 2.5}", KG_EINVAL, "max_tokens");
    refused("{\"max_tokens\": \"3\"}", KG_EINVAL, "max_tokens");
    refused("{\"temperature\": \"hot\"}", KG_EINVAL, "temperature");
    refused("{\"top_k\": true}", KG_EINVAL, "top_k");
    refused("{\"stream\": 1}", KG_EINVAL, "stream");
    refused("{\"stop\": 5}", KG_EINVAL, "stop");
    refused("{\"stop\": [\"x\", 1]}", KG_EINVAL, "stop");
    refused("{\"logit_bias\": [1]}", KG_EINVAL, "logit_bias");
    refused("{\"logit_bias\": {\"5\": \"x\"}}", KG_EINVAL, "logit_bias");
    refused("{\"stream_options\": 1}", KG_EINVAL, "stream_options");
    // a stop string over API_MAX_STOP_LEN bytes
    char long_stop[400];
    snprintf(long_stop, sizeof long_stop, "{\"stop\": [\"%0*d\"]}", API_MAX_STOP_LEN + 1, 0);
    refused(long_stop, KG_ERANGE, "stop");
    // the table's order: the first bad field is the one named
    refused("{\"top_p\": 5, \"temperature\": -1, \"stop\": 5}", KG_ERANGE, "temperature");
    refused("{\"stop\": 5, \"seed\": -1}", KG_ERANGE, "seed");
}

// --- api_fields over a table of every kind ---

typedef struct {
    long long count, upto_ctx, upto_vocab;
    double share;
    int flag;
    long long custom;
} Shape;

static int read_custom(const ApiRequest *q, const ApiField *f, void *out, const char **param,
                       char *err) {
    (void)f;
    *param = "custom_inner"; // a reader may name a field of its own
    return json_int(q->j_req, "custom_inner", &((Shape *)out)->custom, 7, 0, 9, err);
}

static const ApiField FIELDS[] = {
    {"count", API_INT, offsetof(Shape, count), .def = 3, .lo = 1, .hi = 10},
    {"upto_ctx", API_INT, offsetof(Shape, upto_ctx), .def = 0, .lo = 0, .hi_is = API_HI_N_CTX},
    {"upto_vocab", API_INT, offsetof(Shape, upto_vocab), .def = 0, .lo = 0, .hi_is = API_HI_VOCAB},
    {"share", API_NUM, offsetof(Shape, share), .def = 1, .lo = 0, .hi = 1, .open_lo = 1},
    {"flag", API_BOOL, offsetof(Shape, flag), .def = 1},
    {"suffix", API_REFUSED, .why = "suffix is not supported by a base model"},
    {"custom", API_READ, .read = read_custom},
};

static int fields(const char *json, Shape *out, const char **param, char *err) {
    cJSON *j = req(json);
    ApiRequest q = {.model = &model, .j_req = j};
    *param = NULL;
    err[0] = 0;
    int rc = api_fields(&q, FIELDS, sizeof FIELDS / sizeof *FIELDS, out, param, err);
    cJSON_Delete(j);
    return rc;
}

static void test_fields(void) {
    Shape s = {0};
    const char *p;
    char err[KG_ERRLEN];
    CHECK(fields("{}", &s, &p, err) == KG_OK);
    CHECK(s.count == 3 && s.upto_ctx == 0 && s.share == 1 && s.flag == 1 && s.custom == 7);
    CHECK(fields("{\"count\": 10, \"upto_ctx\": 128, \"upto_vocab\": 12000, \"share\": 1e-9,"
                 " \"flag\": false, \"suffix\": null, \"custom_inner\": 9}",
                 &s, &p, err) == KG_OK);
    CHECK(s.count == 10 && s.upto_ctx == 128 && s.upto_vocab == 12000 && s.share == 1e-9);
    CHECK(s.flag == 0 && s.custom == 9);

    struct {
        const char *json, *param;
        int code;
    } bad[] = {
        {"{\"count\": 0}", "count", KG_ERANGE},
        {"{\"count\": 11}", "count", KG_ERANGE},
        {"{\"count\": 1.5}", "count", KG_EINVAL},
        {"{\"upto_ctx\": 129}", "upto_ctx", KG_ERANGE},
        {"{\"upto_vocab\": 12001}", "upto_vocab", KG_ERANGE},
        {"{\"share\": 0}", "share", KG_ERANGE},
        {"{\"share\": 1.0000001}", "share", KG_ERANGE},
        {"{\"flag\": \"yes\"}", "flag", KG_EINVAL},
        {"{\"suffix\": \"x\"}", "suffix", KG_EUNSUP},
        {"{\"custom_inner\": 10}", "custom_inner", KG_ERANGE},
        {"{\"suffix\": \"x\", \"count\": 0}", "count", KG_ERANGE}, // count's row comes first
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = fields(bad[i].json, &s, &p, err);
        CHECK_MSG(rc == bad[i].code && p && !strcmp(p, bad[i].param),
                  "%s: code %d param %s (%s), want %d %s", bad[i].json, rc, p ? p : "(null)", err,
                  bad[i].code, bad[i].param);
    }
    CHECK(fields("{\"suffix\": 1}", &s, &p, err) == KG_EUNSUP &&
          !strcmp(err, "suffix is not supported by a base model"));
}

// --- the prompt from ids, the model named, quoting ---

static void test_prompt_and_model(void) {
    int *ids = NULL;
    size_t n = 0;
    const char *p;
    char err[KG_ERRLEN];
    cJSON *j = req("{\"tokens\": [1, 11999, 5]}");
    CHECK(api_prompt(&model, j, &ids, &n, &p, err) == KG_OK && n == 3 && ids[1] == 11999);
    CHECK(!strcmp(p, "tokens"));
    free(ids);
    cJSON_Delete(j);
    const char *bad[][2] = {
        {"{\"tokens\": [12000]}", "tokens"}, {"{\"tokens\": []}", "tokens"},
        {"{\"tokens\": [-1]}", "tokens"},    {"{}", "text"},
        {"{\"text\": 5}", "text"},           {"{\"text\": \"a\", \"tokens\": [1]}", "text"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        j = req(bad[i][0]);
        ids = NULL;
        int rc = api_prompt(&model, j, &ids, &n, &p, err);
        CHECK_MSG(rc != KG_OK && !strcmp(p, bad[i][1]), "%s: %d %s (%s)", bad[i][0], rc, p, err);
        free(ids);
        cJSON_Delete(j);
    }
    // 129 ids: past n_ctx, named with both figures
    char many[1024] = "{\"tokens\": [1";
    for (int i = 1; i < 129; i++)
        strcat(many, ",1");
    strcat(many, "]}");
    j = req(many);
    ids = NULL;
    CHECK(api_prompt(&model, j, &ids, &n, &p, err) == KG_ERANGE &&
          strstr(err, "n_prompt_tokens (129) exceeds n_ctx (128)"));
    free(ids);
    cJSON_Delete(j);

    ApiModel two[2] = {{.name = "base"}, {.name = "tiny"}};
    ApiApp app = {.models = two, .n_models = 2};
    const ApiModel *served;
    struct {
        const char *json;
        int rc, which;
    } cases[] = {
        {"{}", KG_OK, 0},
        {"{\"model\": null}", KG_OK, 0},
        {"{\"model\": \"tiny\"}", KG_OK, 1},
        {"{\"model\": \"base\"}", KG_OK, 0},
        {"{\"model\": \"http://127.0.0.1:8080\"}", KG_OK, 0}, // Hugging Face's clients
        {"{\"model\": \"https://example.com/v1/\"}", KG_OK, 0},
        {"{\"model\": \"http://\"}", KG_ENOTFOUND, -1}, // a bare scheme is no URL
        {"{\"model\": \"gpt-4\"}", KG_ENOTFOUND, -1},
        {"{\"model\": 3}", KG_EINVAL, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        j = req(cases[i].json);
        served = NULL;
        int rc = api_model(&app, j, &served, err);
        CHECK_MSG(rc == cases[i].rc && (cases[i].which < 0 || served == &two[cases[i].which]),
                  "%s: %d (%s)", cases[i].json, rc, err);
        cJSON_Delete(j);
    }
    CHECK(api_model_named(&app, "nope", err) == NULL);
    CHECK_MSG(strstr(err, "model_not_found") && strstr(err, "'base', 'tiny'"), "%s", err);

    // quoting: the longest valid UTF-8 prefix within max bytes
    CHECK(api_quote_len("abc", 64) == 3 && api_quote_len("abcdef", 4) == 4);
    CHECK(api_quote_len("\xEC\x95\x88\xEB\x85\x95", 4) == 3); // 안녕 cut inside 녕
    CHECK(api_quote_len("ok\xFFno", 64) == 2);
    CHECK(api_utf8_chars("\xEC\x95\x88\xEB\x85\x95!", 7) == 3 && api_utf8_chars("", 0) == 0);
}

int main(void) {
    test_sampling_defaults();
    test_sampling_values();
    test_sampling_refused();
    test_fields();
    test_prompt_and_model();
    return check_report();
}
