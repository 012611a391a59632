// dist_mpi.c — dist.h over MPI: ranks are MPI processes, buffers move with MPI collectives,
// each started non-blocking and polled against the world's deadline (dist.h).
#include "dist_mpi.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/kg.h"

#define ROLL_TAG 7027 // the roll call's messages, on a communicator of their own

typedef struct {
    char (*hosts)[64]; // (size) every rank's host name
    MPI_Comm roll;     // a duplicate of the world for the roll call
    MPI_Op sum_bf16;   // dist_mpi_wire_op's
    MPI_Op sum_f16;    //
    int roll_rank;     // the roll call's message (must outlive sends never completed)
    int threads_ok;    // MPI gave MPI_THREAD_SERIALIZED (DistGrads' thread may call it)
} DistWorld;

void dist_mpi_nap(long *nap_ns, int progress) {
    if (progress) {
        *nap_ns = 0;
        return;
    }
    if (*nap_ns == 0) {
        sched_yield();
        *nap_ns = 1000;
        return;
    }
    struct timespec ts = {0, *nap_ns};
    nanosleep(&ts, NULL);
    *nap_ns = *nap_ns * 2 > 200000 ? 200000 : *nap_ns * 2;
}

// --- the 16-bit wire ---

#define WIRE_CHUNK 512 // floats converted at a time, on the stack

void dist_mpi_wire_pack(uint16_t *dst, const float *src, size_t n, float scale, KgDtype wire) {
    float tmp[WIRE_CHUNK];
    for (size_t i = 0; i < n; i += WIRE_CHUNK) {
        size_t k = n - i < WIRE_CHUNK ? n - i : WIRE_CHUNK;
        for (size_t j = 0; j < k; j++)
            tmp[j] = src[i + j] * scale;
        kg_dtype_convert(dst + i, wire, tmp, KG_F32, k);
    }
}

void dist_mpi_wire_unpack(float *dst, const uint16_t *src, size_t n, KgDtype wire) {
    kg_dtype_convert(dst, KG_F32, src, wire, n);
}

// inout[i] = round(f32(in[i]) + f32(inout[i])): MPI's user op over 16-bit elements.
static void wire_sum(const void *in, void *inout, int len, KgDtype wire) {
    float a[WIRE_CHUNK], b[WIRE_CHUNK];
    for (int i = 0; i < len; i += WIRE_CHUNK) {
        size_t k = (size_t)(len - i < WIRE_CHUNK ? len - i : WIRE_CHUNK);
        kg_dtype_convert(a, KG_F32, (const uint16_t *)in + i, wire, k);
        kg_dtype_convert(b, KG_F32, (uint16_t *)inout + i, wire, k);
        for (size_t j = 0; j < k; j++)
            b[j] += a[j];
        kg_dtype_convert((uint16_t *)inout + i, wire, b, KG_F32, k);
    }
}

static void wire_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    wire_sum(in, inout, *len, KG_BF16);
}

static void wire_sum_f16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    wire_sum(in, inout, *len, KG_F16);
}

MPI_Op dist_mpi_wire_op(const Dist *d, KgDtype wire) {
    const DistWorld *w = d->world;
    return !w                ? MPI_OP_NULL
           : wire == KG_BF16 ? w->sum_bf16
           : wire == KG_F16  ? w->sum_f16
                             : MPI_OP_NULL;
}

int dist_mpi_threads_ok(const Dist *d) {
    const DistWorld *w = d->world;
    return w && w->threads_ok;
}

// --- the world ---

int dist_init(Dist *d, int *argc, char ***argv, char *err) {
    *d = (Dist){.rank = 0, .size = 1, .timeout_s = DIST_TIMEOUT_DEFAULT};
    if (gethostname(d->host, sizeof d->host - 1)) snprintf(d->host, sizeof d->host, "?");
    if (!dist_launched_size()) return KG_OK; // a plain run: a world of one, MPI untouched
    // serialized: the gradient reducer's thread calls MPI while the main thread does not
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return kg_err(err, KG_EIO, "MPI_Init failed");
    d->mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    // errors come back as codes (a peer's connection reset), so that they name the step
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    DistWorld *w = calloc(1, sizeof *w);
    if (w) w->hosts = calloc((size_t)d->size, sizeof *w->hosts);
    if (!w || !w->hosts) {
        if (w) free(w);
        return kg_err(err, KG_ENOMEM, "dist: out of memory for %d host names", d->size);
    }
    d->world = w;
    w->roll_rank = d->rank;
    w->roll = MPI_COMM_NULL;
    if (MPI_Allgather(d->host, sizeof d->host, MPI_CHAR, w->hosts, sizeof *w->hosts, MPI_CHAR,
                      MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Comm_dup(MPI_COMM_WORLD, &w->roll) != MPI_SUCCESS ||
        MPI_Op_create(wire_sum_bf16, 1, &w->sum_bf16) != MPI_SUCCESS ||
        MPI_Op_create(wire_sum_f16, 1, &w->sum_f16) != MPI_SUCCESS)
        return kg_err(err, KG_EIO, "dist: MPI setup (host names, communicator) failed");
    MPI_Comm_set_errhandler(w->roll, MPI_ERRORS_RETURN);
    w->threads_ok = provided >= MPI_THREAD_SERIALIZED;
    return KG_OK;
}

const char *dist_host(const Dist *d, int r) {
    const DistWorld *w = d->world;
    if (r == d->rank) return d->host;
    return w && r >= 0 && r < d->size ? w->hosts[r] : "?";
}

void dist_abort(Dist *d, int code) {
    if (d->mpi) MPI_Abort(MPI_COMM_WORLD, code);
}

void dist_finalize(Dist *d) {
    if (d->broken) dist_abort(d, 1); // a collective left half done: MPI_Finalize would wait
    DistWorld *w = d->world;
    if (w) {
        if (w->roll != MPI_COMM_NULL) MPI_Comm_free(&w->roll);
        free(w->hosts);
        free(w);
        d->world = NULL;
    }
    if (d->mpi) MPI_Finalize();
    d->mpi = 0;
}

// --- deadlines ---

// Which ranks answer: every rank sends its number to every other on the roll call's
// communicator and takes what arrives within grace seconds. answered (size) gets 1 for each.
static void roll_call(Dist *d, int *answered, double grace) {
    DistWorld *w = d->world;
    int n = d->size;
    MPI_Request *rq = malloc(2 * (size_t)n * sizeof *rq);
    int *in = malloc((size_t)n * sizeof *in);
    if (!rq || !in) {
        free(rq);
        free(in);
        return; // out of memory: nobody is named
    }
    for (int r = 0; r < n; r++) {
        rq[r] = rq[n + r] = MPI_REQUEST_NULL;
        answered[r] = r == d->rank;
        if (r == d->rank) continue;
        MPI_Irecv(&in[r], 1, MPI_INT, r, ROLL_TAG, w->roll, &rq[r]);
        MPI_Isend(&w->roll_rank, 1, MPI_INT, r, ROLL_TAG, w->roll, &rq[n + r]);
    }
    double until = kg_now_s() + grace;
    long nap = 0;
    for (int left = n - 1; left > 0 && kg_now_s() < until;) {
        int progress = 0;
        for (int r = 0; r < n; r++) {
            int done = 0;
            if (rq[r] == MPI_REQUEST_NULL || MPI_Test(&rq[r], &done, MPI_STATUS_IGNORE) || !done)
                continue;
            answered[r] = 1;
            left--;
            progress = 1;
        }
        dist_mpi_nap(&nap, progress);
    }
    // what never came is left to MPI_Abort; in[] must then stay valid, so it is not freed
    int pending = 0;
    for (int r = 0; r < 2 * n; r++)
        if (rq[r] != MPI_REQUEST_NULL) {
            pending = 1;
            MPI_Request_free(&rq[r]);
        }
    if (!pending) free(in);
    free(rq);
}

// "step S", or "before the first step": when a collective failed.
static const char *when(const Dist *d, char *buf, size_t cap) {
    if (d->step)
        snprintf(buf, cap, "step %llu", (unsigned long long)d->step);
    else
        snprintf(buf, cap, "before the first step");
    return buf;
}

int dist_mpi_timeout(Dist *d, const char *what, char *err) {
    d->broken = 1;
    char step_s[48], missing[160] = "";
    int *answered = calloc((size_t)d->size, sizeof *answered);
    double grace = d->timeout_s / 2 < 2 ? 2 : d->timeout_s / 2 > 10 ? 10 : d->timeout_s / 2;
    if (answered && d->world) roll_call(d, answered, grace);
    size_t at = 0;
    for (int r = 0; answered && r < d->size && at < sizeof missing; r++)
        if (!answered[r])
            at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%d (%s)", at ? ", " : "",
                                   r, dist_host(d, r));
    free(answered);
    return kg_err(err, KG_EIO, "%s: %s did not complete within %g s (--dist-timeout); %s%s",
                  when(d, step_s, sizeof step_s), what, d->timeout_s,
                  missing[0]
                      ? "no answer from rank "
                      : "every rank answered a roll call (one is behind or the network is slow)",
                  missing);
}

int dist_mpi_wait(Dist *d, MPI_Request *req, double started, const char *what, char *err) {
    long nap = 0;
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            d->broken = 1;
            char step_s[48];
            return kg_err(err, KG_EIO, "%s: %s failed (MPI error: a rank died?)",
                          when(d, step_s, sizeof step_s), what);
        }
        if (done) return KG_OK;
        if (d->timeout_s > 0 && kg_now_s() - started > d->timeout_s)
            return dist_mpi_timeout(d, what, err);
        dist_mpi_nap(&nap, 0);
    }
}

// Starts a collective (rc, req from an MPI_I* call) and waits for it: dist_mpi_wait.
static int finish(Dist *d, int rc, MPI_Request *req, double started, const char *what, char *err) {
    if (rc != MPI_SUCCESS) {
        d->broken = 1;
        char step_s[48];
        return kg_err(err, KG_EIO, "%s: %s could not start (MPI error)",
                      when(d, step_s, sizeof step_s), what);
    }
    return dist_mpi_wait(d, req, started, what, err);
}

// --- collectives ---

int dist_broadcast(Dist *d, float *buf, size_t n, char *err) {
    for (size_t i = 0; d->size > 1 && i < n; i += DIST_BUCKET) {
        int k = (int)(n - i < DIST_BUCKET ? n - i : DIST_BUCKET);
        MPI_Request rq;
        double t0 = kg_now_s();
        int rc = MPI_Ibcast(buf + i, k, MPI_FLOAT, 0, MPI_COMM_WORLD, &rq);
        if ((rc = finish(d, rc, &rq, t0, "the broadcast of the weights", err))) return rc;
    }
    return KG_OK;
}

int dist_allreduce_mean(Dist *d, float *buf, size_t n, char *err) {
    float inv = 1.0f / (float)d->size;
    for (size_t i = 0; d->size > 1 && i < n; i += DIST_BUCKET) {
        int k = (int)(n - i < DIST_BUCKET ? n - i : DIST_BUCKET);
        MPI_Request rq;
        double t0 = kg_now_s();
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + i, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
        if ((rc = finish(d, rc, &rq, t0, "the gradient all-reduce", err))) return rc;
        for (int j = 0; j < k; j++)
            buf[i + (size_t)j] *= inv;
    }
    return KG_OK;
}

int dist_allreduce_sum_f64(Dist *d, double *buf, size_t n, char *err) {
    if (d->size == 1) return KG_OK;
    if (n > INT_MAX) return kg_err(err, KG_EINVAL, "dist: %zu doubles in one all-reduce", n);
    MPI_Request rq;
    double t0 = kg_now_s();
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq);
    return finish(d, rc, &rq, t0, "the all-reduce of the loss", err);
}

int dist_barrier(Dist *d, char *err) {
    if (d->size == 1) return KG_OK;
    MPI_Request rq;
    double t0 = kg_now_s();
    return finish(d, MPI_Ibarrier(MPI_COMM_WORLD, &rq), &rq, t0, "a barrier", err);
}

// --- ZeRO-1 ---

// counts[r], displs[r] (ints, MPI's) of every rank's shard of n floats; KG_EUNSUP past INT_MAX.
static int shard_table(const Dist *d, size_t n, int **counts, int **displs, char *err) {
    if (n > INT_MAX)
        return kg_err(err, KG_EUNSUP, "dist: %zu parameters: MPI counts are ints (at most %d)", n,
                      INT_MAX);
    *counts = malloc((size_t)d->size * sizeof **counts);
    *displs = malloc((size_t)d->size * sizeof **displs);
    if (!*counts || !*displs) {
        free(*counts);
        free(*displs);
        return kg_err(err, KG_ENOMEM, "dist: out of memory");
    }
    for (int r = 0; r < d->size; r++) {
        size_t lo, count;
        dist_shard(n, d->size, r, &lo, &count);
        (*counts)[r] = (int)count;
        (*displs)[r] = (int)lo;
    }
    return KG_OK;
}

int dist_reduce_scatter_mean(Dist *d, const float *buf, size_t n, float *shard, KgDtype wire,
                             char *err) {
    size_t lo, count;
    dist_shard(n, d->size, d->rank, &lo, &count);
    if (d->size == 1) {
        memcpy(shard, buf, n * sizeof *buf);
        return KG_OK;
    }
    MPI_Op op = dist_mpi_wire_op(d, wire);
    if (wire != KG_F32 && op == MPI_OP_NULL)
        return kg_err(err, KG_EUNSUP, "dist: no %s wire", kg_dtype_name(wire));
    int *counts, *displs;
    int rc = shard_table(d, n, &counts, &displs, err);
    if (rc) return rc;
    const char *what = "the gradient reduce-scatter";
    MPI_Request rq;
    double t0 = kg_now_s();
    if (wire == KG_F32) {
        rc = MPI_Ireduce_scatter(buf, shard, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
        if (!(rc = finish(d, rc, &rq, t0, what, err)))
            for (size_t i = 0; i < count; i++)
                shard[i] *= 1.0f / (float)d->size;
    } else { // scaled by 1/size before the rounding: the sums stay in f16's range
        uint16_t *packed = malloc((n + count) * sizeof *packed);
        if (!packed) {
            rc = kg_err(err, KG_ENOMEM, "dist: out of memory for the %s wire", kg_dtype_name(wire));
        } else {
            dist_mpi_wire_pack(packed, buf, n, 1.0f / (float)d->size, wire);
            rc = MPI_Ireduce_scatter(packed, packed + n, counts, MPI_UINT16_T, op, MPI_COMM_WORLD,
                                     &rq);
            if (!(rc = finish(d, rc, &rq, t0, what, err)))
                dist_mpi_wire_unpack(shard, packed + n, count, wire);
            if (!d->broken) free(packed); // MPI may still hold a broken one's
        }
    }
    free(counts);
    free(displs);
    return rc;
}

int dist_allgather(Dist *d, float *buf, size_t n, char *err) {
    if (d->size == 1) return KG_OK;
    int *counts, *displs;
    int rc = shard_table(d, n, &counts, &displs, err);
    if (rc) return rc;
    MPI_Request rq;
    double t0 = kg_now_s();
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT,
                         MPI_COMM_WORLD, &rq);
    rc = finish(d, rc, &rq, t0, "the all-gather of the weights", err);
    free(counts);
    free(displs);
    return rc;
}

int dist_gather(Dist *d, const float *shard, float *full, size_t n, char *err) {
    size_t lo, count;
    dist_shard(n, d->size, d->rank, &lo, &count);
    if (d->size == 1) {
        memcpy(full, shard, n * sizeof *shard);
        return KG_OK;
    }
    int *counts, *displs;
    int rc = shard_table(d, n, &counts, &displs, err);
    if (rc) return rc;
    MPI_Request rq;
    double t0 = kg_now_s();
    rc = MPI_Igatherv(shard, (int)count, MPI_FLOAT, full, counts, displs, MPI_FLOAT, 0,
                      MPI_COMM_WORLD, &rq);
    rc = finish(d, rc, &rq, t0, "the gather of the optimizer state", err);
    free(counts);
    free(displs);
    return rc;
}
