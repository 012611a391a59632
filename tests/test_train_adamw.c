// test_train_adamw.c — AdamW, the LR schedule and clipping against hand-computed values, and
// AdamW over ZeRO-1 shards against the whole buffer (bit for bit: each element on its own).
// Tolerance: 1e-6 relative (float arithmetic on values near 1).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/kgmath.h"
#include "train/adamw.h"
#include "train/dist.h"
#include "train/lossscale.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-6 * fmax(1.0, fabs(b)); }

int main(void) {
    // one element, two steps, by hand (beta1 0.9, beta2 0.95, eps 1e-8, wd 0.1, lr 0.1):
    // t=1, g=0.5:   m=0.05 v=0.0125  mhat=0.5 vhat=0.25  p = 1 - 0.1 (0.5/0.5 + 0.1) = 0.89
    // t=2, g=-0.25: m=0.02 v=0.015   mhat=0.02/0.19 vhat=0.015/0.0975
    //               p = 0.89 - 0.1 (0.105263/0.392232 + 0.089) = 0.8542629
    float p = 1, m = 0, v = 0;
    kg_adamw_update(&p, &m, &v, 0.5f, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.9f, 1 - 0.95f);
    CHECK_MSG(near(p, 0.89) && near(m, 0.05) && near(v, 0.0125), "p %.9f m %g v %g", p, m, v);
    kg_adamw_update(&p, &m, &v, -0.25f, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.81f, 1 - 0.9025f);
    double want = 0.89 - 0.1 * ((0.02 / 0.19) / (sqrt(0.015 / 0.0975) + 1e-8) + 0.1 * 0.89);
    CHECK_MSG(near(p, want) && near(want, 0.8542629), "p %.9f want %.9f", p, want);

    // adamw_step: the decay flag per tensor, grad_scale, t counting
    Gpt2ParamTensor t[2] = {{.name = "w", .offset = 0, .count = 2, .decay = 1},
                            {.name = "b", .offset = 2, .count = 1, .decay = 0}};
    char err[256];
    KgBackend *be = kg_cpu_backend_new(1, err), *be3 = kg_cpu_backend_new(3, err);
    REQUIRE(be && be3, "%s", err);
    AdamW o;
    REQUIRE(!adamw_init(&o, be, 3, NULL), "init");
    float params[3] = {1, 1, 1}, grads[3] = {1.0f, 1.0f, 1.0f};
    AdamWHyper h = {0.9f, 0.95f, 1e-8f, 0.1f};
    adamw_step(&o, params, grads, t, 2, 0.1f, 0.5f, &h); // g = 0.5 for all
    CHECK(o.t == 1);
    CHECK_MSG(near(params[0], 0.89) && near(params[1], 0.89), "decayed %.9f", params[0]);
    CHECK_MSG(near(params[2], 0.9), "not decayed %.9f (1 - 0.1 * 1)", params[2]);
    CHECK(near(o.m[2], 0.05) && near(o.v[2], 0.0125));
    adamw_free(&o);

    // three threads split the buffer; every element's result is the same as with one thread
    size_t big = (size_t)1 << 19;
    AdamW o1, o3;
    REQUIRE(!adamw_init(&o1, be, big, NULL) && !adamw_init(&o3, be3, big, NULL), "init");
    float *p1 = malloc(big * sizeof *p1), *p3 = malloc(big * sizeof *p3);
    float *gb = malloc(big * sizeof *gb);
    for (size_t i = 0; i < big; i++) {
        p1[i] = p3[i] = (float)(i % 97) * 0.01f;
        gb[i] = (float)((int)(i % 13) - 6) * 0.1f;
    }
    Gpt2ParamTensor tb[3] = {{.offset = 0, .count = 1000, .decay = 0},
                             {.offset = 1000, .count = big - 2000, .decay = 1},
                             {.offset = big - 1000, .count = 1000, .decay = 0}};
    for (int k = 0; k < 3; k++) {
        adamw_step(&o1, p1, gb, tb, 3, 0.01f, 1.0f, &h);
        adamw_step(&o3, p3, gb, tb, 3, 0.01f, 1.0f, &h);
    }
    CHECK(!memcmp(p1, p3, big * sizeof *p1) && !memcmp(o1.v, o3.v, big * sizeof *p1));

    // ZeRO-1: three optimizers over dist_shard's three shards (whose edges fall inside the
    // tensors) update every element exactly as the whole one did, moments included
    float *pz = malloc(big * sizeof *pz);
    REQUIRE(pz, "out of memory");
    for (size_t i = 0; i < big; i++)
        pz[i] = (float)(i % 97) * 0.01f;
    size_t next = 0;
    for (int r = 0; r < 3; r++) {
        size_t lo, count;
        dist_shard(big, 3, r, &lo, &count);
        CHECK_MSG(lo == next && count >= big / 3 && count <= big / 3 + 1, "shard %d: %zu+%zu", r,
                  lo, count);
        next = lo + count;
        AdamW oz;
        REQUIRE(!adamw_init_shard(&oz, be, lo, count, big, NULL), "init shard");
        for (int k = 0; k < 3; k++)
            adamw_step(&oz, pz, gb, tb, 3, 0.01f, 1.0f, &h);
        CHECK_MSG(!memcmp(oz.m, o1.m + lo, count * sizeof *pz) &&
                      !memcmp(oz.v, o1.v + lo, count * sizeof *pz),
                  "shard %d's moments differ", r);
        adamw_free(&oz);
    }
    CHECK_MSG(next == big, "the shards cover %zu of %zu", next, big);
    CHECK_MSG(!memcmp(pz, p1, big * sizeof *p1), "the sharded steps differ from the whole one");
    free(pz);
    free(p1);
    free(p3);
    free(gb);
    adamw_free(&o1);
    adamw_free(&o3);

    // schedule: lr 1, floor 0.1, warmup 10, 111 steps (cosine over steps 10..110)
    CHECK(near(adamw_lr(0, 111, 10, 1.0f, 0.1f), 0.1));
    CHECK(near(adamw_lr(4, 111, 10, 1.0f, 0.1f), 0.5));
    CHECK(near(adamw_lr(9, 111, 10, 1.0f, 0.1f), 1.0));
    CHECK(near(adamw_lr(10, 111, 10, 1.0f, 0.1f), 1.0));
    CHECK(near(adamw_lr(35, 111, 10, 1.0f, 0.1f), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 4))));
    CHECK(near(adamw_lr(60, 111, 10, 1.0f, 0.1f), 0.55));
    CHECK(near(adamw_lr(110, 111, 10, 1.0f, 0.1f), 0.1));
    CHECK(near(adamw_lr(0, 1, 0, 0.5f, 0.0f), 0.5)); // a single step runs at the peak
    CHECK(near(adamw_lr(3, 5, 0, 1.0f, 0.0f), 0.5 * (1 + cos(M_PI * 0.75))));

    // norm and clipping
    float g[2] = {3, 4};
    CHECK(near(adamw_grad_norm(be, g, 2), 5));
    // the norm of a long vector is the same for any thread count, and an overflow shows
    float *ones = malloc(big * sizeof *ones);
    for (size_t i = 0; i < big; i++)
        ones[i] = (float)(i % 7) * 0.5f;
    double n1 = adamw_grad_norm(be, ones, big), n3 = adamw_grad_norm(be3, ones, big);
    // 74,898 whole cycles of 0..6 (squares sum to 91), then 0 and 1: 0.25 * (74898 * 91 + 1)
    CHECK_MSG(n1 == n3 && near(n1 * n1, 0.25 * (74898.0 * 91 + 1)), "%.9g %.9g", n1, n3);
    ones[big / 2] = INFINITY;
    CHECK(!isfinite(adamw_grad_norm(be3, ones, big)));
    free(ones);
    CHECK(near(adamw_clip_scale(5, 1), 0.2));
    CHECK(near(adamw_clip_scale(5, 10), 1));
    CHECK(near(adamw_clip_scale(5, 0), 1));
    CHECK(adamw_clip_scale(NAN, 1) == 1.0f);

    // dynamic loss scaling: overflow halves and skips, `interval` good steps double, bounded
    LossScaler ls = loss_scaler_new(65536.0f, 3);
    CHECK(loss_scaler_update(&ls, 1) && loss_scaler_update(&ls, 1) && ls.scale == 65536.0f);
    CHECK(loss_scaler_update(&ls, 1) && ls.scale == 131072.0f); // third good step doubles
    CHECK(!loss_scaler_update(&ls, 0) && ls.scale == 65536.0f && ls.n_skipped == 1);
    CHECK(loss_scaler_update(&ls, 1) && loss_scaler_update(&ls, 1) && ls.scale == 65536.0f);
    for (int i = 0; i < 40; i++)
        loss_scaler_update(&ls, 0);
    CHECK_MSG(ls.scale == 1.0f && ls.n_skipped == 41, "floor: scale %g", ls.scale);
    LossScaler off = loss_scaler_new(1.0f, 0); // f32/bf16: never changes
    for (int i = 0; i < 10; i++)
        loss_scaler_update(&off, 1);
    CHECK(off.scale == 1.0f);

    // a world of one: collectives are no-ops (no launcher variables in a ctest run)
    Dist d;
    int argc = 0;
    char **argv = NULL;
    REQUIRE(!dist_init(&d, &argc, &argv, NULL), "dist_init");
    CHECK(d.rank == 0 && d.size == 1);
    float buf[3] = {1, 2, 3};
    double s = 2.5;
    CHECK(!dist_allreduce_mean(&d, buf, 3, NULL) && buf[1] == 2);
    CHECK(!dist_allreduce_sum_f64(&d, &s, 1, NULL) && s == 2.5);
    CHECK(!dist_broadcast(&d, buf, 3, NULL) && !dist_barrier(&d, NULL));
    dist_finalize(&d);
    kg_backend_free(be);
    kg_backend_free(be3);
    return check_report();
}
