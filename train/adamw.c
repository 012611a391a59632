// adamw.c — AdamW, the warmup + cosine schedule and grad-norm clipping (adamw.h).
#include "adamw.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/kg.h"
#include "model/kgmath.h"

int adamw_init(AdamW *o, size_t n, char *err) {
    memset(o, 0, sizeof *o);
    o->m = calloc(n ? n : 1, sizeof *o->m);
    o->v = calloc(n ? n : 1, sizeof *o->v);
    if (!o->m || !o->v) {
        adamw_free(o);
        return kg_err(err, KG_ENOMEM, "adamw: out of memory for %zu moments", 2 * n);
    }
    o->n = n;
    return KG_OK;
}

void adamw_free(AdamW *o) {
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

typedef struct {
    AdamW *o;
    float *params;
    const float *grads;
    const Gpt2ParamTensor *tensors;
    size_t n_tensors;
    size_t lo, hi; // the slice [lo, hi) of the buffer this job updates
    float lr, grad_scale, b1c, b2c;
    const AdamWHyper *h;
} AdamWJob;

static void *adamw_job(void *arg) {
    const AdamWJob *j = arg;
    // scalars in locals: stores through p must not look like they could change them
    const float lr = j->lr, scale = j->grad_scale, b1c = j->b1c, b2c = j->b2c;
    const float beta1 = j->h->beta1, beta2 = j->h->beta2, eps = j->h->eps;
    // restrict: the four arrays never overlap, so the loop vectorizes (adamw.c is -O3)
    float *restrict p = j->params, *restrict m = j->o->m, *restrict v = j->o->v;
    const float *restrict g = j->grads;
    for (size_t k = 0; k < j->n_tensors; k++) {
        const Gpt2ParamTensor *pt = &j->tensors[k];
        size_t lo = pt->offset > j->lo ? pt->offset : j->lo;
        size_t hi = pt->offset + pt->count < j->hi ? pt->offset + pt->count : j->hi;
        const float wd = pt->decay ? j->h->weight_decay : 0.0f;
        for (size_t i = lo; i < hi; i++)
            kg_adamw_update(&p[i], &m[i], &v[i], g[i] * scale, lr, beta1, beta2, eps, wd, b1c, b2c);
    }
    return NULL;
}

#define ADAMW_MAX_THREADS 64

void adamw_step(AdamW *o, float *params, const float *grads, const Gpt2ParamTensor *tensors,
                size_t n_tensors, float lr, float grad_scale, const AdamWHyper *h) {
    o->t++;
    AdamWJob job = {.o = o,
                    .params = params,
                    .grads = grads,
                    .tensors = tensors,
                    .n_tensors = n_tensors,
                    .lo = 0,
                    .hi = o->n,
                    .lr = lr,
                    .grad_scale = grad_scale,
                    .h = h};
    job.b1c = 1.0f - powf(h->beta1, (float)o->t);
    job.b2c = 1.0f - powf(h->beta2, (float)o->t);
    size_t nt = o->threads > 1 ? (size_t)o->threads : 1;
    if (nt > ADAMW_MAX_THREADS) nt = ADAMW_MAX_THREADS;
    if (o->n < ((size_t)1 << 18)) nt = 1; // small buffers: threads cost more than they save
    AdamWJob jobs[ADAMW_MAX_THREADS];
    pthread_t tid[ADAMW_MAX_THREADS];
    int started[ADAMW_MAX_THREADS] = {0};
    for (size_t k = 0; k < nt; k++) {
        jobs[k] = job;
        jobs[k].lo = o->n * k / nt;
        jobs[k].hi = o->n * (k + 1) / nt;
        if (k > 0) started[k] = !pthread_create(&tid[k], NULL, adamw_job, &jobs[k]);
    }
    adamw_job(&jobs[0]);
    for (size_t k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            adamw_job(&jobs[k]); // no thread to be had: do that slice here
    }
}

float adamw_lr(uint64_t s, uint64_t total, uint64_t warmup, float lr_max, float lr_min) {
    if (s < warmup) return lr_max * (float)(s + 1) / (float)warmup;
    if (total <= warmup + 1) return lr_max;
    double frac = (double)(s - warmup) / (double)(total - warmup - 1); // 0 .. 1
    if (frac > 1) frac = 1;
    double coeff = 0.5 * (1.0 + cos(M_PI * frac));
    return (float)(lr_min + coeff * (lr_max - lr_min));
}

double adamw_grad_norm(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return sqrt(s);
}

float adamw_clip_scale(double norm, float clip) {
    if (clip <= 0 || !(norm > clip)) return 1.0f;
    return (float)(clip / norm);
}
