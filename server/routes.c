// routes.c — kogpt2d's one route table: what is served, and where each endpoint is. A new
// endpoint is a row here and its own ep_<name>.c (api.h lists the steps).
//
// Every endpoint reads top to bottom in its own file (its request, its reply, its hooks into the
// engine sequence of job.c): ep_next_token.c, ep_score.c, ep_generate.c, ep_completions.c,
// ep_chat.c, ep_responses.c, ep_tokenize.c, ep_info.c, ep_tgi.c (TGI's), ep_sagemaker.c. Errors are
// {"error": {code (the HTTP status), type (OpenAI's), message, param}}: 400 malformed JSON, wrong
// type, invalid UTF-8, missing field; 401 API key; 404 (a wrong model: model_not_found); 405
// (+Allow); 413 body over --max-body; 415 not application/json; 422 a value out of range (param
// names it), empty or over-long prompt (the message says n_prompt_tokens and n_ctx), a token id
// outside the vocabulary, something unsupported; 429 queue full (+Retry-After); 503 loading, out of
// memory, cancelled by shutdown, a connection over --max-connections or --max-connections-per-ip,
// or every work thread busy with --max-work-queue waiting (+Retry-After). The TGI routes answer the
// same statuses in TGI's {"error", "error_type"}. Unknown keys are ignored; null means "not given".
#include "api.h"

// The POST routes' bodies (up to --max-body) are parsed, tokenized and templated on the work
// pool (SRV_ROUTE_WORK): the GETs, /healthz first, are answered by MHD's threads meanwhile.
static const SrvRoute ROUTES[] = {
    {"POST", "/v1/next-token", ep_next_token, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/score", ep_score, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/generate", ep_generate, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/completions", ep_completions, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/chat/completions", ep_chat_completions, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/responses", ep_responses, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/tokenize", ep_tokenize, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/v1/detokenize", ep_detokenize, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"GET", "/v1/models", ep_models, 0},
    {"GET", "/v1/models/", ep_model, SRV_ROUTE_PREFIX},
    {"GET", "/healthz", ep_healthz, SRV_ROUTE_OPEN},
    {"GET", "/readyz", ep_readyz, SRV_ROUTE_OPEN},
    {"GET", "/metrics", ep_metrics, SRV_ROUTE_OPEN},
    // text-generation-inference's API (ep_tgi.c), with its error shape
    {"POST", "/generate", ep_tgi_generate, SRV_ROUTE_JSON | SRV_ROUTE_WORK | SRV_ROUTE_TGI},
    {"POST", "/generate_stream", ep_tgi_generate_stream,
     SRV_ROUTE_JSON | SRV_ROUTE_WORK | SRV_ROUTE_TGI},
    {"GET", "/info", ep_tgi_info, SRV_ROUTE_TGI},
    // TGI's compat route, where huggingface_hub's InferenceClient posts when given a URL; a GET
    // of / is still the Explorer's page (the fallback)
    {"POST", "/", ep_tgi_compat,
     SRV_ROUTE_JSON | SRV_ROUTE_WORK | SRV_ROUTE_TGI | SRV_ROUTE_GET_FALLBACK},
    // SageMaker's container contract (ep_sagemaker.c): /ping is /readyz
    {"GET", "/ping", ep_readyz, SRV_ROUTE_OPEN},
    {"POST", "/invocations", ep_invocations, SRV_ROUTE_JSON | SRV_ROUTE_WORK | SRV_ROUTE_TGI},
};

const SrvRoute *api_routes(size_t *n) {
    *n = sizeof ROUTES / sizeof ROUTES[0];
    return ROUTES;
}

size_t api_endpoints(const char **out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0] && n < cap; i++)
        out[n++] = ROUTES[i].path;
    return n;
}
