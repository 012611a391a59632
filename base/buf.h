// buf.h — one growable byte buffer: appends and formatted appends, always NUL-terminated,
// sizes in checked arithmetic. What the tokenizer, the HTTP body reader, the chat-template
// output, the metrics page, the generated text and the shard writer all grow.
//
//   KgBuf b = {0};
//   if (buf_append(&b, "x", 1) || buf_printf(&b, "%d", 2)) goto oom;
//   ... b.p, b.len ...
//   buf_free(&b);
#ifndef BUF_H
#define BUF_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    char *p;    // (cap) bytes; p[len] is '\0' once anything was appended; NULL when empty
    size_t len; // bytes in use
    size_t cap; // bytes allocated
} KgBuf;

// Makes room for extra more bytes plus the NUL: KG_OK, or KG_ENOMEM (also when the size
// would overflow) with b unchanged.
int buf_reserve(KgBuf *b, size_t extra);

// Appends n bytes of s (s may be NULL when n is 0). KG_OK, or KG_ENOMEM with b unchanged.
int buf_append(KgBuf *b, const void *s, size_t n);

// Appends a printf-formatted string. KG_OK, or KG_ENOMEM with b unchanged.
int buf_printf(KgBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Hands the bytes to the caller (malloc'd, NUL-terminated even when empty; *len may be NULL)
// and leaves b empty. NULL on OOM (only possible when b is empty), b unchanged.
char *buf_take(KgBuf *b, size_t *len);

// Reads f's next line (up to '\n', which is not kept; NUL bytes are kept as bytes) into b,
// replacing what b held, but keeps at most max bytes of it: a longer line is read to its end
// and dropped, so memory is bounded by max whatever the file holds (*too_long = 1, b empty).
// 1 when a line was read (the last one may lack its '\n'), 0 at the end of the file,
// KG_ENOMEM; ferror(f) tells a read error from the end. Not thread-safe on one f.
int buf_read_line(KgBuf *b, FILE *f, size_t max, int *too_long);

// Frees the bytes and leaves b empty (reusable).
void buf_free(KgBuf *b);

#endif
