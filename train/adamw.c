// adamw.c — AdamW, the warmup + cosine schedule and grad-norm clipping (adamw.h).
#include "adamw.h"

#include <math.h>
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

void adamw_step(AdamW *o, float *params, const float *grads, const Gpt2ParamTensor *tensors,
                size_t n_tensors, float lr, float grad_scale, const AdamWHyper *h) {
    o->t++;
    float b1c = 1.0f - powf(h->beta1, (float)o->t);
    float b2c = 1.0f - powf(h->beta2, (float)o->t);
    for (size_t k = 0; k < n_tensors; k++) {
        const Gpt2ParamTensor *pt = &tensors[k];
        float wd = pt->decay ? h->weight_decay : 0.0f;
        // restrict: the four arrays never overlap, so the loop vectorizes (adamw.c is -O3)
        float *restrict p = params + pt->offset, *restrict m = o->m + pt->offset;
        float *restrict v = o->v + pt->offset;
        const float *restrict g = grads + pt->offset;
        for (size_t i = 0; i < pt->count; i++)
            kg_adamw_update(&p[i], &m[i], &v[i], g[i] * grad_scale, lr, h->beta1, h->beta2, h->eps,
                            wd, b1c, b2c);
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
