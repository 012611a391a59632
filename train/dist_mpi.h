// dist_mpi.h — what dist_mpi.c shares with dist_mpi_grads.c (builds with MPI only): the
// deadline every collective is polled against, the error a missed one becomes, and the
// 16-bit wire formats.
#ifndef TRAIN_DIST_MPI_H
#define TRAIN_DIST_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "dist.h"

// Whether MPI runs with MPI_THREAD_SERIALIZED (DistGrads' thread needs it).
int dist_mpi_threads_ok(const Dist *d);

// Sleeps a little between two polls of unfinished requests: *nap_ns grows from 0 (a yield)
// to 200 µs, so a collective that completes at once costs no sleep and a long one little CPU.
// progress 1 (something completed) starts it over.
void dist_mpi_nap(long *nap_ns, int progress);

// Polls req (from an MPI_I* call made at started, kg_now_s's clock) until it completes:
// KG_OK; KG_EIO when MPI reports an error or when d->timeout_s passes first (the message:
// dist_mpi_timeout's). what names the collective ("the gradient all-reduce").
int dist_mpi_wait(Dist *d, MPI_Request *req, double started, const char *what, char *err);

// The error of a collective that missed its deadline: a roll call among the ranks (each one
// that timed out tells the others, and listens for them a few seconds), then "step S: WHAT
// did not complete within T s; no answer from rank R (HOST)". Sets d->broken; KG_EIO.
int dist_mpi_timeout(Dist *d, const char *what, char *err);

// The summing op of a 16-bit wire type (KG_BF16, KG_F16) over MPI_UINT16_T: each element
// widened to f32, added, rounded back (made in dist_init). MPI_OP_NULL for another type.
MPI_Op dist_mpi_wire_op(const Dist *d, KgDtype wire);

// dst (n, wire's 16 bits) = src (n floats) * scale, rounded to nearest even; and back:
// dst (n floats) = src (n, 16 bits).
void dist_mpi_wire_pack(uint16_t *dst, const float *src, size_t n, float scale, KgDtype wire);
void dist_mpi_wire_unpack(float *dst, const uint16_t *src, size_t n, KgDtype wire);

#endif
