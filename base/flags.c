// flags.c — a program's flags and KOGPT2_* variables from its table of rows (flags.h).
#include "base/flags.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/kg.h"

#define FLAG_SHOWN   41 // bytes of a bad value quoted in a message, NUL included
#define HELP_COL     26 // where --help's sentences start
#define HELP_WIDTH   80 // and where they wrap
#define FLAG_NAMELEN 64 // "--" + a long name, or a variable's name

// A value for a message: at most 40 bytes, anything unprintable as '?'.
static const char *flag_shown(char out[FLAG_SHOWN], const char *s) {
    return kg_show(out, FLAG_SHOWN, s, strnlen(s, FLAG_SHOWN));
}

// Stores v into an integer field of size bytes (1, 2, 4 or 8; signed or unsigned alike:
// the row's range keeps v representable in the field).
static void flag_put_int(void *p, size_t size, long long v) {
    if (size == 1) {
        uint8_t x = (uint8_t)v;
        memcpy(p, &x, 1);
    } else if (size == 2) {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
    } else if (size == 4) {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
    } else {
        uint64_t x = (uint64_t)v;
        memcpy(p, &x, 8);
    }
}

int kg_flag_int(const char *from, const char *s, long long min, long long max, long long *out,
                char *err) {
    char *end, shown[FLAG_SHOWN];
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end != s && !*end && !errno && v >= min && v <= max) {
        *out = v;
        return KG_OK;
    }
    if (max == LLONG_MAX)
        return kg_err(err, KG_EINVAL, "%s must be an integer >= %lld, got '%s'", from, min,
                      flag_shown(shown, s));
    return kg_err(err, KG_EINVAL, "%s must be an integer in %lld..%lld, got '%s'", from, min, max,
                  flag_shown(shown, s));
}

// A NUM row's range as words: "0..100", "(0, 1]", ">= 1", "> 0".
static const char *flag_num_range(char *out, size_t cap, double lo, double hi, int open_low) {
    if (isinf(hi))
        snprintf(out, cap, "%s %g", open_low ? ">" : ">=", lo);
    else if (open_low)
        snprintf(out, cap, "(%g, %g]", lo, hi);
    else
        snprintf(out, cap, "%g..%g", lo, hi);
    return out;
}

// kg_flag_num with the low end excluded when open_low.
static int flag_num(const char *from, const char *s, double lo, double hi, int open_low,
                    double *out, char *err) {
    char *end, shown[FLAG_SHOWN], range[96];
    double v = strtod(s, &end);
    if (end != s && !*end && isfinite(v) && v <= hi && (open_low ? v > lo : v >= lo)) {
        *out = v;
        return KG_OK;
    }
    const char *words = flag_num_range(range, sizeof range, lo, hi, open_low);
    return kg_err(err, KG_EINVAL, "%s must be a number %s%s, got '%s'", from,
                  words[0] == '>' ? "" : "in ", words, flag_shown(shown, s));
}

int kg_flag_num(const char *from, const char *s, double min, double max, double *out, char *err) {
    return flag_num(from, s, min, max, 0, out, err);
}

// A CHOICE row's value: KG_OK with *out, or KG_EINVAL listing the choices.
static int flag_choice(const KgFlag *f, const char *s, const char *from, int *out, char *err) {
    for (const KgFlagChoice *c = f->choices; c->name; c++)
        if (!strcmp(s, c->name)) {
            *out = c->value;
            return KG_OK;
        }
    char names[256] = "", shown[FLAG_SHOWN];
    size_t len = 0;
    for (const KgFlagChoice *c = f->choices; c->name && len < sizeof names; c++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", c->name);
    return kg_err(err, KG_EINVAL, "%s must be one of %s, got '%s'", from, names,
                  flag_shown(shown, s));
}

// A LIST row's next value; the first of a parse (*fresh) replaces what the list held.
static int flag_append(const KgFlag *f, char *args, const char *s, const char *from, int *fresh,
                       char *err) {
    size_t *n = (size_t *)(args + f->count_offset);
    if (*fresh) *n = 0;
    *fresh = 0;
    if (*n >= (size_t)f->max) return kg_err(err, KG_EINVAL, "%s: at most %lld", from, f->max);
    ((const char **)(args + f->offset))[(*n)++] = s;
    return KG_OK;
}

// Parses s (a value of row f; NULL only for an OPTIONAL_VALUE FUNC) into its field of args.
// *fresh: a LIST row's first value in this parse. KG_OK or an error naming from.
static int flag_store(const KgFlag *f, char *args, const char *s, const char *from, int *fresh,
                      char *err) {
    void *field = args + f->offset;
    if ((f->opts & KG_FLAG_NOT_EMPTY) && s && !*s)
        return kg_err(err, KG_EINVAL, "%s must not be empty", from);
    long long v;
    double x;
    int c = 0;
    struct stat st;
    switch (f->kind) {
    case KG_FLAG_SWITCH:
        flag_put_int(field, f->size, 1);
        return KG_OK;
    case KG_FLAG_INT:
        if (kg_flag_int(from, s, f->min, f->max, &v, err)) return KG_EINVAL;
        flag_put_int(field, f->size, v);
        return KG_OK;
    case KG_FLAG_NUM:
        if (flag_num(from, s, f->lo, f->hi, f->opts & KG_FLAG_OPEN_LOW, &x, err)) return KG_EINVAL;
        if (f->size == sizeof(float))
            *(float *)field = (float)x;
        else
            *(double *)field = x;
        return KG_OK;
    case KG_FLAG_PATH:
        if (stat(s, &st)) return kg_err(err, KG_EINVAL, "%s: %s: %s", from, s, strerror(errno));
        *(const char **)field = s;
        return KG_OK;
    case KG_FLAG_STR:
        *(const char **)field = s;
        return KG_OK;
    case KG_FLAG_CHOICE:
        if (flag_choice(f, s, from, &c, err)) return KG_EINVAL;
        flag_put_int(field, f->size, c);
        return KG_OK;
    case KG_FLAG_LIST:
        return flag_append(f, args, s, from, fresh, err);
    case KG_FLAG_FUNC:
        return f->set(field, s, from, err);
    default:
        return kg_err(err, KG_EINTERNAL, "%s takes no value", from);
    }
}

int kg_flags_defaults(const KgFlagTable *t, void *args, char *err) {
    char why[KG_ERRLEN], from[FLAG_NAMELEN];
    for (size_t i = 0; i < t->n_flags; i++) {
        const KgFlag *f = &t->flags[i];
        int fresh = 1;
        if (!f->def) continue;
        snprintf(from, sizeof from, "--%s", f->name);
        if (flag_store(f, args, f->def, from, &fresh, why))
            return kg_err(err, KG_EINTERNAL, "%s: the default: %s", t->program, why);
    }
    return KG_OK;
}

// --- the command line ---

// getopt_long's tables for t: a long option per row (val 256 + row), the short letters.
static int flag_getopt_tables(const KgFlagTable *t, struct option *opts, char *shorts, char *err) {
    if (t->n_flags > KG_FLAGS_MAX)
        return kg_err(err, KG_EINTERNAL, "%s: more than %d flags", t->program, KG_FLAGS_MAX);
    size_t k = 0;
    shorts[k++] = ':'; // a missing value is ':', told apart from an unknown option
    for (size_t i = 0; i < t->n_flags; i++) {
        const KgFlag *f = &t->flags[i];
        int has = f->kind == KG_FLAG_SWITCH || f->kind == KG_FLAG_HELP || f->kind == KG_FLAG_VERSION
                      ? no_argument
                  : f->opts & KG_FLAG_OPTIONAL_VALUE ? optional_argument
                                                     : required_argument;
        opts[i] = (struct option){f->name, has, NULL, 256 + (int)i};
        if (!f->short_name) continue;
        shorts[k++] = f->short_name;
        if (has != no_argument) shorts[k++] = ':';
        if (has == optional_argument) shorts[k++] = ':';
    }
    opts[t->n_flags] = (struct option){NULL, 0, NULL, 0};
    shorts[k] = '\0';
    return KG_OK;
}

// The row getopt_long's answer c stands for, or -1.
static int flag_row_of(const KgFlagTable *t, int c) {
    if (c >= 256 && c < 256 + (int)t->n_flags) return c - 256;
    for (size_t i = 0; c > 0 && c < 256 && i < t->n_flags; i++)
        if (t->flags[i].short_name == c) return (int)i;
    return -1;
}

// What getopt_long (opterr 0, shorts starting with ':') just refused: c is '?' (an unknown
// option, or a value given to a switch) or ':' (a missing value).
static int flag_getopt_error(int c, char **argv, char *err) {
    // optind is past the refused word, except inside a group of short options (-xz)
    if (optind < 1) return kg_err(err, KG_EINVAL, "unknown option");
    const char *word = argv[optind - 1];
    int name_len = (int)strcspn(word, "="), is_long = !strncmp(word, "--", 2);
    char shown[FLAG_SHOWN];
    if (c == ':' && !is_long) return kg_err(err, KG_EINVAL, "-%c needs a value", optopt);
    if (c == ':') return kg_err(err, KG_EINVAL, "%.*s needs a value", name_len, word);
    if (is_long && optopt && word[name_len] == '=') // --json=1: a flag that takes no value
        return kg_err(err, KG_EINVAL, "%.*s takes no value", name_len, word);
    if (is_long || !optopt || optopt >= 128)
        return kg_err(err, KG_EINVAL, "unknown option '%s'", flag_shown(shown, word));
    return kg_err(err, KG_EINVAL, "unknown option '-%c'", optopt);
}

// One flag met on the command line: its row and value.
typedef struct {
    int row;
    char *value;
} FlagGiven;

// The flags of argv, in order, appended to given (FlagGiven each: one word may hold several,
// -IJU). KG_OK, KG_FLAGS_HELP/VERSION, KG_ENOMEM, or an error for a word getopt refused.
static int flag_scan(const KgFlagTable *t, int argc, char **argv, KgBuf *given, char *err) {
    struct option opts[KG_FLAGS_MAX + 1];
    char shorts[3 * KG_FLAGS_MAX + 2];
    int rc = flag_getopt_tables(t, opts, shorts, err);
    if (rc) return rc;
    optind = 0; // GNU: start over (a program may parse twice: a resumed run)
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, shorts, opts, NULL)) != -1;) {
        int row = flag_row_of(t, c);
        if (row < 0) return flag_getopt_error(c, argv, err);
        if (t->flags[row].kind == KG_FLAG_HELP) return KG_FLAGS_HELP;
        if (t->flags[row].kind == KG_FLAG_VERSION) return KG_FLAGS_VERSION;
        FlagGiven g = {row, optarg};
        if (buf_append(given, &g, sizeof g))
            return kg_err(err, KG_ENOMEM, "%s: out of memory", t->program);
    }
    return KG_OK;
}

// A row's variable, when it is set and no flag gave the row: KG_OK with *value (NULL: not
// used), or KG_EINVAL for an empty value of a NOT_EMPTY row or a switch's bad word.
static int flag_env(const KgFlag *f, const char **value, char *err) {
    *value = NULL;
    const char *v = f->env ? getenv(f->env) : NULL;
    if (!v) return KG_OK;
    if (!*v && (f->opts & KG_FLAG_NOT_EMPTY))
        return kg_err(err, KG_EINVAL, "%s is set but empty (unset it, or give a value)", f->env);
    if (!*v) return KG_OK; // an empty variable counts as unset
    if (f->kind != KG_FLAG_SWITCH) {
        *value = v;
        return KG_OK;
    }
    static const char *const ON[] = {"1", "true", "yes", "on"}, *const OFF[] = {"0", "false", "no",
                                                                                "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, ON[i])) *value = v;
        if (!strcasecmp(v, ON[i]) || !strcasecmp(v, OFF[i])) return KG_OK;
    }
    char shown[FLAG_SHOWN];
    return kg_err(err, KG_EINVAL, "%s must be 1, true, yes, on or 0, false, no, off, got '%s'",
                  f->env, flag_shown(shown, v));
}

int kg_flags_parse(const KgFlagTable *t, void *args, int argc, char **argv, KgFlagsSeen *seen,
                   char *err) {
    KgFlagsSeen local;
    if (!seen) seen = &local;
    memset(seen, 0, sizeof *seen);
    KgBuf buf = {0};
    int rc = flag_scan(t, argc, argv, &buf, err);
    const FlagGiven *given = (const FlagGiven *)buf.p;
    size_t n = buf.len / sizeof *given;
    seen->first_arg = optind;
    int fresh[KG_FLAGS_MAX];
    for (size_t i = 0; i < t->n_flags && i < KG_FLAGS_MAX; i++)
        fresh[i] = 1;
    for (size_t i = 0; i < n; i++)
        seen->from[given[i].row] = KG_FLAG_FROM_ARG;
    for (size_t i = 0; !rc && i < t->n_flags; i++) { // the variables of rows no flag gave
        const char *v;
        if (seen->from[i] || (rc = flag_env(&t->flags[i], &v, err)) || !v) continue;
        seen->from[i] = KG_FLAG_FROM_ENV;
        rc = flag_store(&t->flags[i], args, v, t->flags[i].env, &fresh[i], err);
    }
    char from[FLAG_NAMELEN];
    for (size_t i = 0; !rc && i < n; i++) {
        const KgFlag *f = &t->flags[given[i].row];
        snprintf(from, sizeof from, "--%s", f->name);
        rc = flag_store(f, args, given[i].value, from, &fresh[given[i].row], err);
    }
    buf_free(&buf);
    return rc;
}

int kg_flags_from(const KgFlagTable *t, const KgFlagsSeen *seen, const char *name) {
    for (size_t i = 0; i < t->n_flags && i < KG_FLAGS_MAX; i++)
        if (!strcmp(t->flags[i].name, name)) return seen->from[i];
    return -1;
}

// --- --help ---

// Writes text's words to f from column *col on, wrapping at HELP_WIDTH to HELP_COL.
static void help_words(FILE *f, const char *text, int *col) {
    while (*text) {
        size_t word = strcspn(text, " ");
        if (*col > HELP_COL && *col + 1 + (int)word > HELP_WIDTH) {
            fprintf(f, "\n%*s", HELP_COL, "");
            *col = HELP_COL;
        } else if (*col > HELP_COL) {
            fputc(' ', f);
            (*col)++;
        }
        fprintf(f, "%.*s", (int)word, text);
        *col += (int)word;
        text += word;
        text += strspn(text, " ");
    }
}

// The facts --help adds after a row's sentence: "0..65535; default 8080; env KOGPT2_PORT".
static void help_facts(const KgFlag *f, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    if (f->kind == KG_FLAG_INT && f->max == LLONG_MAX)
        len += (size_t)snprintf(out + len, cap - len, ">= %lld", f->min);
    else if (f->kind == KG_FLAG_INT)
        len += (size_t)snprintf(out + len, cap - len, "%lld..%lld", f->min, f->max);
    else if (f->kind == KG_FLAG_NUM)
        len = strlen(flag_num_range(out, cap, f->lo, f->hi, f->opts & KG_FLAG_OPEN_LOW));
    else if (f->kind == KG_FLAG_LIST)
        len += (size_t)snprintf(out + len, cap - len, "repeatable, up to %lld", f->max);
    for (const KgFlagChoice *c = f->kind == KG_FLAG_CHOICE ? f->choices : NULL; c && c->name; c++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", c == f->choices ? "" : "|", c->name);
    const char *def = f->def ? f->def : f->def_text;
    if (def && len < cap)
        len += (size_t)snprintf(out + len, cap - len, "%sdefault %s", len ? "; " : "", def);
    if (f->env && len < cap) snprintf(out + len, cap - len, "%senv %s", len ? "; " : "", f->env);
}

void kg_flags_help(const KgFlagTable *t, FILE *f) {
    fprintf(f, "usage: %s %s\n", t->program, t->usage);
    int shorts = 0;
    for (size_t i = 0; i < t->n_flags; i++)
        shorts |= t->flags[i].short_name != 0;
    for (size_t i = 0; i < t->n_flags; i++) {
        const KgFlag *r = &t->flags[i];
        char facts[512], open[4] = "";
        if (r->short_name) snprintf(open, sizeof open, "-%c,", r->short_name);
        int col = fprintf(f, "  %s%s--%s%s%s", open, shorts ? (r->short_name ? " " : "    ") : "",
                          r->name, r->metavar ? " " : "", r->metavar ? r->metavar : "");
        if (col >= HELP_COL) {
            fprintf(f, "\n%*s", HELP_COL, "");
        } else {
            fprintf(f, "%*s", HELP_COL - col, "");
        }
        col = HELP_COL;
        help_words(f, r->help, &col);
        help_facts(r, facts, sizeof facts);
        if (facts[0]) {
            char paren[sizeof facts + 2];
            snprintf(paren, sizeof paren, "(%s)", facts);
            help_words(f, paren, &col);
        }
        fputc('\n', f);
    }
    if (t->notes) fprintf(f, "%s", t->notes);
}
