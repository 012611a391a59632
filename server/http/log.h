// log.h — kogpt2d's one logger: every line the daemon writes once it has parsed its flags
// (its own lines, the request log, libmicrohttpd's messages, the backend's device line) goes
// through here, as text or as JSON lines (--log-format).
//
//   text: kogpt2d: ready: default (2 layers, ...)
//         kogpt2d: warning: /v1/chat/completions is refused: ...
//         2024-05-01T12:00:00Z 127.0.0.1 "GET /healthz" 200 15B 0.1ms id=3f2a...
//   json: {"ts":"2024-05-01T12:00:00.123Z","level":"info","msg":"ready: default (...)"}
//         a request line adds "type":"access", "method", "path", "status", "bytes", "ms",
//         "request_id", "addr" and "aborted" (its "msg" is "GET /healthz 200")
//
// Threads: log_setup() once, before other threads log; then any thread may log. Each line is
// formatted whole and written to stderr with one call, so lines never interleave.
#ifndef LOG_H
#define LOG_H

#include <stddef.h>

typedef enum { LOG_TEXT, LOG_JSON } LogFormat;
typedef enum { LOG_INFO, LOG_WARN, LOG_ERROR } LogLevel;

// One finished request, for the request log. Strings may hold any bytes (client input):
// they are escaped as written.
typedef struct {
    const char *method, *path, *addr, *request_id;
    int status;
    size_t bytes;
    double ms;
    int aborted; // the client went away or the connection was cut before the reply ended
} LogAccess;

// "text" or "json" into *out: KG_OK, or KG_EINVAL naming the choices.
int log_format_parse(const char *s, LogFormat *out, char *err);

// The program name text lines start with ("kogpt2d"; kept, not copied) and the format.
void log_setup(const char *prog, LogFormat format);

// One line: text "prog: msg" ("prog: warning: msg" for LOG_WARN); JSON {ts, level, msg}.
void log_msg(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Each non-empty line of text as one log_msg line (what a library printed into a FILE).
void log_lines(LogLevel level, const char *text);

// The request's line.
void log_access(const LogAccess *a);

#endif
