// dist_mpi_grads.c — DistGrads (dist.h): gradients all-reduced in buckets while backward
// runs. The main thread (backward's gradient hook) fuses adjacent finished ranges into
// buckets and queues each full one; a communication thread starts each queued bucket's
// MPI_Iallreduce and polls every one in flight (MPI_Test, with a growing nap between rounds
// that find nothing done) until it completes or misses the world's deadline. Every rank
// queues the same buckets in the same order (the same hook calls, the same bucket size), as
// MPI requires of collectives.
//
// Threads: q, head/tail/started, finished, rc and err are shared under mu; a bucket's
// fields are written by the main thread before tail passes it (under mu) and by the thread
// only after. MPI is called by the thread alone from a step's first queued bucket until
// dist_grads_wait returns (MPI_THREAD_SERIALIZED).
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "dist_mpi.h"

#define GRADS_QUEUE 64 // buckets queued or in flight at once (a step has about L + 2)

typedef struct {
    size_t lo, n;    // the range of the gradient buffer, in floats
    MPI_Request req; // its all-reduce
    double started;  // when it was started (kg_now_s)
} Bucket;

struct DistGrads {
    Dist *d;
    float *grads;            // (n) host memory
    size_t n, cap;           // floats; a bucket is sent once it holds cap
    KgDtype wire;            // KG_F32, KG_BF16 or KG_F16
    uint16_t *packed;        // (n) the 16-bit copy the wire carries (NULL for f32)
    MPI_Op op;               // the wire's sum
    size_t open_lo, open_hi; // main thread: the bucket being filled ([lo, hi), empty when equal)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;     // the thread waits on it for work, the main thread for completion
    Bucket q[GRADS_QUEUE]; // a ring: [head, started) in flight, [started, tail) queued
    uint64_t head, started, tail;
    int quit;
    int rc; // the first error (err), which stops the thread's work
    char err[KG_ERRLEN];
    double exposed_s; // the last dist_grads_wait's wait
};

// The thread: starts queued buckets, polls those in flight, retires the finished in order.
static int bucket_start(DistGrads *g, Bucket *b) {
    b->started = kg_now_s();
    if (g->wire == KG_F32)
        return MPI_Iallreduce(MPI_IN_PLACE, g->grads + b->lo, (int)b->n, MPI_FLOAT, MPI_SUM,
                              MPI_COMM_WORLD, &b->req);
    // scaled by 1/size before rounding: the sum is the mean, inside f16's range
    dist_mpi_wire_pack(g->packed + b->lo, g->grads + b->lo, b->n, 1.0f / (float)g->d->size,
                       g->wire);
    return MPI_Iallreduce(MPI_IN_PLACE, g->packed + b->lo, (int)b->n, MPI_UINT16_T, g->op,
                          MPI_COMM_WORLD, &b->req);
}

static void bucket_finish(DistGrads *g, const Bucket *b) {
    if (g->wire != KG_F32) {
        dist_mpi_wire_unpack(g->grads + b->lo, g->packed + b->lo, b->n, g->wire);
        return;
    }
    float inv = 1.0f / (float)g->d->size;
    for (size_t i = 0; i < b->n; i++)
        g->grads[b->lo + i] *= inv;
}

// Polls the buckets in flight once: 1 when one finished (or failed: *rc, err), else 0.
static int poll_once(DistGrads *g, uint64_t head, uint64_t started, int *done_to, int *rc,
                     char *err) {
    int progress = 0;
    *done_to = 0;
    for (uint64_t i = head; i < started && !*rc; i++) {
        Bucket *b = &g->q[i % GRADS_QUEUE];
        int done = b->req == MPI_REQUEST_NULL;
        if (!done && MPI_Test(&b->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            g->d->broken = 1;
            *rc = kg_err(err, KG_EIO,
                         "step %llu: the gradient all-reduce failed (MPI error: a "
                         "rank died?)",
                         (unsigned long long)g->d->step);
        } else if (done && b->n) {
            bucket_finish(g, b);
            b->n = 0; // finished: retired once those before it are
            progress = 1;
        } else if (!done && g->d->timeout_s > 0 && kg_now_s() - b->started > g->d->timeout_s) {
            *rc = dist_mpi_timeout(g->d, "the gradient all-reduce", err);
        }
        if (done && (uint64_t)*done_to == i - head) (*done_to)++;
    }
    return progress;
}

static void *grads_thread(void *arg) {
    DistGrads *g = arg;
    char err[KG_ERRLEN];
    long nap = 0;
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        if (g->rc || g->head == g->tail) { // nothing to do (or a failure): wait to be told
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        uint64_t head = g->head, from = g->started, to = g->tail;
        pthread_mutex_unlock(&g->mu);
        int rc = KG_OK, done_to = 0;
        for (uint64_t i = from; i < to && !rc; i++)
            if (bucket_start(g, &g->q[i % GRADS_QUEUE]) != MPI_SUCCESS) {
                g->d->broken = 1;
                rc = kg_err(err, KG_EIO, "step %llu: the gradient all-reduce could not start",
                            (unsigned long long)g->d->step);
            }
        int progress = rc ? 0 : poll_once(g, head, to, &done_to, &rc, err);
        pthread_mutex_lock(&g->mu);
        g->started = to;
        g->head += (uint64_t)done_to;
        if (rc && !g->rc) {
            g->rc = rc;
            memcpy(g->err, err, sizeof err);
        }
        if (progress || rc) pthread_cond_broadcast(&g->cv);
        if (!progress && !rc && g->head != g->tail) {
            pthread_mutex_unlock(&g->mu);
            dist_mpi_nap(&nap, 0);
            pthread_mutex_lock(&g->mu);
        } else {
            dist_mpi_nap(&nap, 1);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

// Main thread: queues [lo, lo + n) (waits while the ring is full).
static void queue_bucket(DistGrads *g, size_t lo, size_t n) {
    pthread_mutex_lock(&g->mu);
    while (!g->rc && g->tail - g->head == GRADS_QUEUE)
        pthread_cond_wait(&g->cv, &g->mu);
    if (!g->rc) {
        g->q[g->tail % GRADS_QUEUE] = (Bucket){.lo = lo, .n = n, .req = MPI_REQUEST_NULL};
        g->tail++;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

int dist_grads_new(DistGrads **out, Dist *d, float *grads, size_t n, size_t bucket, KgDtype wire,
                   char *err) {
    *out = NULL;
    if (!dist_mpi_threads_ok(d))
        return kg_err(err, KG_EUNSUP, "dist: this MPI gives no MPI_THREAD_SERIALIZED");
    if (wire != KG_F32 && dist_mpi_wire_op(d, wire) == MPI_OP_NULL)
        return kg_err(err, KG_EUNSUP, "dist: no %s wire", kg_dtype_name(wire));
    DistGrads *g = calloc(1, sizeof *g);
    if (!g) return kg_err(err, KG_ENOMEM, "dist: out of memory");
    *g = (DistGrads){.d = d, .grads = grads, .n = n, .wire = wire, .op = dist_mpi_wire_op(d, wire)};
    // a bucket of at most INT_MAX elements (an MPI count); at least one float
    g->cap = bucket < 1 ? 1 : bucket > INT_MAX ? INT_MAX : bucket;
    if (wire != KG_F32 && !(g->packed = malloc(n * sizeof *g->packed))) {
        free(g);
        return kg_err(err, KG_ENOMEM, "dist: out of memory for the %s wire (%zu values)",
                      kg_dtype_name(wire), n);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, grads_thread, g)) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g->packed);
        free(g);
        return kg_err(err, KG_EIO, "dist: cannot start the communication thread");
    }
    *out = g;
    return KG_OK;
}

void dist_grads_ready(void *ctx, size_t offset, size_t count) {
    DistGrads *g = ctx;
    // backward finishes ranges top down: one that ends where the open bucket starts joins it
    if (g->open_lo != g->open_hi && offset + count != g->open_lo) {
        queue_bucket(g, g->open_lo, g->open_hi - g->open_lo);
        g->open_lo = g->open_hi = 0;
    }
    if (g->open_lo == g->open_hi) g->open_hi = offset + count;
    g->open_lo = offset;
    // a range larger than an MPI count goes in pieces
    while (g->open_hi - g->open_lo >= g->cap) {
        size_t lo = g->open_hi - g->cap;
        queue_bucket(g, lo, g->cap);
        g->open_hi = lo;
    }
}

int dist_grads_wait(DistGrads *g, char *err) {
    double t0 = kg_now_s();
    if (g->open_lo != g->open_hi) queue_bucket(g, g->open_lo, g->open_hi - g->open_lo);
    g->open_lo = g->open_hi = 0;
    pthread_mutex_lock(&g->mu);
    while (!g->rc && g->head != g->tail)
        pthread_cond_wait(&g->cv, &g->mu);
    int rc = g->rc;
    if (rc) kg_err(err, rc, "%s", g->err);
    pthread_mutex_unlock(&g->mu);
    g->exposed_s = kg_now_s() - t0;
    return rc;
}

double dist_grads_exposed_s(const DistGrads *g) { return g->exposed_s; }

void dist_grads_free(DistGrads *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    if (!g->d->broken) free(g->packed); // MPI may still hold a broken world's buffers
    free(g);
}
