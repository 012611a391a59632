// weights_cmp.c — compares two model directories' weights, for the train test scripts (a tool,
// not a test).   weights_cmp DIR_A DIR_B TOL
// Prints the largest |a - b| over every tensor (and which tensor); exit 0 when it is <= TOL,
// 1 when larger or when the tensor lists differ, 2 on a usage or read error.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "model/kgmath.h"
#include "model/safetensors.h"

static double elem(const StTensor *t, size_t i) {
    if (t->dtype == KG_F32) return ((const float *)t->data)[i];
    uint16_t h = ((const uint16_t *)t->data)[i];
    return t->dtype == KG_F16 ? kg_f16_to_f32(h) : kg_bf16_to_f32(h);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: weights_cmp DIR_A DIR_B TOL\n");
        return 2;
    }
    SafeTensors a, b;
    char err[KG_ERRLEN], path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", argv[1]);
    if (safetensors_open(&a, path, err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", argv[2]);
    if (safetensors_open(&b, path, err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    double maxd = 0;
    const char *where = "";
    int bad = a.n_tensors != b.n_tensors;
    for (size_t k = 0; k < a.n_tensors && !bad; k++) {
        const StTensor *ta = &a.tensors[k], *tb = safetensors_find(&b, ta->name);
        if (!tb || tb->n_elems != ta->n_elems || ta->dtype == KG_DTYPE_OTHER ||
            tb->dtype == KG_DTYPE_OTHER) {
            fprintf(stderr, "tensor %s: missing or different in %s\n", ta->name, argv[2]);
            bad = 1;
            break;
        }
        for (size_t i = 0; i < ta->n_elems; i++) {
            double d = fabs(elem(ta, i) - elem(tb, i));
            if (d > maxd || d != d) {
                maxd = d;
                where = ta->name;
            }
        }
    }
    double tol = atof(argv[3]);
    printf("max |a - b| = %.3e (%s), tolerance %.1e\n", maxd, where, tol);
    safetensors_close(&a);
    safetensors_close(&b);
    return bad || !(maxd <= tol);
}
