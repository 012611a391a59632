#include "kg.h"

#include <stdarg.h>
#include <stdio.h>

int kg_err(char *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, KG_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *kg_strerror(int code) {
    switch (code) {
    case KG_OK:
        return "ok";
    case KG_EINVAL:
        return "invalid";
    case KG_EIO:
        return "io";
    case KG_ENOMEM:
        return "out_of_memory";
    case KG_EFORMAT:
        return "format";
    case KG_ERANGE:
        return "out_of_range";
    case KG_EUNSUP:
        return "unsupported";
    case KG_EBUSY:
        return "busy";
    case KG_ECANCEL:
        return "cancelled";
    default:
        return "internal";
    }
}
