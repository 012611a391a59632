// adamw.c — AdamW, the warmup + cosine schedule and grad-norm clipping (adamw.h).
#include "adamw.h"

#include <math.h>
#include <string.h>

#include "base/kg.h"

int adamw_init(AdamW *o, KgBackend *be, size_t n, char *err) {
    return adamw_init_shard(o, be, 0, n, n, err);
}

int adamw_init_shard(AdamW *o, KgBackend *be, size_t lo, size_t n, size_t total, char *err) {
    memset(o, 0, sizeof *o);
    o->be = be;
    o->m = be->ops->alloc(be, (n ? n : 1) * sizeof *o->m); // alloc zeroes
    o->v = be->ops->alloc(be, (n ? n : 1) * sizeof *o->v);
    if (!o->m || !o->v) {
        adamw_free(o);
        return kg_err(err, KG_ENOMEM, "adamw: out of memory for %zu moments", 2 * n);
    }
    o->lo = lo;
    o->n = n;
    o->total = total;
    return KG_OK;
}

void adamw_free(AdamW *o) {
    if (o->m) o->be->ops->free(o->be, o->m);
    if (o->v) o->be->ops->free(o->be, o->v);
    memset(o, 0, sizeof *o);
}

void adamw_step(AdamW *o, float *params, const float *grads, const Gpt2ParamTensor *tensors,
                size_t n_tensors, float lr, float grad_scale, const AdamWHyper *h) {
    o->t++;
    KgAdamWStep a = kg_adamw_step(lr, h->beta1, h->beta2, h->eps, 0.0f, grad_scale, o->t);
    const size_t lo = o->lo, hi = o->lo + o->n;
    for (size_t k = 0; k < n_tensors; k++) {
        const Gpt2ParamTensor *pt = &tensors[k];
        // the part of the tensor in [lo, hi)
        size_t a0 = pt->offset > lo ? pt->offset : lo;
        size_t a1 = pt->offset + pt->count < hi ? pt->offset + pt->count : hi;
        if (a0 >= a1) continue;
        a.weight_decay = pt->decay ? h->weight_decay : 0.0f;
        o->be->ops->adamw_update(o->be, params + a0, grads + a0, o->m + (a0 - lo), o->v + (a0 - lo),
                                 a1 - a0, &a);
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

double adamw_grad_norm(KgBackend *be, const float *g, size_t n) {
    return sqrt(be->ops->sum_squares(be, g, n));
}

float adamw_clip_scale(double norm, float clip) {
    if (clip <= 0 || !(norm > clip)) return 1.0f;
    return (float)(clip / norm);
}
