// progress.h — a progress line for long work (prepare, convert), written to the stream its
// main gives (stderr). On a terminal one line redrawn at most five times a second with the
// percentage, the bytes done, the rate and an ETA; elsewhere (a log file, CI) one plain line
// each time another step_pct percent is done, so a log stays short. A total of 0 (a pipe)
// shows the bytes and the rate only.
//
//   KgProgress pr;
//   progress_start(&pr, stderr, "prepare", total_bytes, 10);
//   ... progress_update(&pr, bytes_done); ...
//   progress_end(&pr, bytes_done);
#ifndef PROGRESS_H
#define PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *out; // NULL: silent
    const char *what;
    uint64_t total; // bytes; 0 when unknown
    int tty;        // out is a terminal: redraw one line
    int step_pct;   // not a terminal: a line every step_pct percent
    int next_pct;   // the next percentage to print (not a terminal)
    int drew_all;   // the last line drawn was at done == total
    uint64_t done;  // bytes done so far
    double t0, t_drawn;
} KgProgress;

// Starts timing. out NULL makes every call a no-op; step_pct (1..100) applies off a terminal.
void progress_start(KgProgress *p, FILE *out, const char *what, uint64_t total, int step_pct);

// done bytes of total so far (cheap to call often: it prints only when a line is due). p may
// be NULL (no progress wanted), here and in progress_advance.
void progress_update(KgProgress *p, uint64_t done);

// bytes more are done: for work done in pieces by code that does not know the total.
void progress_advance(KgProgress *p, uint64_t bytes);

// The last line: on a terminal it ends the redrawn line; elsewhere it prints 100 % once.
void progress_end(KgProgress *p, uint64_t done);

#endif
