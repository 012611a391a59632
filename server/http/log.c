// log.c — the one logger (log.h): a line is formatted whole into a KgBuf, then written to
// stderr in one call.
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/kg.h"
#include "json_in.h"

static struct {
    const char *prog;
    LogFormat format;
} L = {"kogpt2d", LOG_TEXT};

static const char *const LOG_LEVELS[] = {"info", "warn", "error"};

int log_format_parse(const char *s, LogFormat *out, char *err) {
    if (!strcmp(s, "text"))
        *out = LOG_TEXT;
    else if (!strcmp(s, "json"))
        *out = LOG_JSON;
    else
        return kg_err(err, KG_EINVAL, "'%s' is not a log format (text or json)", s);
    return KG_OK;
}

void log_setup(const char *prog, LogFormat format) {
    L.prog = prog;
    L.format = format;
}

// The time now as ISO 8601 UTC: with milliseconds (JSON's "ts") or whole seconds (text).
static void log_time(char *out, size_t cap, int millis) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, millis ? ".%03ldZ" : "Z", ts.tv_nsec / 1000000);
}

// s as a JSON string: quotes, backslashes and control bytes escaped, and a byte that is not
// UTF-8 as U+FFFD (a client's path may be any bytes; the line must stay JSON).
static int log_json_str(KgBuf *b, const char *s) {
    size_t n = strlen(s), i = 0, bad;
    int rc = buf_append(b, "\"", 1);
    while (!rc && i < n) {
        size_t ok = json_utf8_valid(s + i, n - i, &bad) ? n - i : bad;
        for (size_t k = i; !rc && k < i + ok; k++) {
            unsigned char c = (unsigned char)s[k];
            if (c == '"' || c == '\\')
                rc = buf_printf(b, "\\%c", c);
            else if (c < 0x20 || c == 0x7f)
                rc = buf_printf(b, "\\u%04x", c);
            else
                rc = buf_append(b, &s[k], 1);
        }
        i += ok;
        if (!rc && i < n) {
            rc = buf_append(b, "\\ufffd", 6);
            i++;
        }
    }
    return rc ? rc : buf_append(b, "\"", 1);
}

// s for a text line: control bytes, double quotes and backslashes as \xNN, so that a decoded
// URL (%0a) cannot start a fake log line.
static int log_text_str(KgBuf *b, const char *s) {
    int rc = KG_OK;
    for (; *s && !rc; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
            rc = buf_printf(b, "\\x%02x", c);
        else
            rc = buf_append(b, s, 1);
    }
    return rc;
}

// {"ts":...,"level":...,"msg":... : the start of every JSON line (closed by the caller).
static int log_json_head(KgBuf *b, LogLevel level, const char *msg) {
    char ts[40];
    log_time(ts, sizeof ts, 1);
    int rc = buf_printf(b, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", ts, LOG_LEVELS[level]);
    return rc ? rc : log_json_str(b, msg);
}

// Writes b plus a newline to stderr in one call, and frees it.
static void log_write(KgBuf *b, int rc) {
    if (!rc) rc = buf_append(b, "\n", 1);
    if (!rc) fwrite(b->p, 1, b->len, stderr);
    buf_free(b);
}

static void log_line(LogLevel level, const char *msg) {
    KgBuf b = {0};
    int rc;
    if (L.format == LOG_JSON) {
        rc = log_json_head(&b, level, msg);
        if (!rc) rc = buf_append(&b, "}", 1);
    } else {
        rc = buf_printf(&b, "%s: %s%s", L.prog, level == LOG_WARN ? "warning: " : "", msg);
    }
    log_write(&b, rc);
}

void log_msg(LogLevel level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line(level, msg);
}

void log_lines(LogLevel level, const char *text) {
    char line[1024];
    while (text && *text) {
        size_t n = strcspn(text, "\n");
        if (n) log_line(level, kg_show(line, sizeof line, text, n));
        text += n + (text[n] == '\n');
    }
}

void log_access(const LogAccess *a) {
    KgBuf b = {0};
    int rc;
    if (L.format == LOG_JSON) {
        char msg[320];
        snprintf(msg, sizeof msg, "%.16s %.256s %d", a->method, a->path, a->status);
        rc = log_json_head(&b, LOG_INFO, msg);
        if (!rc) rc = buf_printf(&b, ",\"type\":\"access\",\"method\":");
        if (!rc) rc = log_json_str(&b, a->method);
        if (!rc) rc = buf_printf(&b, ",\"path\":");
        if (!rc) rc = log_json_str(&b, a->path);
        if (!rc)
            rc = buf_printf(&b,
                            ",\"status\":%d,\"bytes\":%zu,\"ms\":%.1f,\"request_id\":", a->status,
                            a->bytes, a->ms);
        if (!rc) rc = log_json_str(&b, a->request_id);
        if (!rc) rc = buf_printf(&b, ",\"addr\":");
        if (!rc) rc = log_json_str(&b, a->addr);
        if (!rc) rc = buf_printf(&b, ",\"aborted\":%s}", a->aborted ? "true" : "false");
    } else { // every client-controlled field escaped
        char when[32];
        log_time(when, sizeof when, 0);
        rc = buf_printf(&b, "%s %s \"", when, a->addr);
        if (!rc) rc = log_text_str(&b, a->method);
        if (!rc) rc = buf_append(&b, " ", 1);
        if (!rc) rc = log_text_str(&b, a->path);
        if (!rc) rc = buf_printf(&b, "\" %d %zuB %.1fms id=", a->status, a->bytes, a->ms);
        if (!rc) rc = log_text_str(&b, a->request_id);
        if (!rc && a->aborted) rc = buf_append(&b, " aborted", 8);
    }
    log_write(&b, rc);
}
