// ep_sagemaker.c — Amazon SageMaker's bring-your-own-container contract: POST /invocations
// (GET /ping is /readyz's handler: 200 when the model is loaded and not draining, else 503).
//
// /invocations takes JSON and answers JSON, in the shape of the body's first known key:
//   {"inputs", "parameters"?, "stream"?}  text-generation-inference's, as Hugging Face's
//                                          SageMaker containers take it -> [{generated_text,
//                                          details?}] (SSE with "stream": true): ep_tgi.c
//   {"messages", ...}                      OpenAI's chat completions: ep_chat.c
//   {"prompt", ...}                        OpenAI's completions: ep_completions.c
// Anything else is a 400 naming the three. Errors are TGI's {"error", "error_type"}, as its
// SageMaker route answers (the route's SRV_ROUTE_TGI).
#include "api.h"

enum MHD_Result ep_invocations(SrvReq *r, const cJSON *j_req) {
    if (cJSON_HasObjectItem(j_req, "inputs")) return ep_tgi_compat(r, j_req);
    if (cJSON_HasObjectItem(j_req, "messages")) return ep_chat_completions(r, j_req);
    if (cJSON_HasObjectItem(j_req, "prompt")) return ep_completions(r, j_req);
    return srv_reply_error(r, 400,
                           "the body needs inputs (text-generation-inference's form), messages "
                           "(chat completions) or prompt (completions)",
                           NULL);
}
