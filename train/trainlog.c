// trainlog.c — the JSONL training log (trainlog.h).
#include "trainlog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/kg.h"

// The "step" of a record line, or -1 when the line is no whole record of ours.
static long long line_step(const char *line, size_t len) {
    if (len < 2 || line[0] != '{' || line[len - 1] != '}') return -1; // torn by a kill
    const char *p = strstr(line, "\"step\":");
    if (!p || (size_t)(p - line) >= len) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(p + 7, &end, 10);
    return errno || end == p + 7 || v < 0 ? -1 : v;
}

// Rewrites path without the records past step (and torn lines). *val_logged as trainlog_open.
static int trim(const char *path, uint64_t step, int *val_logged, char *err) {
    FILE *in = fopen(path, "rb");
    if (!in)
        return errno == ENOENT ? KG_OK : kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return kg_err(err, KG_EIO, "open %s: %s", tmp, strerror(errno));
    }
    KgBuf line = {0};
    int bad = 0, got, too_long;
    while (!bad && (got = buf_read_line(&line, in, TRAINLOG_MAX_LINE, &too_long))) {
        if (got < 0) bad = 1;
        if (bad || !line.len) continue;            // (an over-long line is no record: dropped)
        long long s = line_step(line.p, line.len); // line.p is NUL-terminated (buf.h)
        if (s < 0 || (uint64_t)s > step) continue;
        if ((uint64_t)s == step && strstr(line.p, "\"type\":\"val\"")) *val_logged = 1;
        bad |= fwrite(line.p, 1, line.len, out) != line.len || fputc('\n', out) == EOF;
    }
    bad |= ferror(in);
    fclose(in);
    buf_free(&line);
    bad |= fclose(out) != 0;
    if (!bad && !rename(tmp, path)) return KG_OK;
    int rc = kg_err(err, KG_EIO, "rewrite %s: %s", path, strerror(errno));
    remove(tmp);
    return rc;
}

int trainlog_open(TrainLog *l, const char *path, int resuming, uint64_t resume_step,
                  int *val_logged, char *err) {
    memset(l, 0, sizeof *l);
    int logged = 0;
    if ((size_t)snprintf(l->path, sizeof l->path, "%s", path) >= sizeof l->path)
        return kg_err(err, KG_EINVAL, "%s: path too long", path);
    int rc = resuming ? trim(path, resume_step, &logged, err) : KG_OK;
    if (rc) return rc;
    if (val_logged) *val_logged = logged;
    if (!(l->f = fopen(path, resuming ? "ab" : "wb")))
        return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    return KG_OK;
}

void trainlog_close(TrainLog *l) {
    if (l->f) fclose(l->f);
    l->f = NULL;
}

// A number, or null for one JSON cannot hold (NaN, infinity).
static void put_num(FILE *f, const char *key, double x) {
    if (isfinite(x))
        fprintf(f, ",\"%s\":%.7g", key, x);
    else
        fprintf(f, ",\"%s\":null", key);
}

// Ends the record begun by the caller's fprintf: the line, a flush, the error if any.
static int end_record(TrainLog *l, char *err) {
    if (fputs("}\n", l->f) == EOF || fflush(l->f)) {
        int rc = kg_err(err, KG_EIO, "write %s: %s", l->path, strerror(errno));
        fclose(l->f);
        l->f = NULL;
        return rc;
    }
    return KG_OK;
}

int trainlog_run(TrainLog *l, uint64_t step, uint64_t steps, double tokens_per_step, int resumed,
                 char *err) {
    if (!l->f) return KG_OK;
    fprintf(l->f, "{\"type\":\"run\",\"step\":%llu,\"steps\":%llu", (unsigned long long)step,
            (unsigned long long)steps);
    put_num(l->f, "tokens_per_step", tokens_per_step);
    fprintf(l->f, ",\"resumed\":%s,\"time\":%lld", resumed ? "true" : "false",
            (long long)time(NULL));
    return end_record(l, err);
}

int trainlog_train(TrainLog *l, uint64_t step, double loss, double lr, double norm, uint64_t tokens,
                   double tok_per_s, double ms, double elapsed_s, char *err) {
    if (!l->f) return KG_OK;
    fprintf(l->f, "{\"type\":\"train\",\"step\":%llu", (unsigned long long)step);
    put_num(l->f, "loss", loss);
    put_num(l->f, "lr", lr);
    put_num(l->f, "norm", norm);
    fprintf(l->f, ",\"tokens\":%llu", (unsigned long long)tokens);
    put_num(l->f, "tok_per_s", tok_per_s);
    put_num(l->f, "ms", ms);
    put_num(l->f, "elapsed_s", elapsed_s);
    return end_record(l, err);
}

int trainlog_val(TrainLog *l, uint64_t step, double loss, double bpb, uint64_t tokens,
                 uint64_t bytes, int best, char *err) {
    if (!l->f) return KG_OK;
    fprintf(l->f, "{\"type\":\"val\",\"step\":%llu", (unsigned long long)step);
    put_num(l->f, "loss", loss);
    put_num(l->f, "bpb", bpb);
    fprintf(l->f, ",\"tokens\":%llu,\"bytes\":%llu,\"best\":%s", (unsigned long long)tokens,
            (unsigned long long)bytes, best ? "true" : "false");
    return end_record(l, err);
}

int trainlog_end(TrainLog *l, uint64_t step, uint64_t tokens, double elapsed_s, double val_loss,
                 double val_bpb, uint64_t best_step, double best_val_loss, char *err) {
    if (!l->f) return KG_OK;
    fprintf(l->f, "{\"type\":\"end\",\"step\":%llu,\"tokens\":%llu", (unsigned long long)step,
            (unsigned long long)tokens);
    put_num(l->f, "elapsed_s", elapsed_s);
    put_num(l->f, "val_loss", val_loss);
    put_num(l->f, "val_bpb", val_bpb);
    fprintf(l->f, ",\"best_step\":%llu", (unsigned long long)best_step);
    put_num(l->f, "best_val_loss", best_val_loss);
    return end_record(l, err);
}
