// tok_buf.h — a growable byte buffer shared by tok.c and tok_bpe.c (internal).
#ifndef TOK_BUF_H
#define TOK_BUF_H

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;    // (cap) bytes, p[n] is kept '\0' once anything was appended
    size_t n;   // bytes in use
    size_t cap; // bytes allocated
} TokBuf;

// Makes room for extra more bytes plus a NUL. 0 ok, -1 on OOM (b unchanged).
static inline int tok_buf_reserve(TokBuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

// Appends n bytes. 0 ok, -1 on OOM (b unchanged).
static inline int tok_buf_append(TokBuf *b, const void *s, size_t n) {
    if (tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

#endif
