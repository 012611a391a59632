// chat_prompt.h — messages into one prompt, as /v1/chat/completions (ep_chat.c) and
// /v1/responses (ep_responses.c) both take them: each message's role and text content checked
// (a string, or text parts joined), the list rendered by the model's chat template
// (served->chat_template, set up by ep_chat_setup) and encoded.
//
// Encoding: the template's bos/eos texts ("</s>") become their ids, as Hugging Face's
// tokenizers parse special tokens in a rendered template. A tokenizer.json matches them
// itself (added tokens); a SentencePiece model reads them as plain characters, so the prompt
// is encoded between them and their ids are put in between (served->chat_split_special).
#ifndef CHAT_PROMPT_H
#define CHAT_PROMPT_H

#include "api.h"
#include "chat_template/chat_template.h"

#define CHAT_MAX_MESSAGES 256 // messages per request

// The messages of one request, in order.
typedef struct {
    ChatMessage *msgs; // (n) roles point into the request, contents into texts
    char **texts;      // (n) the contents, malloc'd
    size_t n, cap;
} ChatTurns;

// Room for cap messages. KG_OK or KG_ENOMEM ("out of memory" in err). Free with
// chat_turns_free(), also after an error.
int chat_turns_init(ChatTurns *t, size_t cap, char *err);
void chat_turns_free(ChatTurns *t);

// Appends a message of role (NUL-terminated, from the request) with j_content: a string, null
// or absent (""), or an array of {"type", "text"} parts whose type is one of part_types
// (NULL-terminated), joined. where names the message in errors ("messages[2]", "input[0]").
// KG_OK; KG_EINVAL (400) a wrong type or invalid UTF-8; KG_EUNSUP (422) a part of another
// type; KG_ERANGE more than cap messages; KG_ENOMEM. err says which.
int chat_turns_add(ChatTurns *t, const char *role, const cJSON *j_content,
                   const char *const *part_types, const char *where, char *err);

// The turns rendered by the model's chat template with the generation prompt, encoded into
// *ids (malloc'd, *n of them: 1..n_ctx). KG_OK; KG_EUNSUP with served->chat_error when the
// model's template is unusable; the template's or the prompt's error otherwise.
int chat_turns_prompt(const ApiModel *served, const ChatTurns *t, int **ids, size_t *n, char *err);

// OpenAI's default for a reply with no token limit: to the end of the context, n_ctx minus
// the prompt (at least 1: the prompt's last logits give one token), unless the model stops.
long long chat_max_tokens(const ApiModel *served, size_t n_prompt);

#endif
