// lossscale.h — dynamic loss scaling for f16 mixed precision (the scheme of NVIDIA's
// mixed-precision training guide and PyTorch's GradScaler).
//
// The loss is multiplied by `scale` before backward so that small gradients survive f16's
// range, and the optimizer divides it out. A step whose gradients overflow (a non-finite
// norm) is skipped and the scale halved; after `interval` good steps in a row it doubles.
#ifndef TRAIN_LOSSSCALE_H
#define TRAIN_LOSSSCALE_H

#include <stdint.h>

typedef struct {
    float scale;        // current multiplier (a power of two keeps scaling exact)
    uint32_t good;      // finite steps since the last change
    uint32_t interval;  // good steps before doubling
    float min_scale;    // never halves below this
    float max_scale;    // never doubles above this
    uint64_t n_skipped; // steps skipped for overflow so far
} LossScaler;

// A scaler starting at scale (65536 is the usual start; 1 with interval 0 disables it).
LossScaler loss_scaler_new(float scale, uint32_t interval);

// After backward: finite says whether the (scaled) gradients are all finite. Returns 1 when
// the optimizer step should be applied, 0 when it must be skipped; updates the scale.
int loss_scaler_update(LossScaler *s, int finite);

#endif
