// gentext.h — a generation's text as the engine hands it out: the text so far, checked against
// the job's stop strings; bytes that could still grow into a stop string are held back until
// the next token shows whether they do.
//
//   GenText g;
//   if (gentext_init(&g, stop, n_stop)) goto oom;
//   gentext_append(&g, piece, n);                 // every generated token's text
//   long stop = gentext_find_stop(&g);            // -1: no stop string yet
//   size_t upto = stop >= 0 ? (size_t)stop : g.text.len - gentext_held_back(&g);
//   char *out = gentext_release(&g, upto, &len);  // the bytes not handed out before
//   gentext_free(&g);
//
// Only the engine thread uses a GenText: no locking.
#ifndef GENTEXT_H
#define GENTEXT_H

#include <stddef.h>

#include "base/buf.h"

typedef struct {
    KgBuf text;      // the generated text so far
    size_t released; // text[0 .. released) has been handed out
    char **stop;     // (n_stop) own copies of the stop strings, none empty
    size_t n_stop;
    size_t stop_max; // the longest stop string's length
} GenText;

// An empty text with copies of stop[0 .. n_stop) (none may be empty). KG_OK, or KG_ENOMEM
// with g empty (gentext_free is then a no-op).
int gentext_init(GenText *g, const char *const *stop, size_t n_stop);
void gentext_free(GenText *g);

// Appends n bytes of s (s may be NULL when n is 0). KG_OK, or KG_ENOMEM with g unchanged.
int gentext_append(GenText *g, const char *s, size_t n);

// The offset of the first stop string in the text, or -1. Only the part that can hold a new
// match is searched: from the longest stop string's length before what was released.
long gentext_find_stop(const GenText *g);

// How many bytes at the end of the text are the start of a stop string (they must wait).
size_t gentext_held_back(const GenText *g);

// Hands out text[released .. upto) as a malloc'd, NUL-terminated string of *len bytes (0 when
// upto <= released) and moves released there. NULL on OOM, g unchanged.
char *gentext_release(GenText *g, size_t upto, size_t *len);

#endif
