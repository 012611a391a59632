// dist_device.c — the collectives of dist.h on backend memory (dist.h). Host memory uses the
// host collectives as they are; GPU memory uses NCCL when the build has it (libkgnccl.so,
// dist_nccl.c, opened here on the first collective over GPU memory), else it is staged
// through host memory a bucket at a time.
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/dlib.h"
#include "base/kg.h"
#include "dist.h"

#ifdef KG_HAVE_NCCL
#include "dist_nccl.h"

// Opens libkgnccl.so from beside the program and checks its door; NULL with err filled.
static const DistNcclLib *nccl_open(char *err) {
    char path[PATH_MAX];
    void *h = kg_dlib_open(DIST_NCCL_LIB_NAME, path, sizeof path, err);
    DistNcclDoor door = h ? (DistNcclDoor)kg_dlib_symbol(h, path, DIST_NCCL_LIB_SYMBOL, err) : NULL;
    if (!door) return NULL;
    const DistNcclLib *lib = door();
    if (!lib || lib->abi != DIST_NCCL_ABI || lib->lib_size != sizeof *lib ||
        lib->dist_size != sizeof(Dist)) {
        kg_err(err, KG_EIO,
               "%s is from another build of kogpt2: install the one built with "
               "this program",
               path);
        return NULL;
    }
    return lib;
}

// libkgnccl.so's door, opened once per process (the answer, a failure included, is kept);
// NULL with err filled. Thread-safe.
static const DistNcclLib *nccl_lib(char *err) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int tried;
    static const DistNcclLib *lib;
    static char why[KG_ERRLEN];
    pthread_mutex_lock(&lock);
    if (!tried) {
        tried = 1;
        lib = nccl_open(why);
    }
    const DistNcclLib *out = lib;
    if (!out) kg_err(err, KG_EIO, "nccl: %s", why);
    pthread_mutex_unlock(&lock);
    return out;
}
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
    const DistNcclLib *lib = nccl_lib(err);
    return lib ? lib->broadcast(d, be, buf, n, err) : KG_EIO;
#else
    return staged(d, be, buf, n, dist_broadcast, err);
#endif
}

int dist_allreduce_mean_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err) {
    if (d->size == 1) return KG_OK;
    if (be->ops->host_memory) return dist_allreduce_mean(d, buf, n, err);
#ifdef KG_HAVE_NCCL
    const DistNcclLib *lib = nccl_lib(err);
    return lib ? lib->allreduce_mean(d, be, buf, n, 1, err) : KG_EIO;
#else
    return staged(d, be, buf, n, dist_allreduce_mean, err);
#endif
}

int dist_allreduce_mean_start_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err) {
#ifdef KG_HAVE_NCCL
    if (d->size > 1 && !be->ops->host_memory) {
        const DistNcclLib *lib = nccl_lib(err);
        return lib ? lib->allreduce_mean(d, be, buf, n, 0, err) : KG_EIO;
    }
#endif
    return dist_allreduce_mean_be(d, be, buf, n, err);
}

int dist_wait_be(Dist *d, char *err) {
#ifdef KG_HAVE_NCCL
    if (d->nccl) return nccl_lib(err)->wait(d, err); // a communicator: the library is open
#endif
    (void)d;
    (void)err;
    return KG_OK;
}

void dist_release_be(Dist *d) {
#ifdef KG_HAVE_NCCL
    if (d->nccl) nccl_lib(NULL)->release(d);
#else
    (void)d;
#endif
}
