// buf.c — the growable byte buffer (buf.h).
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kg.h"

int buf_reserve(KgBuf *b, size_t extra) {
    size_t need;
    if (kg_add_overflow(b->len, extra, &need) || kg_add_overflow(need, 1, &need)) return KG_ENOMEM;
    return KG_GROW(b->p, &b->cap, need, NULL);
}

int buf_append(KgBuf *b, const void *s, size_t n) {
    if (buf_reserve(b, n)) return KG_ENOMEM;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return KG_OK;
}

int buf_printf(KgBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n)) return KG_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return KG_OK;
}

char *buf_take(KgBuf *b, size_t *len) {
    if (!b->p && buf_reserve(b, 0)) return NULL;
    b->p[b->len] = '\0';
    char *p = b->p;
    if (len) *len = b->len;
    *b = (KgBuf){0};
    return p;
}

int buf_read_line(KgBuf *b, FILE *f, size_t max, int *too_long) {
    b->len = 0;
    if (b->p) b->p[0] = '\0';
    *too_long = 0;
    int c = getc(f);
    if (c == EOF) return 0;
    for (; c != EOF && c != '\n'; c = getc(f)) {
        if (*too_long) continue; // read past, not held
        if (b->len == max) {
            *too_long = 1;
            b->len = 0;
            if (b->p) b->p[0] = '\0';
            continue;
        }
        char ch = (char)c;
        if (buf_append(b, &ch, 1)) return KG_ENOMEM;
    }
    return 1;
}

void buf_free(KgBuf *b) {
    free(b->p);
    *b = (KgBuf){0};
}
