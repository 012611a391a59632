// workpool.c — threads over one ring of queued calls (workpool.h).
#include "workpool.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    WorkFn fn;
    void *arg;
} WorkItem;

struct WorkPool {
    pthread_mutex_t mu;
    pthread_cond_t cv; // a call was queued, or the pool is stopping
    WorkItem *ring;    // (cap) calls waiting, from head
    size_t cap, head, n_queued;
    size_t max_queue, n_running;
    int stopping;
    pthread_t *threads; // (n_threads)
    size_t n_threads;
    void (*on_idle)(void *ctx); // (workpool_on_idle; NULL: none)
    void *idle_ctx;
};

static void *workpool_main(void *arg) {
    WorkPool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->n_queued && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping) break; // what is still queued runs cancelled in workpool_stop
        WorkItem it = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->n_queued--;
        p->n_running++;
        pthread_mutex_unlock(&p->mu);
        it.fn(it.arg, 0);
        pthread_mutex_lock(&p->mu);
        p->n_running--;
        if (p->on_idle && !p->n_running && !p->n_queued && !p->stopping) {
            pthread_mutex_unlock(&p->mu); // (a call submitted meanwhile runs on another thread)
            p->on_idle(p->idle_ctx);
            pthread_mutex_lock(&p->mu);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int workpool_start(WorkPool **out, size_t n_threads, size_t max_queue, char *err) {
    *out = NULL;
    WorkPool *p = calloc(1, sizeof *p);
    if (!p) return kg_err(err, KG_ENOMEM, "work pool: out of memory");
    p->n_threads = n_threads ? n_threads : 1;
    p->max_queue = max_queue;
    p->cap = p->n_threads + max_queue; // a call waits here until a thread takes it
    p->ring = calloc(p->cap, sizeof *p->ring);
    p->threads = calloc(p->n_threads, sizeof *p->threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    size_t started = 0;
    while (p->ring && p->threads && started < p->n_threads &&
           !pthread_create(&p->threads[started], NULL, workpool_main, p))
        started++;
    if (started < p->n_threads) {
        p->n_threads = started; // join what did start
        workpool_stop(p);
        return kg_err(err, KG_ENOMEM, "work pool: could not start %zu threads", n_threads);
    }
    *out = p;
    return KG_OK;
}

int workpool_submit(WorkPool *p, WorkFn fn, void *arg) {
    int rc = KG_OK;
    pthread_mutex_lock(&p->mu);
    if (p->stopping)
        rc = KG_ECANCEL;
    else if (p->n_queued + p->n_running >= p->n_threads + p->max_queue)
        rc = KG_EBUSY;
    else {
        p->ring[(p->head + p->n_queued) % p->cap] = (WorkItem){fn, arg};
        p->n_queued++;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void workpool_on_idle(WorkPool *p, void (*fn)(void *ctx), void *ctx) {
    pthread_mutex_lock(&p->mu);
    p->on_idle = fn;
    p->idle_ctx = ctx;
    pthread_mutex_unlock(&p->mu);
}

void workpool_gauges(WorkPool *p, size_t *queued, size_t *running) {
    pthread_mutex_lock(&p->mu);
    *queued = p->n_queued;
    *running = p->n_running;
    pthread_mutex_unlock(&p->mu);
}

void workpool_stop(WorkPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    for (; p->n_queued; p->n_queued--, p->head = (p->head + 1) % p->cap)
        p->ring[p->head].fn(p->ring[p->head].arg, 1); // no thread left: nothing races this
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->ring);
    free(p->threads);
    free(p);
}
