// openai.h — what OpenAI's completions (ep_completions.c) and chat completions (ep_chat.c)
// share on the wire: a choice's "logprobs" and "finish_reason" members, and the end of a
// stream. A streamed reply is, per choice, its chunks and a last one with its finish_reason
// (the endpoint's choice_end hook, through openai_add_finish), then openai_stream_end(): the
// usage chunk when stream_options.include_usage asked for it, and "data: [DONE]".
#ifndef OPENAI_H
#define OPENAI_H

#include "job.h"

// j_obj["logprobs"] = j_lp (consumed, also on error), or null when j_lp is NULL.
// KG_OK or KG_ENOMEM.
int openai_add_logprobs(cJSON *j_obj, cJSON *j_lp);

// j_obj["finish_reason"] = finish, or null while the choice goes on (finish NULL).
// KG_OK or KG_ENOMEM.
int openai_add_finish(cJSON *j_obj, const char *finish);

// Writes choice i of a whole reply into j_choices (an endpoint's own choice object: a
// completion's "text", a chat completion's "message"). KG_OK or KG_ENOMEM.
typedef int (*OpenaiChoiceFn)(JobRequest *job, cJSON *j_choices, size_t i);

// The whole reply of a request that did not stream: {"id", "object": object, "created",
// "model", "choices": [write_choice(job, choices, i) for each choice], "usage"}. NULL on OOM.
// The caller owns the result. The endpoints' reply hook, on the thread that runs the job.
cJSON *openai_reply(JobRequest *job, const char *object, OpenaiChoiceFn write_choice);

// The end of a stream, once every choice has sent its last chunk: with include_usage a chunk
// of object ("text_completion", "chat.completion.chunk") with "choices": [] and the usage of
// every choice, then "data: [DONE]". KG_OK or KG_ENOMEM. The endpoints' stream_end hook.
int openai_stream_end(JobRequest *job, const char *object, int include_usage);

#endif
