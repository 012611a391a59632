// bench_allreduce — communication alone: the gradient all-reduce of kogpt2-train on a buffer
// of N floats, with no compute beside it, under mpirun (bench/bench_train_multihost.sh runs it
// on network-namespace hosts over shaped links). Per repetition, timed on every rank and
// reported for rank 0 as the median over --reps:
//   bucketed  DistGrads as backward drives it: the buffer told top down in --layers equal
//             ranges, fused into --bucket-mb buckets, then dist_grads_wait (nothing to hide
//             behind, so this is the whole communication time)
//   whole     dist_allreduce_mean of the buffer after the fact (kogpt2-train's fallback)
//   small     a 1-float dist_allreduce_mean: the latency term of the cost model
// Prints one line: "allreduce ranks R floats N bucket_mb M wire W bucketed_ms X whole_ms Y
// small_ms Z". Figures only.
//   mpirun -np 2 build/bench_allreduce --floats 4800000 [--layers 6] [--bucket-mb 8]
//       [--wire f32|bf16|f16] [--reps 10]
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "train/dist.h"

#include "bench_util.h"

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"floats", required_argument, 0, 'n'},    {"layers", required_argument, 0, 'l'},
        {"bucket-mb", required_argument, 0, 'b'}, {"wire", required_argument, 0, 'w'},
        {"reps", required_argument, 0, 'r'},      {0, 0, 0, 0}};
    char err[KG_ERRLEN];
    Dist d;
    if (dist_init(&d, &argc, &argv, err)) {
        fprintf(stderr, "bench_allreduce: %s\n", err);
        return 1;
    }
    size_t n = 4800000, layers = 6;
    double bucket_mb = 8;
    int reps = 10;
    KgDtype wire = KG_F32;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'n')
            n = strtoull(optarg, NULL, 10);
        else if (c == 'l')
            layers = strtoull(optarg, NULL, 10);
        else if (c == 'b')
            bucket_mb = atof(optarg);
        else if (c == 'r')
            reps = atoi(optarg);
        else if (c == 'w' && !strcmp(optarg, "bf16"))
            wire = KG_BF16;
        else if (c == 'w' && !strcmp(optarg, "f16"))
            wire = KG_F16;
        else if (c != 'w' || strcmp(optarg, "f32")) {
            fprintf(stderr, "bench_allreduce: bad arguments (see the file's comment)\n");
            return 2;
        }
    }
    if (!n || !layers || reps < 1 || reps > 1000 || !(bucket_mb > 0) || d.size < 2) {
        fprintf(stderr, "bench_allreduce: needs 2+ ranks, --floats, --layers, --reps 1..1000\n");
        dist_finalize(&d);
        return 2;
    }
    float *buf = malloc(n * sizeof *buf);
    double *t_bucket = malloc((size_t)reps * sizeof *t_bucket);
    double *t_whole = malloc((size_t)reps * sizeof *t_whole);
    double *t_small = malloc((size_t)reps * sizeof *t_small);
    DistGrads *g = NULL;
    int rc = !buf || !t_bucket || !t_whole || !t_small;
    if (!rc)
        rc = dist_grads_new(&g, &d, buf, n, (size_t)(bucket_mb * 1048576.0 / sizeof(float)), wire,
                            err);
    for (size_t i = 0; !rc && i < n; i++)
        buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    size_t per = n / layers;
    for (int r = 0; !rc && r <= reps; r++) { // repetition 0 warms up (connections, pages)
        rc = dist_barrier(&d, err);
        double t0 = kg_now_s();
        for (size_t l = layers; !rc && l-- > 0;) { // top down, as backward tells them
            size_t lo = l * per, hi = l + 1 == layers ? n : lo + per;
            dist_grads_ready(g, lo, hi - lo);
        }
        if (!rc) rc = dist_grads_wait(g, err);
        double t1 = kg_now_s();
        if (!rc) rc = dist_allreduce_mean(&d, buf, n, err);
        double t2 = kg_now_s();
        if (!rc) rc = dist_allreduce_mean(&d, buf, 1, err);
        double t3 = kg_now_s();
        if (r > 0) {
            t_bucket[r - 1] = t1 - t0;
            t_whole[r - 1] = t2 - t1;
            t_small[r - 1] = t3 - t2;
        }
    }
    if (rc) {
        fprintf(stderr, "bench_allreduce (rank %d on %s): %s\n", d.rank, d.host,
                rc == 1 ? "out of memory" : err);
    } else if (d.rank == 0) {
        printf("allreduce ranks %d floats %zu bucket_mb %g wire %s bucketed_ms %.2f whole_ms "
               "%.2f small_ms %.3f\n",
               d.size, n, bucket_mb, wire == KG_F32 ? "f32" : kg_dtype_name(wire),
               1e3 * bench_median(t_bucket, (size_t)reps),
               1e3 * bench_median(t_whole, (size_t)reps),
               1e3 * bench_median(t_small, (size_t)reps));
    }
    dist_grads_free(g);
    free(buf);
    free(t_bucket);
    free(t_whole);
    free(t_small);
    dist_finalize(&d);
    return rc ? 1 : 0;
}
