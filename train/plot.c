// plot.c — loss curves from a training log into a PNG (plot.h): an RGB canvas, lines, a
// 5x7 pixel font for the labels, and a PNG writer over zlib (which prepare links already).
#include "plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/buf.h"
#include "base/kg.h"
#include "trainlog.h"

typedef struct {
    double x, y;
    size_t order; // position in the log: the later of two records for one step wins
} Point;

typedef struct {
    Point *p;
    size_t n, cap;
} Series;

typedef struct {
    unsigned char *px; // (h, w, 3) RGB, row-major
    int w, h;
} Canvas;

typedef struct {
    unsigned char r, g, b;
} Rgb;

static const Rgb INK = {0, 0, 0}, GRID = {225, 225, 225}, TRAIN = {31, 119, 180},
                 VAL = {230, 110, 0}, MUTED = {90, 90, 90};

// --- the font: 5 columns x 7 rows, bit 4 the leftmost column ---

typedef struct {
    char c;
    unsigned char rows[7];
} Glyph;

static const Glyph FONT[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},
    {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}},
    {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},
    {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}},
    {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},
    {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}},
    {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}},
    {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
};

#define FONT_SCALE 2                // pixels per font pixel
#define CHAR_W     (6 * FONT_SCALE) // 5 columns and a gap
#define CHAR_H     (7 * FONT_SCALE)

static const Glyph *glyph(char c) {
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a'); // one case: labels read the same
    for (size_t i = 0; i < sizeof FONT / sizeof FONT[0]; i++)
        if (FONT[i].c == c) return &FONT[i];
    return NULL; // a space, or a character the font lacks: left blank
}

// --- drawing ---

static void dot(Canvas *cv, int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= cv->w || y >= cv->h) return;
    unsigned char *p = cv->px + ((size_t)y * (size_t)cv->w + (size_t)x) * 3;
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
}

static void rect(Canvas *cv, int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++)
            dot(cv, x, y, c);
}

// A line from (x0, y0) to (x1, y1), thick pixels wide (Bresenham).
static void line(Canvas *cv, int x0, int y0, int x1, int y1, int thick, Rgb c) {
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int e = dx + dy, lo = -(thick - 1) / 2, hi = thick / 2;
    for (;;) {
        rect(cv, x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * e;
        if (e2 >= dy) e += dy, x0 += sx;
        if (e2 <= dx) e += dx, y0 += sy;
    }
}

// text with its top-left corner at (x, y)
static void text(Canvas *cv, int x, int y, const char *s, Rgb c) {
    for (; *s; s++, x += CHAR_W) {
        const Glyph *g = glyph(*s);
        for (int r = 0; g && r < 7; r++)
            for (int k = 0; k < 5; k++)
                if (g->rows[r] & (0x10 >> k))
                    rect(cv, x + k * FONT_SCALE, y + r * FONT_SCALE, x + k * FONT_SCALE + 1,
                         y + r * FONT_SCALE + 1, c);
    }
}

static int text_w(const char *s) { return (int)strlen(s) * CHAR_W; }

// --- axes ---

// A round tick spacing (1, 2 or 5 times a power of ten) giving about n ticks over range.
static double tick_step(double range, int n) {
    double raw = range / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

// A tick label: "0.5", "3", "12000" (%g, no exponent for the counts a log holds)
static void tick_label(char *buf, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    snprintf(buf, cap, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9), v);
}

typedef struct {
    int x0, y0, x1, y1; // the plot area in pixels (y0 at the top)
    double xmin, xmax, ymin, ymax;
} Frame;

static int px_x(const Frame *f, double x) {
    return f->x0 + (int)lround((x - f->xmin) / (f->xmax - f->xmin) * (f->x1 - f->x0));
}

static int px_y(const Frame *f, double y) {
    return f->y1 - (int)lround((y - f->ymin) / (f->ymax - f->ymin) * (f->y1 - f->y0));
}

// The ticks of an axis over [lo, hi]: about n multiples of a round step, at most
// PLOT_MAX_TICKS, each computed from its index (never v += step, which stops advancing once
// the step is below v's precision: a range of 4e-15 at 9.2, or of 16 at 1e17) and each
// different from the one before. The count; *step the spacing.
#define PLOT_MAX_TICKS 32
static int axis_ticks(double lo, double hi, int n, double ticks[PLOT_MAX_TICKS], double *step) {
    *step = tick_step(hi - lo, n);
    if (!(*step > 0) || !isfinite(*step)) return 0; // a range that overflowed: no ticks
    double first = ceil(lo / *step);
    int k = 0;
    for (int i = 0; i < PLOT_MAX_TICKS && k < PLOT_MAX_TICKS; i++) {
        double v = (first + i) * *step;
        if (v > hi + *step * 1e-9) break;
        if (!k || v != ticks[k - 1]) ticks[k++] = v;
    }
    return k;
}

static void draw_axes(Canvas *cv, const Frame *f) {
    char buf[32];
    double ticks[PLOT_MAX_TICKS], step;
    int n = axis_ticks(f->xmin, f->xmax, 8, ticks, &step);
    for (int i = 0; i < n; i++) {
        int x = px_x(f, ticks[i]);
        line(cv, x, f->y0, x, f->y1, 1, GRID);
        tick_label(buf, sizeof buf, ticks[i], step);
        text(cv, x - text_w(buf) / 2, f->y1 + 6, buf, INK);
    }
    n = axis_ticks(f->ymin, f->ymax, 6, ticks, &step);
    for (int i = 0; i < n; i++) {
        int y = px_y(f, ticks[i]);
        line(cv, f->x0, y, f->x1, y, 1, GRID);
        tick_label(buf, sizeof buf, ticks[i], step);
        text(cv, f->x0 - 6 - text_w(buf), y - CHAR_H / 2, buf, INK);
    }
    line(cv, f->x0, f->y0, f->x1, f->y0, 1, INK);
    line(cv, f->x0, f->y1, f->x1, f->y1, 1, INK);
    line(cv, f->x0, f->y0, f->x0, f->y1, 1, INK);
    line(cv, f->x1, f->y0, f->x1, f->y1, 1, INK);
}

static void draw_series(Canvas *cv, const Frame *f, const Series *s, int thick, int marks, Rgb c) {
    for (size_t i = 0; i < s->n; i++) {
        int x = px_x(f, s->p[i].x), y = px_y(f, s->p[i].y);
        if (i) line(cv, px_x(f, s->p[i - 1].x), px_y(f, s->p[i - 1].y), x, y, thick, c);
        if (marks || s->n == 1) rect(cv, x - 3, y - 3, x + 3, y + 3, c);
    }
}

// --- the log ---

static int series_add(Series *s, double x, double y, size_t order) {
    if (KG_GROW(s->p, &s->cap, s->n + 1, NULL)) return KG_ENOMEM;
    s->p[s->n++] = (Point){x, y, order};
    return KG_OK;
}

static int point_cmp(const void *a, const void *b) {
    const Point *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    return p->order < q->order ? -1 : p->order > q->order;
}

// Sorts s by step and keeps the last record of each step.
static void series_settle(Series *s) {
    if (!s->n) return;
    qsort(s->p, s->n, sizeof *s->p, point_cmp);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (k && s->p[k - 1].x == s->p[i].x) k--;
        s->p[k++] = s->p[i];
    }
    s->n = k;
}

// One record line into the series it belongs to (others, torn lines and lines over
// TRAINLOG_MAX_LINE are skipped).
static int read_record(const char *line, size_t len, size_t order, Series *train, Series *val,
                       double *last_bpb) {
    cJSON *j = cJSON_ParseWithLength(line, len);
    const cJSON *j_type = cJSON_GetObjectItemCaseSensitive(j, "type");
    const cJSON *j_step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *j_loss = cJSON_GetObjectItemCaseSensitive(j, "loss");
    const cJSON *j_bpb = cJSON_GetObjectItemCaseSensitive(j, "bpb");
    int rc = KG_OK;
    if (cJSON_IsString(j_type) && cJSON_IsNumber(j_step) && cJSON_IsNumber(j_loss) &&
        isfinite(j_loss->valuedouble)) {
        int is_val = !strcmp(j_type->valuestring, "val");
        if (is_val || !strcmp(j_type->valuestring, "train"))
            rc = series_add(is_val ? val : train, j_step->valuedouble, j_loss->valuedouble, order);
        if (is_val && cJSON_IsNumber(j_bpb)) *last_bpb = j_bpb->valuedouble;
    }
    cJSON_Delete(j);
    return rc;
}

static int read_log(const char *path, Series *train, Series *val, double *last_bpb, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    KgBuf line = {0};
    int rc = KG_OK, got, too_long;
    for (size_t order = 0; !rc && (got = buf_read_line(&line, f, TRAINLOG_MAX_LINE, &too_long));
         order++) {
        if (got < 0)
            rc = got;
        else if (line.len)
            rc = read_record(line.p, line.len, order, train, val, last_bpb);
    }
    if (rc)
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
    else if (ferror(f))
        rc = kg_err(err, KG_EIO, "read %s: %s", path, strerror(errno));
    fclose(f);
    buf_free(&line);
    return rc;
}

// --- PNG ---

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

// One chunk: length, type, data, CRC-32 of type and data. 0 or -1.
static int png_chunk(FILE *f, const char *type, const unsigned char *data, size_t n) {
    unsigned char b[4];
    put_be32(b, (uint32_t)n);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (n) crc = crc32(crc, data, (uInt)n);
    int bad = fwrite(b, 1, 4, f) != 4 || fwrite(type, 1, 4, f) != 4;
    bad |= n && fwrite(data, 1, n, f) != n;
    put_be32(b, (uint32_t)crc);
    bad |= fwrite(b, 1, 4, f) != 4;
    return bad ? -1 : 0;
}

// An 8-bit RGB PNG: each row filter 0 (none), the rows deflated in one IDAT.
static int png_write(const Canvas *cv, const char *path, char *err) {
    size_t row = (size_t)cv->w * 3 + 1, raw_n = row * (size_t)cv->h;
    uLongf z_n = compressBound((uLong)raw_n);
    unsigned char *raw = malloc(raw_n), *z = malloc(z_n);
    int rc = KG_OK;
    if (!raw || !z) {
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    for (int y = 0; y < cv->h; y++) {
        raw[(size_t)y * row] = 0;
        memcpy(raw + (size_t)y * row + 1, cv->px + (size_t)y * (size_t)cv->w * 3, row - 1);
    }
    if (compress2(z, &z_n, raw, (uLong)raw_n, 9) != Z_OK) {
        rc = kg_err(err, KG_ENOMEM, "%s: deflate failed", path);
        goto end;
    }
    unsigned char ihdr[13] = {0};
    put_be32(ihdr, (uint32_t)cv->w);
    put_be32(ihdr + 4, (uint32_t)cv->h);
    ihdr[8] = 8; // bits per sample
    ihdr[9] = 2; // RGB
    FILE *f = fopen(path, "wb");
    if (!f) {
        rc = kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
        goto end;
    }
    int bad = fwrite("\x89PNG\r\n\x1a\n", 1, 8, f) != 8;
    bad |= png_chunk(f, "IHDR", ihdr, sizeof ihdr) || png_chunk(f, "IDAT", z, z_n) ||
           png_chunk(f, "IEND", NULL, 0);
    bad |= fclose(f) != 0;
    if (bad) rc = kg_err(err, KG_EIO, "write %s: %s", path, strerror(errno));
end:
    free(raw);
    free(z);
    return rc;
}

// --- the plot ---

// The data's range over both series, padded so that no curve touches the frame.
static void frame_range(Frame *f, const Series *a, const Series *b) {
    f->xmin = f->ymin = INFINITY;
    f->xmax = f->ymax = -INFINITY;
    const Series *all[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            const Point *p = &all[k]->p[i];
            f->xmin = fmin(f->xmin, p->x);
            f->xmax = fmax(f->xmax, p->x);
            f->ymin = fmin(f->ymin, p->y);
            f->ymax = fmax(f->ymax, p->y);
        }
    if (f->xmax <= f->xmin) f->xmax = f->xmin + 1;
    double pad = (f->ymax - f->ymin) * 0.05;
    if (!(pad > 0)) pad = fabs(f->ymax) * 0.05 + 0.05;
    f->ymin -= pad;
    f->ymax += pad;
}

static void draw_legend(Canvas *cv, const Frame *f, const Series *train, const Series *val,
                        double last_bpb) {
    char tl[64] = "", vl[64] = "";
    if (train->n) snprintf(tl, sizeof tl, "train loss (last %.3f)", train->p[train->n - 1].y);
    if (val->n)
        snprintf(vl, sizeof vl, "val loss (last %.3f, bpb %.3f)", val->p[val->n - 1].y, last_bpb);
    int w = text_w(tl) > text_w(vl) ? text_w(tl) : text_w(vl);
    int x = f->x1 - 12 - 32 - w, y = f->y0 + 12;
    if (train->n) {
        line(cv, x, y + CHAR_H / 2, x + 24, y + CHAR_H / 2, 2, TRAIN);
        text(cv, x + 32, y, tl, INK);
        y += CHAR_H + 8;
    }
    if (val->n) {
        line(cv, x, y + CHAR_H / 2, x + 24, y + CHAR_H / 2, 3, VAL);
        text(cv, x + 32, y, vl, INK);
    }
}

int plot_log(const char *log_path, const char *png_path, int width, int height, PlotCounts *counts,
             char *err) {
    if (width < 320 || width > 4096 || height < 320 || height > 4096)
        return kg_err(err, KG_EINVAL, "plot: the size must be 320 to 4096 pixels a side");
    Series train = {0}, val = {0};
    double last_bpb = NAN;
    Canvas cv = {.w = width, .h = height};
    int rc = read_log(log_path, &train, &val, &last_bpb, err);
    if (!rc && !train.n && !val.n)
        rc = kg_err(err, KG_EFORMAT, "%s: no loss to plot (no train or val record)", log_path);
    if (!rc && !(cv.px = malloc((size_t)width * (size_t)height * 3)))
        rc = kg_err(err, KG_ENOMEM, "plot: out of memory");
    if (!rc) {
        series_settle(&train);
        series_settle(&val);
        memset(cv.px, 255, (size_t)width * (size_t)height * 3);
        Frame f = {.x0 = 12 + 7 * CHAR_W,
                   .y0 = 16 + CHAR_H + 10,
                   .x1 = width - 24,
                   .y1 = height - 20 - 2 * CHAR_H};
        frame_range(&f, &train, &val);
        text(&cv, f.x0, 16, "loss (nats per token) by step", INK);
        draw_axes(&cv, &f);
        text(&cv, (f.x0 + f.x1 - text_w("step")) / 2, height - 8 - CHAR_H, "step", MUTED);
        draw_series(&cv, &f, &val, 3, 1, VAL);
        draw_series(&cv, &f, &train, 1, 0, TRAIN); // thin, over the thick one: both show
        draw_legend(&cv, &f, &train, &val, last_bpb);
        rc = png_write(&cv, png_path, err);
    }
    if (!rc && counts) *counts = (PlotCounts){train.n, val.n};
    free(cv.px);
    free(train.p);
    free(val.p);
    return rc;
}
