// chat_template.h — OpenAI-style chat messages into one prompt string with a Hugging Face
// chat template (tokenizer_config.json's "chat_template"): the small part of Jinja2 that
// GPT-2-family and simple chat templates use (issue 15).
//
// A library of its own (kgchattemplate): this header is its one door. Its files:
// chat_template_lex.c (+ _lex.h: the lexer, UTF-8 and whitespace), chat_template.c (the parser,
// into the nodes of _ast.h; the defaults), chat_template_ops.c (+ _ops.h: operations on values:
// comparisons, arithmetic, subscripts, methods, filters, tests) and chat_template_render.c (the
// tree walk and its statements); the private headers are for those files alone. It uses base/
// and the C library, nothing of the server.
//
// Rendered as transformers renders it: trim_blocks and lstrip_blocks on, one trailing
// newline of the source dropped, \r\n and \r read as \n; the variables messages (a list of
// {role, content}), bos_token, eos_token, add_generation_prompt, tools and documents (none),
// and the function raise_exception(msg).
//
// Supported (tests/chat_templates/vectors.json holds jinja2's renderings of each):
//   text, {{ expr }}, {# comments #}, whitespace control {%- -%} {{- -}} {#- -#} and {%+ +%}
//   {% if %} {% elif %} {% else %} {% endif %}
//   {% for x in list %} ... {% else %} ... {% endfor %}, with loop.index, index0, revindex,
//     revindex0, first, last, length, previtem, nextitem; an undefined list loops zero times
//   {% set name = expr %}, Jinja's scoping: a set inside a for lasts for that iteration
//   literals: 'str' "str" (Python escapes; adjacent literals join), decimal integers,
//     true/false/none (and True/False/None), [lists]
//   x.attr x['key'] x[0] x[-1] x[a:b:c]; + - * // % on integers, + joins strings and lists,
//     * repeats them; ~, == != < <= > >=, in, not in, and, or, not (Python's values),
//     a if c else b, (parentheses); Jinja's precedence
//   tests: is [not] defined, undefined, none, string, number, integer, boolean, true,
//     false, odd, even
//   filters: trim, length/count, upper, lower, capitalize, default/d, string, first, last, join
//   string methods: strip, lstrip, rstrip, upper, lower, capitalize, startswith, endswith
// Undefined values behave as Jinja's default Undefined: printed as "", false, an error when
// added to or looked into. upper/lower/capitalize change ASCII letters only (Python changes
// every cased letter; Hangul has no case). Integers are 64-bit: overflow is an error.
//
// Everything else is refused by chat_template_parse() with one line, and the KG code:
//   "chat template: the filter 'tojson' is not supported (line 3)"   KG_EUNSUP
//   "chat template: missing {% endfor %} for the for on line 2"      KG_EFORMAT (syntax)
// macros, call blocks, include/import/extends, raw, namespace() and every other function
// but raise_exception, loop controls, {% generation %}, floats, dicts, tuples, keyword
// arguments, chained comparisons, filters, tests and methods not listed above. So is what
// jinja2 itself refuses (x if c else y as an if's condition, a test given an argument). A
// render that needs something unsupported (printing a list, indexing or slicing a string,
// str % args) fails with KG_EUNSUP; where jinja2 raises, the render fails too (KG_EINVAL).
//
// Bounded for templates from untrusted model directories: the source, the number of parts
// and names, nesting (blocks and expressions) at parse time; output bytes, the memory of
// strings and lists built on the way and the work done at render time (a loop nest over
// messages that would run for hours stops with KG_ERANGE). No recursion is deeper than
// CHAT_TEMPLATE_MAX_DEPTH levels of the template.
#ifndef CHAT_TEMPLATE_H
#define CHAT_TEMPLATE_H

#include <stddef.h>

#include "base/kg.h"

#define CHAT_TEMPLATE_MAX_SOURCE (1 << 20) // bytes of template source
#define CHAT_TEMPLATE_MAX_OUTPUT (1 << 20) // bytes of rendered prompt
#define CHAT_TEMPLATE_MAX_DEPTH  64        // nested blocks; nested expression levels

typedef struct {
    const char *role;    // "system", "user", "assistant", ...; not NULL
    const char *content; // UTF-8, NUL-terminated; NULL is JSON null (the template sees none)
} ChatMessage;

typedef struct ChatTemplate ChatTemplate;

// Parses source[0..len) (no NUL needed; the bytes are copied). KG_OK and *out, or *out NULL
// and KG_EFORMAT (a syntax error), KG_EUNSUP (Jinja the subset lacks), KG_ERANGE (a limit)
// or KG_ENOMEM, with "chat template: what (line N)" in err. Free with chat_template_free().
// A parsed template is read-only: render it from any number of threads at once.
int chat_template_parse(ChatTemplate **out, const char *source, size_t len, char *err);

// Renders msgs[0..n) into *out (malloc'd, NUL-terminated, *out_len bytes before the NUL;
// free() it). bos_token / eos_token may be NULL: the template sees them undefined.
// On error *out is NULL and err says why: KG_EINVAL when the messages do not fit the
// template (raise_exception(msg) gives "chat template: msg"; a role that is NULL; an
// undefined value used; int + str), KG_EUNSUP, KG_ERANGE (output over
// CHAT_TEMPLATE_MAX_OUTPUT, too much memory or work), KG_ENOMEM. t and msgs are unchanged.
int chat_template_render(const ChatTemplate *t, const ChatMessage *msgs, size_t n,
                         int add_generation_prompt, const char *bos_token, const char *eos_token,
                         char **out, size_t *out_len, char *err);

void chat_template_free(ChatTemplate *t);

// The defaults, as template sources (NUL-terminated).
//
// CHAT_TEMPLATE_USR_SYS: the KoGPT2-chatbot convention (haven-jeon/KoGPT2-chatbot trains on
// "<usr>" question "<sys>" answer "</s>"), for tokenizers that have <usr> and <sys>. Each
// message in order: system (or developer) -> its content as plain text, no marker;
// user -> "<usr>" content; assistant -> "<sys>" content eos_token ("</s>" in KoGPT2); any
// other role -> KG_EINVAL. add_generation_prompt appends "<sys>". Nothing between parts;
// a null content counts as "".
//   [system "친절하게", user "안녕", assistant "반가워요", user "뭐 해?"] + prompt ->
//   "친절하게<usr>안녕<sys>반가워요</s><usr>뭐 해?<sys>"
//
// CHAT_TEMPLATE_PLAIN: one "role: content\n" line per message, any role (a null content:
// "role: \n"), then "assistant:" (no newline, no space) when add_generation_prompt.
extern const char CHAT_TEMPLATE_USR_SYS[];
extern const char CHAT_TEMPLATE_PLAIN[];

#endif
