// shard.c — the shard reader: maps token shards and hands out windows in a seeded order
// (shard.h). Writing them is prepare.c's.
#include "shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "base/le.h"

// splitmix64: a stateless mix, so every order below is a pure function of its inputs.
static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int shard_open(Shard *s, const char *dir, const char *name, char *err) {
    memset(s, 0, sizeof *s);
    size_t name_len = strlen(name);
    if (name_len >= sizeof s->name) return kg_err(err, KG_EINVAL, "shard name too long: %s", name);
    memcpy(s->name, name, name_len + 1);
    char path[4096];
    kg_path_join(path, sizeof path, dir, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb)) {
        close(fd);
        return kg_err(err, KG_EIO, "stat %s: %s", path, strerror(errno));
    }
    if ((size_t)sb.st_size < SHARD_HEADER_SIZE) {
        close(fd);
        return kg_err(err, KG_EFORMAT, "%s: shorter than a shard header", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return kg_err(err, KG_EIO, "mmap %s: %s", path, strerror(errno));
    s->map = map;
    s->map_size = (size_t)sb.st_size;
    const unsigned char *b = map;
    ShardHeader *h = &s->h;
    h->version = kg_get_le32(b + 8);
    h->dtype_size = kg_get_le32(b + 12);
    h->vocab_size = kg_get_le64(b + 16);
    h->n_tokens = kg_get_le64(b + 24);
    h->n_docs = kg_get_le64(b + 32);
    h->text_bytes = kg_get_le64(b + 40);
    int rc = KG_OK;
    if (memcmp(b, SHARD_MAGIC, 8))
        rc = kg_err(err, KG_EFORMAT, "%s: not a token shard (bad magic)", path);
    else if (h->version != SHARD_VERSION)
        rc = kg_err(err, KG_EFORMAT, "%s: shard version %u, expected %d", path, h->version,
                    SHARD_VERSION);
    else if (h->dtype_size != 2 && h->dtype_size != 4)
        rc = kg_err(err, KG_EFORMAT, "%s: id size %u, expected 2 or 4", path, h->dtype_size);
    else if (h->n_tokens > (s->map_size - SHARD_HEADER_SIZE) / h->dtype_size ||
             SHARD_HEADER_SIZE + h->n_tokens * h->dtype_size != s->map_size)
        rc = kg_err(err, KG_EFORMAT, "%s: %llu ids do not match the file size %zu", path,
                    (unsigned long long)h->n_tokens, s->map_size);
    if (rc) {
        shard_close(s);
        return rc;
    }
    s->ids = b + SHARD_HEADER_SIZE;
    return KG_OK;
}

void shard_close(Shard *s) {
    if (s->map) munmap(s->map, s->map_size);
    s->map = NULL;
    s->ids = NULL;
}

static int shard_name_cmp(const void *a, const void *b) { return strcmp(a, b); }

int shard_name_ok(const char *name) {
    size_t n = strnlen(name, SHARD_NAME_MAX);
    return n < SHARD_NAME_MAX && !strncmp(name, "train_", 6) && kg_ends_with(name, ".bin") &&
           !strchr(name, '/');
}

int shard_list(const char *dir, const char *prefix, char (**names)[SHARD_NAME_MAX], size_t *n,
               char *err) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return kg_err(err, KG_EIO, "opendir %s: %s", dir, strerror(errno));
    size_t cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) || !kg_ends_with(e->d_name, ".bin"))
            continue;
        if (strlen(e->d_name) >= SHARD_NAME_MAX) continue;
        if (KG_GROW(*names, &cap, *n + 1, NULL)) {
            closedir(d);
            free(*names);
            *names = NULL;
            *n = 0;
            return kg_err(err, KG_ENOMEM, "opendir %s: out of memory", dir);
        }
        // zero-padded: checkpoints write the whole slot (train_state.bin)
        memset((*names)[*n], 0, SHARD_NAME_MAX);
        memcpy((*names)[(*n)++], e->d_name, strlen(e->d_name)); // < SHARD_NAME_MAX: checked
    }
    closedir(d);
    if (*n) qsort(*names, *n, SHARD_NAME_MAX, shard_name_cmp);
    return KG_OK;
}

// Windows of T+1 ids a shard of n ids holds.
static uint64_t shard_windows(uint64_t n, size_t T) { return n > T ? (n - 1) / T : 0; }

// Rebuilds the epoch's shard list from the directory and shuffles it by (seed, epoch).
static int loader_scan(ShardLoader *l, char *err) {
    free(l->names);
    l->names = NULL;
    int rc = shard_list(l->dir, "train_", &l->names, &l->n_names, err);
    if (rc) return rc;
    uint64_t r = mix64(l->seed ^ mix64(l->pos.epoch + 1));
    for (size_t i = l->n_names; i > 1; i--) { // Fisher-Yates
        r = mix64(r);
        size_t j = (size_t)(r % i);
        char tmp[SHARD_NAME_MAX];
        memcpy(tmp, l->names[i - 1], SHARD_NAME_MAX);
        memcpy(l->names[i - 1], l->names[j], SHARD_NAME_MAX);
        memcpy(l->names[j], tmp, SHARD_NAME_MAX);
    }
    return KG_OK;
}

// Opens shard index l->pos.shard of this epoch and shuffles its window order.
static int loader_open_shard(ShardLoader *l, char *err) {
    shard_close(&l->cur);
    int rc = shard_open(&l->cur, l->dir, l->names[l->pos.shard], err);
    if (rc) return rc;
    if (l->cur.h.vocab_size > l->vocab_size)
        return kg_err(err, KG_EFORMAT, "%s/%s: tokenizer vocabulary %llu exceeds the model's %u",
                      l->dir, l->cur.name, (unsigned long long)l->cur.h.vocab_size, l->vocab_size);
    l->n_windows = shard_windows(l->cur.h.n_tokens, l->T);
    if (l->n_windows > UINT32_MAX)
        return kg_err(err, KG_EFORMAT, "%s/%s: too many windows", l->dir, l->cur.name);
    free(l->perm);
    l->perm = malloc((l->n_windows ? l->n_windows : 1) * sizeof *l->perm);
    if (!l->perm) return kg_err(err, KG_ENOMEM, "shard %s: out of memory", l->cur.name);
    for (uint64_t i = 0; i < l->n_windows; i++)
        l->perm[i] = (uint32_t)i;
    uint64_t r = mix64(l->seed ^ mix64(l->pos.epoch + 1) ^ hash_name(l->cur.name));
    for (uint64_t i = l->n_windows; i > 1; i--) {
        r = mix64(r);
        uint64_t j = r % i;
        uint32_t t = l->perm[i - 1];
        l->perm[i - 1] = l->perm[j];
        l->perm[j] = t;
    }
    return KG_OK;
}

// Moves to a shard with a window left, starting a new epoch (and rescanning) as needed.
static int loader_settle(ShardLoader *l, char *err) {
    for (int epochs = 0;;) {
        if (l->cur.map && l->pos.window < l->n_windows) return KG_OK;
        if (l->cur.map) { // finished this shard
            shard_close(&l->cur);
            l->pos.shard++;
            l->pos.window = 0;
        }
        if (l->pos.shard >= l->n_names) {
            if (++epochs > 2)
                return kg_err(err, KG_EINVAL, "%s: no train shard holds %zu+1 tokens", l->dir,
                              l->T);
            l->pos.epoch++;
            l->pos.shard = 0;
            l->pos.window = 0;
            int rc = loader_scan(l, err);
            if (rc) return rc;
            continue;
        }
        int rc = loader_open_shard(l, err);
        if (rc) return rc;
    }
}

int shard_loader_open(ShardLoader *l, const char *dir, size_t T, uint64_t seed, uint32_t vocab_size,
                      const ShardPos *pos, char (*names)[SHARD_NAME_MAX], size_t n_names,
                      char *err) {
    memset(l, 0, sizeof *l);
    l->dir = strdup(dir);
    if (!l->dir) return kg_err(err, KG_ENOMEM, "loader: out of memory");
    l->T = T;
    l->seed = seed;
    l->vocab_size = vocab_size;
    if (pos) l->pos = *pos;
    int rc;
    if (names && n_names) {
        for (size_t i = 0; i < n_names; i++)
            if (!shard_name_ok(names[i])) {
                char show[SHARD_NAME_MAX];
                kg_show(show, sizeof show, names[i], strnlen(names[i], SHARD_NAME_MAX));
                shard_loader_close(l);
                return kg_err(err, KG_EFORMAT, "shard name '%s' is not a file name in %s", show,
                              dir);
            }
        l->names = malloc(n_names * SHARD_NAME_MAX);
        if (!l->names) return kg_err(err, KG_ENOMEM, "loader: out of memory");
        memcpy(l->names, names, n_names * SHARD_NAME_MAX);
        l->n_names = n_names;
    } else if ((rc = loader_scan(l, err))) {
        shard_loader_close(l);
        return rc;
    }
    if (l->pos.shard < l->n_names && (rc = loader_open_shard(l, err))) {
        shard_loader_close(l);
        return rc;
    }
    if ((rc = loader_settle(l, err))) shard_loader_close(l);
    return rc;
}

void shard_loader_close(ShardLoader *l) {
    shard_close(&l->cur);
    free(l->perm);
    free(l->names);
    free(l->dir);
    memset(l, 0, sizeof *l);
}

int shard_loader_next(ShardLoader *l, int *inputs, int *targets, size_t B, char *err) {
    const size_t T = l->T;
    for (size_t b = 0; b < B; b++) {
        int rc = loader_settle(l, err);
        if (rc) return rc;
        uint64_t start = (uint64_t)l->perm[l->pos.window++] * T;
        for (size_t t = 0; t < T; t++) {
            inputs[b * T + t] = shard_id(&l->cur, start + t);
            targets[b * T + t] = shard_id(&l->cur, start + t + 1);
        }
    }
    return KG_OK; // lazily: the next call moves on, so a shard dropped in meanwhile joins
}

int shard_loader_skip(ShardLoader *l, uint64_t n, char *err) {
    while (n > 0) {
        int rc = loader_settle(l, err);
        if (rc) return rc;
        uint64_t k = l->n_windows - l->pos.window;
        k = k < n ? k : n;
        l->pos.window += k;
        n -= k;
    }
    return KG_OK;
}
