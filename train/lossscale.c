// lossscale.c — dynamic loss scaling (lossscale.h).
#include "lossscale.h"

LossScaler loss_scaler_new(float scale, uint32_t interval) {
    return (LossScaler){.scale = scale,
                        .interval = interval,
                        .min_scale = 1.0f,
                        .max_scale = 16777216.0f}; // 2^24: beyond it f16 gains nothing
}

int loss_scaler_update(LossScaler *s, int finite) {
    if (!finite) {
        s->n_skipped++;
        s->good = 0;
        if (s->scale * 0.5f >= s->min_scale) s->scale *= 0.5f;
        return 0;
    }
    if (s->interval && ++s->good >= s->interval) {
        s->good = 0;
        if (s->scale * 2.0f <= s->max_scale) s->scale *= 2.0f;
    }
    return 1;
}
