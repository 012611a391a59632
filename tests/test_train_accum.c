// test_train_accum.c — gradient accumulation: two micro-steps of B sequences, scaled by
// 1/2 as the trainer does, give the gradient of one step of 2B (the mean loss over 2B
// sequences is the mean of the two halves' means). Tolerance: max |diff| <= 1e-5 * max |g|
// (the sums run in another order). Also: activation recompute changes no gradient.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"
#include "model/gpt2.h"

// max |a - b| and max |b| over n floats
static void diff(const float *a, const float *b, size_t n, double *maxd, double *maxb) {
    *maxd = *maxb = 0;
    for (size_t i = 0; i < n; i++) {
        *maxd = fmax(*maxd, fabs((double)a[i] - b[i]));
        *maxb = fmax(*maxb, fabs((double)b[i]));
    }
}

int main(void) {
    char err[KG_ERRLEN];
    KgBackend *be = kg_cpu_backend_new(2, err);
    REQUIRE(be, "%s", err);
    Gpt2Config c = gpt2_config_shape(2, 32, 4, 16, 97);
    Gpt2 m;
    REQUIRE(!gpt2_train_model_new(&m, &c, NULL, be, 3, err), "%s", err);
    const size_t B = 2, T = 16, n = gpt2_param_count(&c);
    int in[2 * 2 * 16], tg[2 * 2 * 16];
    uint64_t s = 12345;
    for (size_t i = 0; i < 2 * B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int)((s >> 33) % c.vocab_size);
        tg[i] = (int)((s >> 17) % c.vocab_size);
    }
    // one step of 2B
    Gpt2Train *big = gpt2_train_new(&m, 2 * B, T, 0, err);
    REQUIRE(big, "%s", err);
    float loss_big, l0, l1;
    gpt2_train_zero_grad(big);
    REQUIRE(!gpt2_train_forward(&m, big, in, tg, &loss_big, err), "%s", err);
    gpt2_train_backward(&m, big);
    // two micro-steps of B
    Gpt2Train *mic = gpt2_train_new(&m, B, T, 0, err);
    REQUIRE(mic, "%s", err);
    gpt2_train_zero_grad(mic);
    REQUIRE(!gpt2_train_forward(&m, mic, in, tg, &l0, err), "%s", err);
    gpt2_train_backward(&m, mic);
    REQUIRE(!gpt2_train_forward(&m, mic, in + B * T, tg + B * T, &l1, err), "%s", err);
    gpt2_train_backward(&m, mic);
    float *g_acc = malloc(n * sizeof *g_acc);
    for (size_t i = 0; i < n; i++)
        g_acc[i] = 0.5f * gpt2_train_grads(mic)[i];
    double maxd, maxg;
    diff(g_acc, gpt2_train_grads(big), n, &maxd, &maxg);
    double dl = fabs(0.5 * (l0 + l1) - loss_big);
    printf("accumulation: loss %.7f vs %.7f (|diff| %.2e); grads max |diff| %.3e, max |g| %.3e "
           "(rel %.2e)\n",
           0.5 * (l0 + l1), loss_big, dl, maxd, maxg, maxd / maxg);
    CHECK_MSG(dl <= 1e-6 * loss_big, "loss differs by %g", dl);
    CHECK_MSG(maxd <= 1e-5 * maxg, "grads differ by %g (max |g| %g)", maxd, maxg);

    // recompute: the same gradients
    Gpt2Train *rec = gpt2_train_new(&m, 2 * B, T, 1, err);
    REQUIRE(rec, "%s", err);
    float loss_rec;
    gpt2_train_zero_grad(rec);
    REQUIRE(!gpt2_train_forward(&m, rec, in, tg, &loss_rec, err), "%s", err);
    gpt2_train_backward(&m, rec);
    diff(gpt2_train_grads(rec), gpt2_train_grads(big), n, &maxd, &maxg);
    printf("recompute: activations %zu vs %zu bytes; grads max |diff| %.3e\n",
           gpt2_train_bytes(rec), gpt2_train_bytes(big), maxd);
    CHECK(loss_rec == loss_big);
    CHECK_MSG(maxd <= 1e-6 * maxg, "recompute changed grads by %g", maxd);
    CHECK(gpt2_train_bytes(rec) < gpt2_train_bytes(big));

    free(g_acc);
    gpt2_train_free(rec);
    gpt2_train_free(mic);
    gpt2_train_free(big);
    gpt2_close(&m);
    kg_backend_free(be);
    return check_report();
}
