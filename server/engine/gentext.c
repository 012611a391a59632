// gentext.c — a generation's text, its stop strings and the bytes held back (gentext.h).
#include "gentext.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

int gentext_init(GenText *g, const char *const *stop, size_t n_stop) {
    *g = (GenText){0};
    if (n_stop == 0) return KG_OK;
    if (!(g->stop = calloc(n_stop, sizeof *g->stop))) return KG_ENOMEM;
    for (size_t i = 0; i < n_stop; i++, g->n_stop++) {
        if (!(g->stop[i] = strdup(stop[i]))) {
            gentext_free(g); // the copies made so far
            return KG_ENOMEM;
        }
        size_t len = strlen(stop[i]);
        g->stop_max = len > g->stop_max ? len : g->stop_max;
    }
    return KG_OK;
}

void gentext_free(GenText *g) {
    for (size_t i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    buf_free(&g->text);
    *g = (GenText){0};
}

int gentext_append(GenText *g, const char *s, size_t n) { return buf_append(&g->text, s, n); }

long gentext_find_stop(const GenText *g) {
    if (!g->text.p) return -1; // nothing generated yet
    const char *text = g->text.p;
    long best = -1;
    // only the tail can hold a new match: the last stop_max bytes plus what was released
    size_t from = g->released > g->stop_max ? g->released - g->stop_max : 0;
    for (size_t i = 0; i < g->n_stop; i++) {
        const char *hit = strstr(text + from, g->stop[i]);
        if (hit && (best < 0 || hit - text < best)) best = hit - text;
    }
    return best;
}

size_t gentext_held_back(const GenText *g) {
    size_t hold = 0, len = g->text.len;
    for (size_t i = 0; i < g->n_stop; i++) {
        size_t ls = strlen(g->stop[i]);
        for (size_t n = ls - 1; n > hold && n >= 1; n--) // n: a proper prefix's length
            if (n <= len && !memcmp(g->text.p + len - n, g->stop[i], n)) {
                hold = n;
                break;
            }
    }
    return hold;
}

char *gentext_release(GenText *g, size_t upto, size_t *len) {
    size_t n = upto > g->released ? upto - g->released : 0;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, g->text.p + g->released, n);
    s[n] = '\0';
    g->released += n;
    *len = n;
    return s;
}
