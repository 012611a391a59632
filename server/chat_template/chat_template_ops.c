// chat_template_ops.c — the operations on a render's values (chat_template_ops.h): equality,
// containment and ordering as Python has them; arithmetic on 64-bit integers, strs and lists;
// attributes, items and slices; the string methods, filters and tests the subset has. What
// they build comes from a per-render arena, and each charges the render's work budget, so
// that a template from an untrusted model directory stops within ~0.1 s (below).
#define _GNU_SOURCE // memmem

#include "chat_template_ops.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "chat_template_ast.h"

// --- the arena and the work budget ---

struct CtChunk { // one block of the arena; the newest first
    struct CtChunk *next;
    size_t used, cap;
    max_align_t data[];
};

// n bytes from the render's arena, aligned for CtVal.
static int ct_alloc(CtRender *r, size_t n, int line, void **out) {
    *out = NULL;
    if (n <= CT_MAX_MEMORY) n = (n + 15) & ~(size_t)15;
    if (!r->mem || r->mem->cap - r->mem->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        if (n > CT_MAX_MEMORY || cap > CT_MAX_MEMORY - r->mem_used)
            return ct_fail(r->err, KG_ERANGE, line, "rendering needs more than %d MiB",
                           CT_MAX_MEMORY >> 20);
        CtChunk *c = malloc(sizeof *c + cap);
        if (!c) return ct_fail(r->err, KG_ENOMEM, line, "out of memory");
        c->next = r->mem, c->used = 0, c->cap = cap;
        r->mem = c, r->mem_used += cap;
    }
    *out = (char *)r->mem->data + r->mem->used;
    r->mem->used += n;
    return KG_OK;
}

void ct_arena_free(CtRender *r) {
    while (r->mem) {
        CtChunk *next = r->mem->next;
        free(r->mem);
        r->mem = next;
    }
}

// --- operations ---

int ct_undef_error(CtRender *r, const CtVal *v, int line) {
    if (v->plain) return ct_fail(r->err, KG_EINVAL, line, "%.*s", (int)v->n, v->s);
    return ct_fail(r->err, KG_EINVAL, line, "'%.*s' is undefined", (int)(v->n > 60 ? 60 : v->n),
                   v->s);
}

// a + b (strings) in the arena.
static int ct_join2(CtRender *r, const char *a, size_t na, const char *b, size_t nb, int line,
                    CtVal *out) {
    char *s;
    int rc = ct_alloc(r, na + nb, line, (void **)&s);
    if (rc || (rc = ct_work(r, na + nb, line))) return rc;
    if (na) memcpy(s, a, na);
    if (nb) memcpy(s + na, b, nb);
    *out = ct_str(s, na + nb);
    return KG_OK;
}

// v as Jinja turns it into text ({{ v }}, ~, the string filters): str(v); '' when undefined.
int ct_text(CtRender *r, const CtVal *v, int line, const char **s, size_t *n) {
    switch (v->kind) {
    case CT_VAL_STR:
        return *s = v->s, *n = v->n, KG_OK;
    case CT_VAL_UNDEF:
        return *s = "", *n = 0, KG_OK;
    case CT_VAL_NONE:
        return *s = "None", *n = 4, KG_OK;
    case CT_VAL_BOOL:
        return *s = v->i ? "True" : "False", *n = v->i ? 4 : 5, KG_OK;
    case CT_VAL_INT: {
        char buf[24];
        CtVal str;
        int k = snprintf(buf, sizeof buf, "%lld", v->i);
        int rc = ct_join2(r, buf, (size_t)k, NULL, 0, line, &str);
        return rc ? rc : (*s = str.s, *n = str.n, KG_OK);
    }
    default:
        return ct_fail(r->err, KG_EUNSUP, line, "turning a %s into text is not supported",
                       ct_type(v));
    }
}

static int ct_msg_eq(const ChatMessage *a, const ChatMessage *b) {
    if (a == b) return 1;
    if (strcmp(a->role, b->role)) return 0;
    if (!a->content || !b->content) return a->content == b->content;
    return !strcmp(a->content, b->content);
}

// a == b as Python has it (1 == true; lists item by item; an undefined equals an undefined).
static int ct_eq(CtRender *r, const CtVal *a, const CtVal *b, int line, int *eq) {
    *eq = 0;
    if (ct_num(a) && ct_num(b)) return *eq = a->i == b->i, KG_OK;
    if (a->kind != b->kind) return KG_OK;
    switch (a->kind) {
    case CT_VAL_UNDEF:
    case CT_VAL_NONE:
        return *eq = 1, KG_OK;
    case CT_VAL_STR:
        *eq = a->n == b->n && !memcmp(a->s, b->s, a->n);
        return ct_work(r, a->n, line);
    case CT_VAL_MSG:
        *eq = ct_msg_eq(a->msg, b->msg);
        return ct_work(r, 0, line);
    case CT_VAL_LOOP:
        return *eq = a->loop == b->loop, KG_OK;
    case CT_VAL_LIST:
        if (a->n != b->n) return KG_OK;
        *eq = 1;
        for (size_t i = 0; i < a->n && *eq; i++) { // depth <= CHAT_TEMPLATE_MAX_DEPTH
            // charged per item: lists that share sublists ([a, a]) are trees of any size
            int rc = ct_work(r, 0, line);
            if (rc || (rc = ct_eq(r, &a->items[i], &b->items[i], line, eq))) return rc;
        }
        return KG_OK;
    }
    return KG_OK;
}

// item in seq: a substring, a list item, a message's key.
static int ct_contains(CtRender *r, const CtVal *item, const CtVal *seq, int line, int *in) {
    *in = 0;
    switch (seq->kind) {
    case CT_VAL_UNDEF:
        return KG_OK;
    case CT_VAL_STR:
        if (item->kind != CT_VAL_STR)
            return ct_fail(r->err, KG_EINVAL, line, "'in <str>' needs a str on the left, not %s",
                           ct_type(item));
        { // charged before the search: its cost is the haystack's, at memmem's worst rate
            int rc = ct_charge(r, seq->n + item->n, CT_BYTES_SEARCHED, line);
            if (rc) return rc;
        }
        *in = !item->n || memmem(seq->s, seq->n, item->s, item->n);
        return KG_OK;
    case CT_VAL_LIST:
        for (size_t i = 0; i < seq->n && !*in; i++) {
            int rc = ct_eq(r, item, &seq->items[i], line, in);
            if (rc) return rc;
        }
        return KG_OK;
    case CT_VAL_MSG: // a dict: keys are looked up by hash, and lists and dicts have none
        if (item->kind == CT_VAL_LIST || item->kind == CT_VAL_MSG)
            return ct_fail(r->err, KG_EINVAL, line, "unhashable type: %s", ct_type(item));
        *in = item->kind == CT_VAL_STR && ((item->n == 4 && !memcmp(item->s, "role", 4)) ||
                                           (item->n == 7 && !memcmp(item->s, "content", 7)));
        return KG_OK;
    case CT_VAL_LOOP:
        return ct_fail(r->err, KG_EUNSUP, line, "'in loop' is not supported");
    default:
        return ct_fail(r->err, KG_EINVAL, line, "'in' needs a str, list or dict, not %s",
                       ct_type(seq));
    }
}

// a < b etc.: *cmp < 0, 0, > 0 for two numbers or two strings.
static int ct_order(CtRender *r, const CtVal *a, const CtVal *b, int line, int *cmp) {
    if (ct_num(a) && ct_num(b)) return *cmp = (a->i > b->i) - (a->i < b->i), KG_OK;
    if (a->kind == CT_VAL_STR && b->kind == CT_VAL_STR) {
        int c = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
        *cmp = c ? c : (a->n > b->n) - (a->n < b->n);
        return ct_work(r, a->n < b->n ? a->n : b->n, line);
    }
    if (a->kind == CT_VAL_UNDEF) return ct_undef_error(r, a, line);
    if (b->kind == CT_VAL_UNDEF) return ct_undef_error(r, b, line);
    if (a->kind == CT_VAL_LIST && b->kind == CT_VAL_LIST)
        return ct_fail(r->err, KG_EUNSUP, line, "ordering lists is not supported");
    return ct_fail(r->err, KG_EINVAL, line, "cannot compare %s and %s", ct_type(a), ct_type(b));
}

int ct_list_new(CtRender *r, size_t n, int line, CtVal **items) {
    if (n > CT_MAX_MEMORY / sizeof(CtVal))
        return ct_fail(r->err, KG_ERANGE, line, "a list is too long");
    int rc = ct_alloc(r, n * sizeof(CtVal), line, (void **)items);
    return rc ? rc : ct_work(r, n * sizeof(CtVal), line);
}

int ct_list_done(CtRender *r, CtVal *items, size_t n, int line, CtVal *out) {
    int depth = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].kind == CT_VAL_LIST && items[i].depth > depth) depth = items[i].depth;
    if (depth + 1 > CHAT_TEMPLATE_MAX_DEPTH)
        return ct_fail(r->err, KG_ERANGE, line, "lists are nested deeper than %d levels",
                       CHAT_TEMPLATE_MAX_DEPTH);
    *out = (CtVal){.kind = CT_VAL_LIST, .depth = (uint8_t)(depth + 1), .n = n, .items = items};
    return KG_OK;
}

// seq * times for a str or a list, as Python repeats them (times <= 0: empty).
static int ct_repeat(CtRender *r, const CtVal *seq, long long times, int line, CtVal *out) {
    size_t k = times > 0 ? (size_t)times : 0, n = seq->n;
    if (n && k > CT_MAX_MEMORY / n)
        return ct_fail(r->err, KG_ERANGE, line, "rendering needs more than %d MiB",
                       CT_MAX_MEMORY >> 20);
    if (seq->kind == CT_VAL_STR) {
        char *s;
        int rc = ct_alloc(r, n * k, line, (void **)&s);
        if (rc || (rc = ct_work(r, n * k, line))) return rc;
        for (size_t i = 0; n && i < k; i++)
            memcpy(s + i * n, seq->s, n);
        *out = ct_str(s, n * k);
        return KG_OK;
    }
    CtVal *items;
    int rc = ct_list_new(r, n * k, line, &items);
    if (rc) return rc;
    for (size_t i = 0; n && i < k; i++)
        memcpy(items + i * n, seq->items, n * sizeof *items);
    return ct_list_done(r, items, n * k, line, out);
}

static int ct_arith(CtRender *r, int op, const CtVal *a, const CtVal *b, int line, CtVal *out) {
    static const char *const SYM[] = {"+", "-", "*", "//", "%"};
    if (op == CT_BIN_MOD && a->kind == CT_VAL_STR)
        return ct_fail(r->err, KG_EUNSUP, line, "str %% formatting is not supported");
    if (a->kind == CT_VAL_UNDEF) return ct_undef_error(r, a, line);
    if (b->kind == CT_VAL_UNDEF) return ct_undef_error(r, b, line);
    if (op == CT_BIN_ADD && a->kind == CT_VAL_STR && b->kind == CT_VAL_STR)
        return ct_join2(r, a->s, a->n, b->s, b->n, line, out);
    if (op == CT_BIN_ADD && a->kind == CT_VAL_LIST && b->kind == CT_VAL_LIST) {
        CtVal *items;
        int rc = ct_list_new(r, a->n + b->n, line, &items);
        if (rc) return rc;
        if (a->n) memcpy(items, a->items, a->n * sizeof *items);
        if (b->n) memcpy(items + a->n, b->items, b->n * sizeof *items);
        return ct_list_done(r, items, a->n + b->n, line, out);
    }
    if (op == CT_BIN_MUL && (ct_num(a) || ct_num(b))) {
        const CtVal *seq = ct_num(a) ? b : a, *times = ct_num(a) ? a : b;
        if (seq->kind == CT_VAL_STR || seq->kind == CT_VAL_LIST)
            return ct_repeat(r, seq, times->i, line, out);
    }
    if (!ct_num(a) || !ct_num(b))
        return ct_fail(r->err, KG_EINVAL, line, "unsupported operand types for %s: %s and %s",
                       SYM[op], ct_type(a), ct_type(b));
    long long x = a->i, y = b->i, z = 0;
    int overflow = 0;
    if ((op == CT_BIN_FLOORDIV || op == CT_BIN_MOD) && y == 0)
        return ct_fail(r->err, KG_EINVAL, line, "integer division or modulo by zero");
    switch (op) {
    case CT_BIN_ADD:
        overflow = __builtin_add_overflow(x, y, &z);
        break;
    case CT_BIN_SUB:
        overflow = __builtin_sub_overflow(x, y, &z);
        break;
    case CT_BIN_MUL:
        overflow = __builtin_mul_overflow(x, y, &z);
        break;
    default: // Python floors: -7 // 2 == -4, -7 % 3 == 2
        if (x == LLONG_MIN && y == -1) {
            overflow = op == CT_BIN_FLOORDIV;
            break;
        }
        z = op == CT_BIN_FLOORDIV ? x / y : x % y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) z = op == CT_BIN_FLOORDIV ? z - 1 : z + y;
    }
    if (overflow) return ct_fail(r->err, KG_ERANGE, line, "integer overflow");
    *out = ct_int(CT_VAL_INT, z);
    return KG_OK;
}

int ct_binop(CtRender *r, int op, const CtVal *a, const CtVal *b, int line, CtVal *out) {
    int rc, res = 0;
    switch (op) {
    case CT_BIN_CONCAT: {
        const char *sa, *sb;
        size_t na, nb;
        if ((rc = ct_text(r, a, line, &sa, &na)) || (rc = ct_text(r, b, line, &sb, &nb))) return rc;
        return ct_join2(r, sa, na, sb, nb, line, out);
    }
    case CT_BIN_EQ:
    case CT_BIN_NE:
        rc = ct_eq(r, a, b, line, &res);
        res = op == CT_BIN_EQ ? res : !res;
        break;
    case CT_BIN_IN:
    case CT_BIN_NOTIN:
        rc = ct_contains(r, a, b, line, &res);
        res = op == CT_BIN_IN ? res : !res;
        break;
    case CT_BIN_LT:
    case CT_BIN_LE:
    case CT_BIN_GT:
    case CT_BIN_GE:
        rc = ct_order(r, a, b, line, &res);
        res = op == CT_BIN_LT   ? res < 0
              : op == CT_BIN_LE ? res <= 0
              : op == CT_BIN_GT ? res > 0
                                : res >= 0;
        break;
    default:
        return ct_arith(r, op, a, b, line, out);
    }
    *out = ct_int(CT_VAL_BOOL, res);
    return rc;
}

static CtVal ct_loop_attr(const CtLoop *lp, const char *name, size_t n) {
    static const char *const ATTRS[] = {"index", "index0", "revindex", "revindex0", "first",
                                        "last",  "length", "previtem", "nextitem"};
    size_t i = lp->i, len = lp->n, j = 0;
    while (j < 9 && !(strlen(ATTRS[j]) == n && !memcmp(ATTRS[j], name, n)))
        j++;
    switch (j) {
    case 0:
        return ct_int(CT_VAL_INT, (long long)i + 1);
    case 1:
        return ct_int(CT_VAL_INT, (long long)i);
    case 2:
        return ct_int(CT_VAL_INT, (long long)(len - i));
    case 3:
        return ct_int(CT_VAL_INT, (long long)(len - i - 1));
    case 4:
        return ct_int(CT_VAL_BOOL, i == 0);
    case 5:
        return ct_int(CT_VAL_BOOL, i + 1 == len);
    case 6:
        return ct_int(CT_VAL_INT, (long long)len);
    case 7:
        return i > 0 ? lp->items[i - 1] : ct_undef("there is no previous item", 25, 1);
    case 8:
        return i + 1 < len ? lp->items[i + 1] : ct_undef("there is no next item", 21, 1);
    default:
        return ct_undef(name, n, 0);
    }
}

// obj.name, and obj['name'] for a message or the loop.
int ct_getattr(CtRender *r, const CtVal *obj, const char *name, size_t n, int line, CtVal *out) {
    if (obj->kind == CT_VAL_UNDEF) return ct_undef_error(r, obj, line);
    *out = ct_undef(name, n, 0);
    if (obj->kind == CT_VAL_LOOP) *out = ct_loop_attr(obj->loop, name, n);
    if (obj->kind != CT_VAL_MSG) return KG_OK;
    if (n == 4 && !memcmp(name, "role", 4)) *out = ct_str(obj->msg->role, strlen(obj->msg->role));
    if (n == 7 && !memcmp(name, "content", 7)) {
        const char *c = obj->msg->content;
        *out = c ? ct_str(c, strlen(c)) : ct_int(CT_VAL_NONE, 0);
    }
    return ct_work(r, out->kind == CT_VAL_STR ? out->n : 0, line);
}

int ct_getitem(CtRender *r, const CtVal *obj, const CtVal *key, int line, CtVal *out) {
    if (obj->kind == CT_VAL_UNDEF) return ct_undef_error(r, obj, line);
    if (key->kind == CT_VAL_STR && obj->kind != CT_VAL_STR)
        return ct_getattr(r, obj, key->s, key->n, line, out);
    if (obj->kind == CT_VAL_STR)
        return ct_fail(r->err, KG_EUNSUP, line, "indexing a str is not supported");
    *out = ct_undef("no such item", 12, 1);
    if (obj->kind != CT_VAL_LIST || !ct_num(key)) return KG_OK;
    long long i = key->i, n = (long long)obj->n;
    if (i < 0) i += n;
    if (i >= 0 && i < n)
        *out = obj->items[i];
    else
        *out = ct_undef("list index out of range", 23, 1);
    return KG_OK;
}

// list[start:stop:step] as Python slices (missing parts NULL).
int ct_slice(CtRender *r, const CtVal *obj, const CtVal *part[3], int line, CtVal *out) {
    if (obj->kind == CT_VAL_UNDEF) return ct_undef_error(r, obj, line);
    if (obj->kind != CT_VAL_LIST)
        return ct_fail(r->err, KG_EUNSUP, line, "slicing a %s is not supported", ct_type(obj));
    long long n = (long long)obj->n, v[3];
    for (int j = 0; j < 3; j++) {
        if (part[j] && part[j]->kind != CT_VAL_NONE && !ct_num(part[j]))
            return ct_fail(r->err, KG_EINVAL, line, "slice indices must be integers or none");
        v[j] = part[j] && part[j]->kind != CT_VAL_NONE ? part[j]->i : LLONG_MIN;
        if (v[j] != LLONG_MIN) v[j] = v[j] < -n - 1 ? -n - 1 : v[j] > n + 1 ? n + 1 : v[j];
    }
    long long step = v[2] == LLONG_MIN ? 1 : v[2], start = v[0], stop = v[1], count = 0;
    if (step == 0) return ct_fail(r->err, KG_EINVAL, line, "slice step cannot be zero");
    if (start == LLONG_MIN)
        start = step > 0 ? 0 : n - 1;
    else if (start < 0)
        start = start + n < 0 ? (step > 0 ? 0 : -1) : start + n;
    else if (start >= n)
        start = step > 0 ? n : n - 1;
    if (stop == LLONG_MIN)
        stop = step > 0 ? n : -1;
    else if (stop < 0)
        stop = stop + n < 0 ? (step > 0 ? 0 : -1) : stop + n;
    else if (stop >= n)
        stop = step > 0 ? n : n - 1;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = (start - stop - 1) / -step + 1;
    CtVal *items;
    int rc = ct_list_new(r, (size_t)count, line, &items);
    if (rc) return rc;
    for (long long k = 0; k < count; k++)
        items[k] = obj->items[start + k * step];
    return ct_list_done(r, items, (size_t)count, line, out);
}

// A copy of s with ASCII letters changed: mode 'u' upper, 'l' lower, 'c' capitalize.
static int ct_case(CtRender *r, const char *s, size_t n, int mode, int line, CtVal *out) {
    int rc = ct_charge(r, n, CT_BYTES_LOOPED, line);
    if (rc || (rc = ct_join2(r, s, n, NULL, 0, line, out))) return rc;
    char *o = (char *)out->s;
    for (size_t i = 0; i < n; i++) {
        int up = mode == 'u' || (mode == 'c' && i == 0);
        if (up && o[i] >= 'a' && o[i] <= 'z') o[i] = (char)(o[i] - 32);
        if (!up && o[i] >= 'A' && o[i] <= 'Z') o[i] = (char)(o[i] + 32);
    }
    return KG_OK;
}

// s.strip(chars): which 1 left, 2 right, 3 both; chars none or a str.
static int ct_strip(CtRender *r, const CtVal *v, const CtVal *chars, int which, int line,
                    CtVal *out) {
    const char *set = NULL;
    size_t m = 0, lo = 0, hi = v->n;
    if (chars && chars->kind == CT_VAL_STR)
        set = chars->s, m = chars->n;
    else if (chars && chars->kind != CT_VAL_NONE)
        return ct_fail(r->err, KG_EINVAL, line, "strip arg must be none or str, not %s",
                       ct_type(chars));
    // charged before: each character may be looked for in all of chars (a pair of bytes a
    // step: ct_in_set decodes chars anew for each), or tested for whitespace
    int rc = m ? ct_charge(r, v->n > SIZE_MAX / m ? SIZE_MAX : v->n * m, CT_BYTES_SEARCHED, line)
               : ct_charge(r, v->n, CT_BYTES_LOOPED, line);
    if (rc) return rc;
    if (which & 1) lo = ct_skip_set(v->s, lo, hi, set, m);
    if (which & 2) hi = ct_rskip_set(v->s, lo, hi, set, m);
    *out = ct_str(v->s + lo, hi - lo);
    return KG_OK;
}

int ct_method(CtRender *r, const CtNode *nd, const CtVal *v, const CtVal *args, CtVal *out) {
    int line = nd->line;
    if (v->kind == CT_VAL_UNDEF) return ct_undef_error(r, v, line);
    if (v->kind != CT_VAL_STR)
        return ct_fail(r->err, KG_EINVAL, line, "%s has no method '%.*s'", ct_type(v),
                       (int)nd->n_text, nd->text);
    switch (nd->op) {
    case CT_METHOD_STRIP:
    case CT_METHOD_LSTRIP:
    case CT_METHOD_RSTRIP:
        return ct_strip(r, v, nd->call.args >= 0 ? &args[0] : NULL,
                        nd->op == CT_METHOD_STRIP    ? 3
                        : nd->op == CT_METHOD_LSTRIP ? 1
                                                     : 2,
                        line, out);
    case CT_METHOD_UPPER:
    case CT_METHOD_LOWER:
    case CT_METHOD_CAPITALIZE:
        return ct_case(r, v->s, v->n,
                       nd->op == CT_METHOD_UPPER   ? 'u'
                       : nd->op == CT_METHOD_LOWER ? 'l'
                                                   : 'c',
                       line, out);
    default: { // startswith, endswith
        if (args[0].kind != CT_VAL_STR)
            return ct_fail(r->err, KG_EINVAL, line, "%.*s takes a str, not %s", (int)nd->n_text,
                           nd->text, ct_type(&args[0]));
        size_t k = args[0].n;
        int hit = k <= v->n &&
                  !memcmp(nd->op == CT_METHOD_STARTSWITH ? v->s : v->s + v->n - k, args[0].s, k);
        *out = ct_int(CT_VAL_BOOL, hit);
        return ct_work(r, k, line);
    }
    }
}

int ct_filter(CtRender *r, const CtNode *nd, const CtVal *v, const CtVal *args, int n_args,
              CtVal *out) {
    int rc, line = nd->line;
    const char *s;
    size_t n;
    switch (nd->op) {
    case CT_FILTER_DEFAULT: { // default(value='', boolean=false)
        int use = v->kind == CT_VAL_UNDEF || (n_args > 1 && ct_truthy(&args[1]) && !ct_truthy(v));
        *out = !use ? *v : n_args ? args[0] : ct_str("", 0);
        return KG_OK;
    }
    case CT_FILTER_LENGTH:
        if (v->kind == CT_VAL_STR) {
            size_t k = 0; // Python counts characters
            for (size_t i = 0; i < v->n; i++)
                k += ((unsigned char)v->s[i] & 0xc0) != 0x80;
            *out = ct_int(CT_VAL_INT, (long long)k);
            return ct_charge(r, v->n, CT_BYTES_LOOPED, line);
        }
        if (v->kind == CT_VAL_LIST || v->kind == CT_VAL_UNDEF || v->kind == CT_VAL_MSG ||
            v->kind == CT_VAL_LOOP) {
            long long k = v->kind == CT_VAL_LIST   ? (long long)v->n
                          : v->kind == CT_VAL_LOOP ? (long long)v->loop->n
                          : v->kind == CT_VAL_MSG  ? 2 // role, content
                                                   : 0;
            *out = ct_int(CT_VAL_INT, k);
            return KG_OK;
        }
        return ct_fail(r->err, KG_EINVAL, line, "%s has no length", ct_type(v));
    case CT_FILTER_FIRST:
    case CT_FILTER_LAST:
        if (v->kind == CT_VAL_UNDEF) return *out = *v, KG_OK;
        if (v->kind != CT_VAL_LIST)
            return ct_fail(r->err, KG_EUNSUP, line, "first/last of a %s is not supported",
                           ct_type(v));
        *out = !v->n ? ct_undef("the list is empty", 17, 1)
                     : v->items[nd->op == CT_FILTER_FIRST ? 0 : v->n - 1];
        return KG_OK;
    case CT_FILTER_JOIN: { // sizes first, then one copy: joining in steps would copy n^2 bytes
        const char *sep = "";
        size_t n_sep = 0, total = 0;
        char *o;
        if (v->kind == CT_VAL_UNDEF) return *out = ct_str("", 0), KG_OK;
        if (v->kind != CT_VAL_LIST)
            return ct_fail(r->err, KG_EUNSUP, line, "joining a %s is not supported", ct_type(v));
        if (n_args && (rc = ct_text(r, &args[0], line, &sep, &n_sep))) return rc;
        for (size_t i = 0; i < v->n; i++) {
            if ((rc = ct_text(r, &v->items[i], line, &s, &n))) return rc;
            total += n + (i ? n_sep : 0); // each part is in the arena or the messages
        }
        if ((rc = ct_alloc(r, total, line, (void **)&o)) || (rc = ct_work(r, total, line)))
            return rc;
        *out = ct_str(o, total);
        for (size_t i = 0; i < v->n; i++) {
            if ((rc = ct_text(r, &v->items[i], line, &s, &n))) return rc;
            if (i && n_sep) memcpy(o, sep, n_sep);
            o += i ? n_sep : 0;
            if (n) memcpy(o, s, n);
            o += n;
        }
        return KG_OK;
    }
    }
    if ((rc = ct_text(r, v, line, &s, &n))) return rc; // the rest work on str(v)
    CtVal str = ct_str(s, n);
    switch (nd->op) {
    case CT_FILTER_TRIM:
        return ct_strip(r, &str, n_args ? &args[0] : NULL, 3, line, out);
    case CT_FILTER_UPPER:
    case CT_FILTER_LOWER:
    case CT_FILTER_CAPITALIZE:
        return ct_case(r, s, n,
                       nd->op == CT_FILTER_UPPER   ? 'u'
                       : nd->op == CT_FILTER_LOWER ? 'l'
                                                   : 'c',
                       line, out);
    default: // CT_FILTER_STRING
        return *out = str, KG_OK;
    }
}

int ct_test(CtRender *r, const CtNode *nd, const CtVal *v, CtVal *out) {
    int k = v->kind, res = 0;
    switch (nd->op) {
    case CT_TEST_DEFINED:
        res = k != CT_VAL_UNDEF;
        break;
    case CT_TEST_UNDEFINED:
        res = k == CT_VAL_UNDEF;
        break;
    case CT_TEST_NONE:
        res = k == CT_VAL_NONE;
        break;
    case CT_TEST_STRING:
        res = k == CT_VAL_STR;
        break;
    case CT_TEST_NUMBER:
        res = ct_num(v);
        break;
    case CT_TEST_INTEGER:
        res = k == CT_VAL_INT;
        break;
    case CT_TEST_BOOLEAN:
        res = k == CT_VAL_BOOL;
        break;
    case CT_TEST_TRUE:
        res = k == CT_VAL_BOOL && v->i;
        break;
    case CT_TEST_FALSE:
        res = k == CT_VAL_BOOL && !v->i;
        break;
    default: // odd, even
        if (k == CT_VAL_UNDEF) return ct_undef_error(r, v, nd->line);
        if (!ct_num(v))
            return ct_fail(r->err, KG_EINVAL, nd->line, "odd/even needs a number, not %s",
                           ct_type(v));
        res = (v->i & 1) == (nd->op == CT_TEST_ODD);
    }
    *out = ct_int(CT_VAL_BOOL, res);
    return KG_OK;
}
