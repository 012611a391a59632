// adamw.h — AdamW over the trainer's one flat parameter buffer, the learning-rate
// schedule (linear warmup, then cosine decay to a floor) and global grad-norm clipping.
//
// The moments m and v have the parameter buffer's layout (gpt2_param_tensors order) and live
// in backend memory beside the parameters, so a step is the backend's adamw_update op over
// each tensor (on a GPU nothing leaves the device); weight decay applies per tensor
// (matrices and embeddings yes; biases and layer norms no, as each tensor's decay flag says).
#ifndef TRAIN_ADAMW_H
#define TRAIN_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt2.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
} AdamWHyper;

#define ADAMW_DEFAULTS                                                                             \
    ((AdamWHyper){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f})

// An optimizer over parameters [lo, lo + n) of a buffer of total: the whole buffer (lo 0,
// n = total), or under ZeRO-1 one rank's shard of it (dist_shard), so that each rank holds
// 2 n floats of moments instead of 2 total.
typedef struct {
    KgBackend *be; // holds m and v (not owned)
    size_t lo, n;  // the parameters this optimizer updates: [lo, lo + n)
    size_t total;  // floats in the parameter buffer
    float *m;      // (n) first moment of parameters lo.., backend memory
    float *v;      // (n) second moment, backend memory
    uint64_t t;    // steps taken (bias correction uses t + 1 for the next one)
} AdamW;

// Zeroed moments for n parameters in be's memory. KG_ENOMEM with err filled. Free with
// adamw_free().
int adamw_init(AdamW *o, KgBackend *be, size_t n, char *err);
// The same for parameters [lo, lo + n) of total (lo + n <= total).
int adamw_init_shard(AdamW *o, KgBackend *be, size_t lo, size_t n, size_t total, char *err);
void adamw_free(AdamW *o);

// One optimizer step: for each tensor's part within [o->lo, o->lo + o->n), params -=
// AdamW(grads * grad_scale), decay only where the tensor's flag says. grad_scale folds in
// 1/accumulation steps and the clipping factor. params and grads are (o->total) floats of
// backend memory (only the optimizer's range is read or written); tensors cover them exactly.
// Increments o->t. Each element is updated on its own, so the result does not depend on
// how the backend splits the work, nor on how ZeRO-1 splits the buffer.
void adamw_step(AdamW *o, float *params, const float *grads, const Gpt2ParamTensor *tensors,
                size_t n_tensors, float lr, float grad_scale, const AdamWHyper *h);

// Learning rate of 0-based step s of total: linear warmup (s + 1) / warmup * lr_max over the
// first warmup steps, then cosine from lr_max down to lr_min at the last step.
float adamw_lr(uint64_t s, uint64_t total, uint64_t warmup, float lr_max, float lr_min);

// L2 norm of g (n floats of be's memory), accumulated in double; not finite when some
// element is not (an overflow under loss scaling).
double adamw_grad_norm(KgBackend *be, const float *g, size_t n);

// The factor that brings a gradient of norm `norm` down to `clip` (1 when clip <= 0 or the
// norm is already within it).
float adamw_clip_scale(double norm, float clip);

#endif
