// workpool.h — a fixed set of threads running queued calls. kogpt2d runs here the part of a
// request whose cost grows with the request (JSON parsing, tokenizing, chat templates: http.c
// hands it every SRV_ROUTE_WORK route's handler), so that MHD's threads, which answer /healthz,
// /readyz and /metrics, never do more than read and write sockets.
//
// Bounded: at most n_threads calls run and max_queue wait; one more is refused (KG_EBUSY),
// and the HTTP layer answers 503 + Retry-After at once.
//
// Threads: every function may be called from any thread, except that workpool_stop() must
// not be called from a call the pool runs.
#ifndef WORKPOOL_H
#define WORKPOOL_H

#include <stddef.h>

#include "base/kg.h"

typedef struct WorkPool WorkPool;

// A queued call. cancelled is 1 when the pool stopped before running it: fn must then still
// answer or release what arg holds (nothing else will).
typedef void (*WorkFn)(void *arg, int cancelled);

// Starts n_threads (>= 1) threads; at most max_queue calls wait beyond those running.
// KG_OK and *out, or KG_ENOMEM with err. Stop and free with workpool_stop().
int workpool_start(WorkPool **out, size_t n_threads, size_t max_queue, char *err);

// Queues fn(arg, 0). KG_OK; KG_EBUSY when n_threads calls run and max_queue wait already
// (fn is not called); KG_ECANCEL once the pool is stopping.
int workpool_submit(WorkPool *p, WorkFn fn, void *arg);

// fn(ctx) runs on a pool thread each time the pool falls idle: that thread has finished a call
// and none is running or waiting (work that is best done once after a burst, not after each
// call: http.c gives memory back there). Set it before the first workpool_submit.
void workpool_on_idle(WorkPool *p, void (*fn)(void *ctx), void *ctx);

// Calls waiting for a thread, and calls running now.
void workpool_gauges(WorkPool *p, size_t *queued, size_t *running);

// Stops taking calls, lets the running ones finish, joins the threads, then runs every call
// still queued as fn(arg, 1) on the caller's thread, and frees p. NULL is fine.
void workpool_stop(WorkPool *p);

#endif
