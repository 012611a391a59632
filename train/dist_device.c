// dist_device.c — the collectives of dist.h on backend memory (dist.h). Host memory uses the
// host collectives as they are; GPU memory uses NCCL when the build has it (dist_nccl.c),
// else it is staged through host memory a bucket at a time.
#include <stdlib.h>

#include "base/kg.h"
#include "dist.h"

#ifdef KG_HAVE_NCCL
int dist_nccl_broadcast(Dist *d, KgBackend *be, float *buf, size_t n, char *err);
int dist_nccl_allreduce_mean(Dist *d, KgBackend *be, float *buf, size_t n, int wait, char *err);
int dist_nccl_wait(Dist *d, char *err);
void dist_nccl_release(Dist *d);
#else
typedef int (*HostCollective)(Dist *d, float *buf, size_t n, char *err);

// buf (n floats of device memory) through a host bucket: copy home, run f, copy back.
static int staged(Dist *d, KgBackend *be, float *buf, size_t n, HostCollective f, char *err) {
    size_t cap = n < DIST_BUCKET ? n : DIST_BUCKET;
    float *host = malloc(cap * sizeof *host);
    if (!host) return kg_err(err, KG_ENOMEM, "dist: out of memory for a %zu-float bucket", cap);
    int rc = KG_OK;
    for (size_t i = 0; !rc && i < n; i += cap) {
        size_t k = n - i < cap ? n - i : cap;
        be->ops->to_host(be, host, buf + i, k * sizeof *host);
        if (!(rc = f(d, host, k, err))) be->ops->to_device(be, buf + i, host, k * sizeof *host);
    }
    free(host);
    return rc;
}
#endif

int dist_broadcast_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err) {
    if (d->size == 1) return KG_OK;
    if (be->ops->host_memory) return dist_broadcast(d, buf, n, err);
#ifdef KG_HAVE_NCCL
    return dist_nccl_broadcast(d, be, buf, n, err);
#else
    return staged(d, be, buf, n, dist_broadcast, err);
#endif
}

int dist_allreduce_mean_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err) {
    if (d->size == 1) return KG_OK;
    if (be->ops->host_memory) return dist_allreduce_mean(d, buf, n, err);
#ifdef KG_HAVE_NCCL
    return dist_nccl_allreduce_mean(d, be, buf, n, 1, err);
#else
    return staged(d, be, buf, n, dist_allreduce_mean, err);
#endif
}

int dist_allreduce_mean_start_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err) {
#ifdef KG_HAVE_NCCL
    if (d->size > 1 && !be->ops->host_memory)
        return dist_nccl_allreduce_mean(d, be, buf, n, 0, err);
#endif
    return dist_allreduce_mean_be(d, be, buf, n, err);
}

int dist_wait_be(Dist *d, char *err) {
#ifdef KG_HAVE_NCCL
    if (d->nccl) return dist_nccl_wait(d, err);
#endif
    (void)d;
    (void)err;
    return KG_OK;
}

void dist_release_be(Dist *d) {
#ifdef KG_HAVE_NCCL
    dist_nccl_release(d);
#else
    (void)d;
#endif
}
