// ckpt.c — checkpoint directories and the train_state.bin sidecar (ckpt.h).
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "base/le.h"

#define CKPT_MAGIC "KGTRAIN"

int ckpt_remove_dir(const char *dir, char *err) {
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? KG_OK
                               : kg_err(err, KG_EIO, "opendir %s: %s", dir, strerror(errno));
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        kg_path_join(path, sizeof path, dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    if (rmdir(dir)) return kg_err(err, KG_EIO, "rmdir %s: %s", dir, strerror(errno));
    return KG_OK;
}

int ckpt_tokenizer_file(const char *path, char *out, size_t cap, char *err) {
    if (!kg_is_dir(path)) {
        if (access(path, R_OK))
            return kg_err(err, KG_EIO, "tokenizer %s: %s", path, strerror(errno));
        snprintf(out, cap, "%s", path);
        return KG_OK;
    }
    snprintf(out, cap, "%s/tokenizer.json", path);
    if (!access(out, R_OK)) return KG_OK;
    DIR *d = opendir(path);
    if (!d) return kg_err(err, KG_EIO, "opendir %s: %s", path, strerror(errno));
    char best[256] = "";
    for (struct dirent *e; (e = readdir(d));)
        if ((kg_ends_with(e->d_name, ".model") || kg_ends_with(e->d_name, ".spiece")) &&
            (!best[0] || strcmp(e->d_name, best) < 0))
            snprintf(best, sizeof best, "%s", e->d_name);
    closedir(d);
    if (!best[0]) return kg_err(err, KG_EIO, "%s: no tokenizer.json, *.model or *.spiece", path);
    snprintf(out, cap, "%s/%s", path, best);
    return KG_OK;
}

// --- the sidecar ---

#define CKPT_N_U64    13
#define CKPT_HDR_SIZE (16 + 8 * CKPT_N_U64)

// The moments live in backend memory (on a GPU, device memory): they pass through a host
// buffer of CKPT_CHUNK floats at a time. Each returns 0 on success.
#define CKPT_CHUNK ((size_t)1 << 20)

static int write_moments(FILE *fp, KgBackend *be, const float *src, size_t n, float *host) {
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        be->ops->to_host(be, host, src + i, k * sizeof *host);
        if (fwrite(host, sizeof *host, k, fp) != k) return -1; // host byte order: little-endian
    }
    return 0;
}

// Reads n moments of the named kind ("m" or "v") into dst, each checked on the host: finite,
// and not negative where nonneg (a second moment is a mean of squares).
static int read_moments(FILE *fp, const char *path, const char *name, int nonneg, KgBackend *be,
                        float *dst, size_t n, float *host, char *err) {
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        if (fread(host, sizeof *host, k, fp) != k)
            return kg_err(err, KG_EFORMAT, "%s: truncated", path);
        for (size_t j = 0; j < k; j++)
            if (!isfinite(host[j]) || (nonneg && host[j] < 0))
                return kg_err(err, KG_EFORMAT, "%s: adam %s[%zu] is %s", path, name, i + j,
                              isfinite(host[j]) ? "negative" : "not finite");
        be->ops->to_device(be, dst + i, host, k * sizeof *host);
    }
    return KG_OK;
}

static int state_write(const char *path, const CkptState *st, const AdamW *o, char *err) {
    if (o->lo || o->n != o->total)
        return kg_err(err, KG_EINVAL, "write %s: the optimizer holds %zu of %zu moments", path,
                      o->n, o->total);
    unsigned char hdr[CKPT_HDR_SIZE] = {0};
    memcpy(hdr, CKPT_MAGIC, 8);
    hdr[8] = CKPT_VERSION;
    uint64_t f[CKPT_N_U64] = {st->step,      st->total_steps, st->seed,       o->t, st->B,
                              st->T,         st->ranks,       st->grad_accum, o->n, st->pos.epoch,
                              st->pos.shard, st->pos.window,  st->n_names};
    for (int i = 0; i < CKPT_N_U64; i++)
        kg_put_le64(hdr + 16 + 8 * i, f[i]);
    float *host = malloc(CKPT_CHUNK * sizeof *host);
    if (!host) return kg_err(err, KG_ENOMEM, "write %s: out of memory", path);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(host);
        return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    }
    int bad = fwrite(hdr, 1, sizeof hdr, fp) != sizeof hdr;
    if (st->n_names) bad |= fwrite(st->names, SHARD_NAME_MAX, st->n_names, fp) != st->n_names;
    bad |= write_moments(fp, o->be, o->m, o->n, host) || write_moments(fp, o->be, o->v, o->n, host);
    free(host);
    bad |= fflush(fp) || fsync(fileno(fp));
    bad |= fclose(fp) != 0;
    if (bad) return kg_err(err, KG_EIO, "write %s: %s", path, strerror(errno));
    return KG_OK;
}

// The header's counts of at least 1 (a run never saves 0) and the file's size against its
// names and moments; KG_EFORMAT naming the field.
static int state_check_header(const char *path, const CkptState *st, uint64_t n_names,
                              size_t file_size, char *err) {
    const struct {
        const char *name;
        uint64_t value;
    } ones[] = {{"B (--batch)", st->B},
                {"T (--seq)", st->T},
                {"ranks", st->ranks},
                {"grad_accum (--grad-accum)", st->grad_accum}};
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++)
        if (!ones[i].value) return kg_err(err, KG_EFORMAT, "%s: %s is 0", path, ones[i].name);
    if (st->grad_accum > CKPT_MAX_GRAD_ACCUM) // a step that never ends, not a run's
        return kg_err(err, KG_EFORMAT,
                      "%s: grad_accum (--grad-accum) is %llu, over its limit of %d", path,
                      (unsigned long long)st->grad_accum, CKPT_MAX_GRAD_ACCUM);
    size_t names_bytes, moments_bytes, want;
    if (n_names > SIZE_MAX || st->n_params > SIZE_MAX ||
        kg_mul_overflow((size_t)n_names, SHARD_NAME_MAX, &names_bytes) ||
        kg_mul_overflow((size_t)st->n_params, 2 * sizeof(float), &moments_bytes) ||
        kg_add_overflow(CKPT_HDR_SIZE, names_bytes, &want) ||
        kg_add_overflow(want, moments_bytes, &want) || want != file_size)
        return kg_err(err, KG_EFORMAT,
                      "%s: %zu bytes, which does not match its %llu shard names and %llu "
                      "parameters",
                      path, file_size, (unsigned long long)n_names,
                      (unsigned long long)st->n_params);
    if (n_names && st->pos.shard > n_names)
        return kg_err(err, KG_EFORMAT, "%s: data position shard %llu is past its %llu shard names",
                      path, (unsigned long long)st->pos.shard, (unsigned long long)n_names);
    return KG_OK;
}

// Each name NUL-terminated inside its slot and a train shard's plain file name.
static int state_check_names(const char *path, const CkptState *st, char *err) {
    for (size_t i = 0; i < st->n_names; i++) {
        const char *name = st->names[i];
        size_t len = strnlen(name, SHARD_NAME_MAX);
        char show[SHARD_NAME_MAX + 1];
        kg_show(show, sizeof show, name, len);
        if (len == SHARD_NAME_MAX)
            return kg_err(err, KG_EFORMAT, "%s: shard name %zu '%s...' is not terminated", path, i,
                          show);
        if (!shard_name_ok(name))
            return kg_err(err, KG_EFORMAT,
                          "%s: shard name %zu '%s' is not a train shard's file name "
                          "(train_*.bin, inside --data)",
                          path, i, show);
    }
    return KG_OK;
}

int ckpt_state_read(const char *dir, CkptState *st, AdamW *o, char *err) {
    memset(st, 0, sizeof *st);
    char path[4096];
    kg_path_join(path, sizeof path, dir, CKPT_STATE_FILE);
    int fd;
    size_t file_size;
    int rc = kg_open_regular(path, &fd, &file_size, err);
    if (rc) return rc;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    }
    unsigned char hdr[CKPT_HDR_SIZE];
    if (fread(hdr, 1, sizeof hdr, fp) != sizeof hdr || memcmp(hdr, CKPT_MAGIC, 8)) {
        rc = kg_err(err, KG_EFORMAT, "%s: not a training state file", path);
        goto end;
    }
    if (hdr[8] != CKPT_VERSION) {
        rc = kg_err(err, KG_EFORMAT, "%s: version %d, expected %d", path, hdr[8], CKPT_VERSION);
        goto end;
    }
    uint64_t f[CKPT_N_U64];
    for (int i = 0; i < CKPT_N_U64; i++)
        f[i] = kg_get_le64(hdr + 16 + 8 * i);
    *st = (CkptState){.step = f[0],
                      .total_steps = f[1],
                      .seed = f[2],
                      .adam_t = f[3],
                      .B = f[4],
                      .T = f[5],
                      .ranks = f[6],
                      .grad_accum = f[7],
                      .n_params = f[8],
                      .pos = {f[9], f[10], f[11]}};
    uint64_t n_names = f[12];
    if ((rc = state_check_header(path, st, n_names, file_size, err))) goto end;
    if (n_names) { // within the file's size: checked
        st->names = malloc((size_t)n_names * SHARD_NAME_MAX);
        if (!st->names) {
            rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
            goto end;
        }
        if (fread(st->names, SHARD_NAME_MAX, n_names, fp) != n_names) {
            rc = kg_err(err, KG_EFORMAT, "%s: truncated", path);
            goto end;
        }
        st->n_names = n_names;
        if ((rc = state_check_names(path, st, err))) goto end;
    }
    if (o) {
        if (o->total != st->n_params) {
            rc = kg_err(err, KG_EFORMAT, "%s: %llu parameters, the model has %zu", path,
                        (unsigned long long)st->n_params, o->total);
            goto end;
        }
        float *host = malloc(CKPT_CHUNK * sizeof *host);
        if (!host) {
            rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
            goto end;
        }
        // the file holds every moment; o takes its range (ZeRO-1: one rank's shard), so a
        // checkpoint of any world size resumes at any other. Offsets within the file's size,
        // which state_check_header matched against n_params.
        long at = ftell(fp);
        long m_at = at + (long)(o->lo * sizeof *host);
        long v_at = at + (long)((o->total + o->lo) * sizeof *host);
        if (fseek(fp, m_at, SEEK_SET)) rc = kg_err(err, KG_EIO, "%s: seek failed", path);
        if (!rc) rc = read_moments(fp, path, "m", 0, o->be, o->m, o->n, host, err);
        if (!rc && fseek(fp, v_at, SEEK_SET)) rc = kg_err(err, KG_EIO, "%s: seek failed", path);
        if (!rc) rc = read_moments(fp, path, "v", 1, o->be, o->v, o->n, host, err);
        free(host);
        if (rc) goto end;
        o->t = st->adam_t;
    }
end:
    fclose(fp);
    if (rc) ckpt_state_free(st);
    return rc;
}

void ckpt_state_free(CkptState *st) {
    free(st->names);
    st->names = NULL;
    st->n_names = 0;
}

// --- the directory ---

int ckpt_exists(const char *dir) {
    char path[4096];
    kg_path_join(path, sizeof path, dir, CKPT_STATE_FILE);
    return !access(path, R_OK);
}

// Whether name is a file that a save writes (ckpt.h: a model's or a checkpoint's).
static int ckpt_file_ours(const char *name) {
    static const char *const NAMES[] = {
        "config.json",  "model.safetensors", "tokenizer.json",       CKPT_STATE_FILE,
        CKPT_ARGS_FILE, CKPT_VAL_FILE,       "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (!strcmp(name, NAMES[i])) return 1;
    return kg_ends_with(name, ".model") ||
           kg_ends_with(name, ".spiece"); // a SentencePiece tokenizer
}

int ckpt_dir_kind(const char *dir, CkptDirKind *kind, char *first, size_t cap, char *err) {
    *kind = CKPT_DIR_EMPTY;
    if (first && cap) first[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return KG_OK;
        if (errno == ENOTDIR) return kg_err(err, KG_EINVAL, "--out %s is not a directory", dir);
        return kg_err(err, KG_EIO, "opendir %s: %s", dir, strerror(errno));
    }
    char path[4096];
    int rc = KG_OK, ckpt = 0, any = 0, foreign = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        kg_path_join(path, sizeof path, dir, e->d_name);
        if (kg_is_dir(path)) {
            rc = kg_err(err, KG_EINVAL,
                        "--out %s holds a directory (%s): not a checkpoint; choose another --out",
                        dir, e->d_name);
            break;
        }
        ckpt |= !strcmp(e->d_name, CKPT_STATE_FILE);
        int ours = ckpt_file_ours(e->d_name);
        if (first && cap && (!any || (!ours && !foreign))) // the first file in the way, if any
            snprintf(first, cap, "%s", e->d_name);
        foreign |= !ours;
        any = 1;
    }
    closedir(d);
    if (!rc && any) *kind = ckpt ? CKPT_DIR_CKPT : foreign ? CKPT_DIR_OTHER : CKPT_DIR_MODEL;
    return rc;
}

// Makes the renames inside dir's parent durable.
static void sync_parent(const char *dir) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(parent, sizeof parent, ".");
    int fd = open(parent, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

// fsyncs every file in dir, so a checkpoint survives a power cut as well as a kill.
static void sync_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        kg_path_join(path, sizeof path, dir, e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    closedir(d);
}

int ckpt_probe(const char *dir, char *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    if (mkdir(tmp, 0755))
        return kg_err(err, KG_EIO, "cannot write checkpoints to %s: mkdir %s: %s", dir, tmp,
                      strerror(errno));
    rmdir(tmp);
    return KG_OK;
}

// "DIR is in use by WHO pid N", from the holder's DIR.lock (it may not have written it yet).
static int lock_busy(const char *dir, const char *path, int fd, char *err) {
    char line[128] = "";
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    line[n > 0 ? n : 0] = '\0';
    long pid = 0;
    char who[64] = "";
    if (sscanf(line, "%ld %63[^\n]", &pid, who) == 2 && pid > 0)
        return kg_err(err, KG_EBUSY,
                      "%s is in use by %s pid %ld (it holds %s); wait for it to end or choose "
                      "another --out",
                      dir, who, pid, path);
    return kg_err(err, KG_EBUSY, "%s is in use by another process (it holds %s)", dir, path);
}

int ckpt_lock(const char *dir, const char *who, int *fd, char *err) {
    char path[4096];
    *fd = -1;
    if ((size_t)snprintf(path, sizeof path, "%s.lock", dir) >= sizeof path)
        return kg_err(err, KG_EINVAL, "%s: path too long", dir);
    // a holder removes DIR.lock as it ends (ckpt_unlock): a lock taken on the file it removed
    // is no lock, so check that the locked file is still DIR.lock, and else take the new one
    for (int tries = 0; tries < 100; tries++) {
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (f < 0)
            return kg_err(err, KG_EIO, "cannot write checkpoints to %s: open %s: %s", dir, path,
                          strerror(errno));
        if (flock(f, LOCK_EX | LOCK_NB)) {
            int rc = errno == EWOULDBLOCK
                         ? lock_busy(dir, path, f, err)
                         : kg_err(err, KG_EIO, "flock %s: %s", path, strerror(errno));
            close(f);
            return rc;
        }
        struct stat held, named;
        if (!fstat(f, &held) && !stat(path, &named) && held.st_dev == named.st_dev &&
            held.st_ino == named.st_ino) {
            char line[128];
            int n = snprintf(line, sizeof line, "%ld %.64s\n", (long)getpid(), who);
            if (ftruncate(f, 0) || pwrite(f, line, (size_t)n, 0) != n) {
                int rc = kg_err(err, KG_EIO, "write %s: %s", path, strerror(errno));
                close(f);
                return rc;
            }
            *fd = f;
            return KG_OK;
        }
        close(f);
    }
    return kg_err(err, KG_EBUSY, "%s is in use: its lock %s keeps changing", dir, path);
}

void ckpt_unlock(const char *dir, int fd) {
    if (fd < 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.lock", dir);
    unlink(path); // still held: whoever opened it meanwhile finds it gone and retries
    close(fd);
}

int ckpt_recover(const char *dir, char *err) {
    char tmp[4096], old[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(old, sizeof old, "%s.old", dir);
    int rc = KG_OK;
    if (kg_is_dir(tmp)) rc = ckpt_remove_dir(tmp, err);
    if (rc) return rc;
    if (kg_is_dir(old)) {
        if (kg_is_dir(dir)) return ckpt_remove_dir(old, err); // the swap finished
        if (rename(old, dir)) return kg_err(err, KG_EIO, "rename %s: %s", old, strerror(errno));
        sync_parent(dir);
    }
    return KG_OK;
}

int ckpt_save(const char *dir, const Gpt2 *m, KgDtype dtype, const char *tok_file,
              const CkptState *st, const AdamW *o, char *err) {
    return ckpt_save_files(dir, m, dtype, tok_file, st, o, NULL, 0, err);
}

// Writes text into path (a new file). KG_EIO.
static int write_text(const char *path, const char *text, char *err) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, fp) != n;
    bad |= fclose(fp) != 0;
    return bad ? kg_err(err, KG_EIO, "write %s: %s", path, strerror(errno)) : KG_OK;
}

int ckpt_save_files(const char *dir, const Gpt2 *m, KgDtype dtype, const char *tok_file,
                    const CkptState *st, const AdamW *o, const CkptFile *files, size_t n,
                    char *err) {
    char tmp[4096], old[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(old, sizeof old, "%s.old", dir);
    int rc = ckpt_recover(dir, err);
    if (rc) return rc;
    if (mkdir(tmp, 0755)) return kg_err(err, KG_EIO, "mkdir %s: %s", tmp, strerror(errno));
    if ((rc = gpt2_save(m, tmp, dtype, err))) goto fail;
    if (tok_file) {
        const char *base = strrchr(tok_file, '/');
        kg_path_join(path, sizeof path, tmp, base ? base + 1 : tok_file);
        if ((rc = kg_copy_file(tok_file, path, err))) goto fail;
    }
    if (st) {
        kg_path_join(path, sizeof path, tmp, CKPT_STATE_FILE);
        if ((rc = state_write(path, st, o, err))) goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        kg_path_join(path, sizeof path, tmp, files[i].name);
        if ((rc = write_text(path, files[i].text, err))) goto fail;
    }
    sync_files(tmp);
    sync_parent(tmp);
    if (kg_is_dir(dir) && rename(dir, old)) {
        rc = kg_err(err, KG_EIO, "rename %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (rename(tmp, dir)) {
        rc = kg_err(err, KG_EIO, "rename %s: %s", tmp, strerror(errno));
        rename(old, dir);
        goto fail;
    }
    sync_parent(dir);
    return kg_is_dir(old) ? ckpt_remove_dir(old, err) : KG_OK;
fail:
    ckpt_remove_dir(tmp, NULL);
    return rc;
}

// --- a run's files beside the checkpoint ---

int ckpt_sibling(char *path, size_t cap, const char *dir, const char *suffix) {
    if ((size_t)snprintf(path, cap, "%s%s", dir, suffix) >= cap) {
        if (cap) path[0] = '\0';
        return -1;
    }
    return 0;
}

// dir's parent directory (cap bytes) and the offset of its last component in dir.
static size_t split_dir(const char *dir, char *parent, size_t cap) {
    const char *slash = strrchr(dir, '/');
    if (!slash) {
        snprintf(parent, cap, ".");
        return 0;
    }
    snprintf(parent, cap, "%.*s", slash == dir ? 1 : (int)(slash - dir), dir);
    return (size_t)(slash + 1 - dir);
}

// S when name is BASE.step-S (digits only; with tmp, BASE.step-S.tmp), else -1.
static long long step_of(const char *name, const char *base, int tmp) {
    size_t b = strlen(base), k = strlen(CKPT_STEP_SUFFIX);
    if (strncmp(name, base, b) || strncmp(name + b, CKPT_STEP_SUFFIX, k)) return -1;
    const char *p = name + b + k;
    char *end;
    if (*p < '0' || *p > '9') return -1;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || strcmp(end, tmp ? ".tmp" : "")) return -1;
    return v;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The steps S of dir's DIR.step-S siblings, ascending (*steps malloc'd, may be NULL when
// *n is 0); leftover DIR.step-S.tmp (a kill while keeping one) are removed.
static int list_steps(const char *dir, uint64_t **steps, size_t *n, char *err) {
    char parent[4096], path[4096];
    const char *base = dir + split_dir(dir, parent, sizeof parent);
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(parent);
    if (!d) return kg_err(err, KG_EIO, "opendir %s: %s", parent, strerror(errno));
    size_t cap = 0;
    int rc = KG_OK;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (step_of(e->d_name, base, 1) >= 0) {
            kg_path_join(path, sizeof path, parent, e->d_name);
            ckpt_remove_dir(path, NULL);
        }
        long long s = step_of(e->d_name, base, 0);
        if (s < 0) continue;
        if (KG_GROW(*steps, &cap, *n + 1, NULL)) {
            rc = kg_err(err, KG_ENOMEM, "%s: out of memory", parent);
            break;
        }
        (*steps)[(*n)++] = (uint64_t)s;
    }
    closedir(d);
    if (!rc && *n) qsort(*steps, *n, sizeof **steps, cmp_u64);
    return rc;
}

// DIR.step-S (cap bytes).
static void step_dir(char *path, size_t cap, const char *dir, uint64_t step) {
    snprintf(path, cap, "%s%s%llu", dir, CKPT_STEP_SUFFIX, (unsigned long long)step);
}

// Hard-links (else copies) every file of dir into the new directory to.
static int link_files(const char *dir, const char *to, char *err) {
    if (mkdir(to, 0755)) return kg_err(err, KG_EIO, "mkdir %s: %s", to, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return kg_err(err, KG_EIO, "opendir %s: %s", dir, strerror(errno));
    char src[4096], dst[4096];
    int rc = KG_OK;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        kg_path_join(src, sizeof src, dir, e->d_name);
        kg_path_join(dst, sizeof dst, to, e->d_name);
        if (link(src, dst)) rc = kg_copy_file(src, dst, err);
    }
    closedir(d);
    return rc;
}

int ckpt_keep_prev(const char *dir, unsigned keep, char *err) {
    char path[4096], tmp[4096 + 8];
    int rc = KG_OK;
    if (keep > 1 && ckpt_exists(dir)) {
        CkptState st;
        if ((rc = ckpt_state_read(dir, &st, NULL, err))) return rc;
        ckpt_state_free(&st);
        step_dir(path, sizeof path, dir, st.step);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        ckpt_remove_dir(tmp, NULL);
        rc = link_files(dir, tmp, err);
        if (!rc) rc = ckpt_remove_dir(path, err); // a resumed run saving a step again
        if (!rc && rename(tmp, path))
            rc = kg_err(err, KG_EIO, "rename %s: %s", tmp, strerror(errno));
        if (rc) {
            ckpt_remove_dir(tmp, NULL);
            return rc;
        }
        sync_parent(path);
    }
    uint64_t *steps;
    size_t n;
    if ((rc = list_steps(dir, &steps, &n, err))) return rc;
    size_t want = keep > 1 ? keep - 1 : 0;
    for (size_t i = 0; i + want < n && !rc; i++) { // the oldest first
        step_dir(path, sizeof path, dir, steps[i]);
        rc = ckpt_remove_dir(path, err);
    }
    free(steps);
    return rc;
}

int ckpt_run_files(const char *dir, char *first, size_t cap) {
    static const char *const suffixes[] = {CKPT_BEST_SUFFIX, CKPT_LOG_SUFFIX};
    char path[4096];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (!ckpt_sibling(path, sizeof path, dir, suffixes[i]) && !access(path, F_OK)) {
            if (first && cap) snprintf(first, cap, "%s", path);
            return 1;
        }
    uint64_t *steps;
    size_t n;
    if (list_steps(dir, &steps, &n, NULL) || !n) return 0;
    if (first && cap) step_dir(first, cap, dir, steps[0]);
    free(steps);
    return 1;
}

int ckpt_remove_run_files(const char *dir, char *err) {
    char path[4096];
    if (ckpt_sibling(path, sizeof path, dir, CKPT_LOG_SUFFIX))
        return kg_err(err, KG_EINVAL, "%s: path too long", dir);
    if (unlink(path) && errno != ENOENT)
        return kg_err(err, KG_EIO, "unlink %s: %s", path, strerror(errno));
    ckpt_sibling(path, sizeof path, dir, CKPT_BEST_SUFFIX);
    int rc = ckpt_recover(path, err); // its .tmp / .old, should a save have been cut short
    if (!rc) rc = ckpt_remove_dir(path, err);
    return rc ? rc : ckpt_keep_prev(dir, 0, err);
}
