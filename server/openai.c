// openai.c — the pieces of OpenAI's streamed and whole replies that completions and chat
// completions share (openai.h).
#include "openai.h"

int openai_add_logprobs(cJSON *j_obj, cJSON *j_lp) {
    if (!j_lp) return cJSON_AddNullToObject(j_obj, "logprobs") ? KG_OK : KG_ENOMEM;
    if (cJSON_AddItemToObject(j_obj, "logprobs", j_lp)) return KG_OK;
    cJSON_Delete(j_lp); // not attached
    return KG_ENOMEM;
}

int openai_add_finish(cJSON *j_obj, const char *finish) {
    cJSON *j = finish ? cJSON_AddStringToObject(j_obj, "finish_reason", finish)
                      : cJSON_AddNullToObject(j_obj, "finish_reason");
    return j ? KG_OK : KG_ENOMEM;
}

cJSON *openai_reply(JobRequest *job, const char *object, OpenaiChoiceFn write_choice) {
    size_t prompt, generated;
    job_usage(job, &prompt, &generated);
    cJSON *j_choices;
    cJSON *j_root = job_openai_object(job, object, &j_choices);
    if (!j_root) return NULL;
    for (size_t i = 0; i < job->n_choices; i++)
        if (write_choice(job, j_choices, i)) goto oom;
    if (!api_add_usage(j_root, prompt, generated)) goto oom;
    return j_root;
oom:
    cJSON_Delete(j_root);
    return NULL;
}

int openai_stream_end(JobRequest *job, const char *object, int include_usage) {
    if (include_usage) {
        cJSON *j_choices;
        cJSON *j = job_openai_object(job, object, &j_choices);
        if (job_sse_usage(job, j)) return KG_ENOMEM; // j consumed, NULL counted as OOM
    }
    return job_sse_raw(job, "data: [DONE]\n\n");
}
