// fuzz_http.c — the HTTP request layer from body to validated request, for every JSON
// endpoint of kogpt2d's route table: byte 0 picks the route (api_routes(), so a new
// endpoint is fuzzed as soon as it is listed), the rest is the body. The body goes the way
// srv_dispatch() sends it: json_parse_object(), then the route's real handler (ep_*.c,
// params.c, job.c, openai.c, json_in.c, the chat-template library) with the default model's
// SentencePiece tokenizer behind it.
//
// What is not real is below the handlers: fuzz_http_stubs.c stands in for the MHD replies
// (http.c) and the engine (sched.c). Its sched_submit() is the oracle: a request that got
// that far must be valid (ids in the vocabulary, a prompt that fits, every parameter in
// range); a rejected one must be a 4xx, never a 500.
#include <string.h>

#include "fuzz.h"
#include "fuzz_http.h"
#include "server/engine/score_memo.h"
#include "server/http/json_in.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_HTTP_N_CTX 512 // the default model's n_positions (models/default/config.json)

static ApiApp fuzz_app;
static const SrvRoute *fuzz_routes[16]; // the JSON (POST) routes
static size_t fuzz_n_routes;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[4096], err[KG_ERRLEN];
    Tokenizer *tok;
    fuzz_data_file(path, sizeof path, "KG_SOURCE_DIR", KG_FUZZ_SOURCE_DIR,
                   "models/default/kogpt2-default.model", "fuzz_http");
    if (tok_open(&tok, path, err)) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        exit(1);
    }
    static ApiModel model;
    model.sched = fuzz_http_sched();
    model.tok = tok;
    model.name = "fuzz";
    model.n_ctx = FUZZ_HTTP_N_CTX;
    model.vocab_size = tok_vocab_size(tok);
    model.score_memo = score_memo_new();
    fuzz_app.models = &model;
    fuzz_app.n_models = 1;
    char *slash = strrchr(path, '/');
    *slash = '\0'; // the model directory, for tokenizer_config.json
    static ChatTemplate *chat;
    if (ep_chat_setup(&model, path, NULL, &chat, err)) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        exit(1);
    }
    atomic_store(&fuzz_app.ready, 1);
    fuzz_http_set_app(&fuzz_app);
    size_t n;
    const SrvRoute *routes = api_routes(&n);
    for (size_t i = 0; i < n && fuzz_n_routes < sizeof fuzz_routes / sizeof fuzz_routes[0]; i++)
        if (routes[i].flags & SRV_ROUTE_JSON) fuzz_routes[fuzz_n_routes++] = &routes[i];
    FUZZ_CHECK(fuzz_n_routes > 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const SrvRoute *route = fuzz_routes[data[0] % fuzz_n_routes];
    // the body as http.c keeps it: len bytes and a NUL after them, nothing more
    size_t len = size - 1;
    char *body = malloc(len + 1);
    FUZZ_CHECK(body);
    memcpy(body, data + 1, len);
    body[len] = '\0';
    SrvReq r;
    memset(&r, 0, sizeof r);
    r.endpoint = route->path;
    r.route = route;
    char err[KG_ERRLEN];
    cJSON *j_req;
    int rc = json_parse_object(body, len, &j_req, err);
    if (rc) {
        srv_reply_kg(&r, rc, err, NULL);
    } else {
        route->handler(&r, j_req);
        cJSON_Delete(j_req);
    }
    fuzz_http_complete(&r); // what srv_completed() does: the route's done(), then the check
    free(body);
    return 0;
}
