// progress.c — the progress line (progress.h).
#include "progress.h"

#include <unistd.h>

#include "base/kg.h"

void progress_start(KgProgress *p, FILE *out, const char *what, uint64_t total, int step_pct) {
    *p = (KgProgress){.out = out,
                      .what = what,
                      .total = total,
                      .tty = out && isatty(fileno(out)),
                      .step_pct = step_pct < 1     ? 1
                                  : step_pct > 100 ? 100
                                                   : step_pct,
                      .t0 = kg_now_s()};
    p->next_pct = p->step_pct;
}

// "prepare: 45% 58.1/128.0 MB, 3.4 MB/s, ETA 21 s" (or "prepare: 58.1 MB, 3.4 MB/s")
static void draw(const KgProgress *p, uint64_t done, double t, const char *end) {
    double mb = done / 1e6, rate = t > p->t0 ? mb / (t - p->t0) : 0;
    if (p->total) {
        double left = rate > 0 && p->total > done ? (p->total - done) / 1e6 / rate : 0;
        fprintf(p->out, "%s%s: %3.0f%% %.1f/%.1f MB, %.1f MB/s, ETA %.0f s%s", p->tty ? "\r" : "",
                p->what, 100.0 * done / p->total, mb, p->total / 1e6, rate, left, end);
    } else {
        fprintf(p->out, "%s%s: %.1f MB, %.1f MB/s%s", p->tty ? "\r" : "", p->what, mb, rate, end);
    }
    fflush(p->out);
}

void progress_update(KgProgress *p, uint64_t done) {
    if (!p) return;
    p->done = done;
    if (!p->out) return;
    if (p->tty) {
        double t = kg_now_s();
        if (t - p->t_drawn < 0.2) return;
        p->t_drawn = t;
        draw(p, done, t, "\033[K"); // clear what a longer line left
        return;
    }
    if (!p->total || p->next_pct > 100 || done * 100 < (uint64_t)p->next_pct * p->total) return;
    while (p->next_pct <= 100 && done * 100 >= (uint64_t)p->next_pct * p->total)
        p->next_pct += p->step_pct;
    draw(p, done, kg_now_s(), "\n");
    p->drew_all = done >= p->total;
}

void progress_advance(KgProgress *p, uint64_t bytes) {
    if (p) progress_update(p, p->done + bytes);
}

void progress_end(KgProgress *p, uint64_t done) {
    if (!p->out || (!p->tty && p->drew_all)) return;
    draw(p, done, kg_now_s(), p->tty ? "\033[K\n" : "\n");
    p->drew_all = 1;
}
