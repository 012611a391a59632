// pickle.c — a state-dict reader for PyTorch's data.pkl (pickle.h): a small stack machine
// over an allowlist of opcodes and globals that builds plain records and never runs
// anything.
//
// Values are nodes in one array (a container holds node indices), so the pickle's memo and
// shared references need no pointers and no recursion; nothing walks a container except
// the final dict, once, so a cyclic pickle is harmless. Every count is bounded (pickle.h).
#include "pickle.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

#define PICKLE_MAX_ITEMS (1u << 22) // container slots in all
#define NO_NODE          UINT32_MAX

typedef enum {
    PV_NONE,
    PV_BOOL,
    PV_INT,
    PV_STR,
    PV_TUPLE,
    PV_LIST,
    PV_DICT,
    PV_GLOBAL,
    PV_STORAGE,
    PV_TENSOR
} PvKind;

typedef struct {
    PvKind kind;
    int64_t i;       // BOOL, INT: the value; GLOBAL: index into GLOBALS; STORAGE, TENSOR: record
    const char *s;   // STR: in the pickle bytes
    size_t len;      // STR: bytes
    uint32_t *items; // TUPLE, LIST: values; DICT: key, value, key, value, ...
    size_t n, cap;
} PvNode;

typedef enum { G_ORDERED_DICT, G_REBUILD_TENSOR, G_REBUILD_PARAMETER, G_STORAGE } GlobalRole;

// The allowlist: the only names a GLOBAL may give. Storage classes only tag a dtype; old
// torch named a GPU tensor's storage torch.cuda.FloatStorage (module NULL: torch or torch.cuda).
static const struct {
    const char *module, *name;
    GlobalRole role;
    KgDtype dtype;
    const char *dtype_name;
    size_t elem_size;
} GLOBALS[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT, KG_DTYPE_OTHER, NULL, 0},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR, KG_DTYPE_OTHER, NULL, 0},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, KG_DTYPE_OTHER, NULL, 0},
    {"torch._utils", "_rebuild_parameter_with_state", G_REBUILD_PARAMETER, KG_DTYPE_OTHER, NULL, 0},
    {NULL, "FloatStorage", G_STORAGE, KG_F32, "F32", 4},
    {NULL, "HalfStorage", G_STORAGE, KG_F16, "F16", 2},
    {NULL, "BFloat16Storage", G_STORAGE, KG_BF16, "BF16", 2},
    {NULL, "DoubleStorage", G_STORAGE, KG_DTYPE_OTHER, "F64", 8},
    {NULL, "LongStorage", G_STORAGE, KG_DTYPE_OTHER, "I64", 8},
    {NULL, "IntStorage", G_STORAGE, KG_DTYPE_OTHER, "I32", 4},
    {NULL, "ShortStorage", G_STORAGE, KG_DTYPE_OTHER, "I16", 2},
    {NULL, "CharStorage", G_STORAGE, KG_DTYPE_OTHER, "I8", 1},
    {NULL, "ByteStorage", G_STORAGE, KG_DTYPE_OTHER, "U8", 1},
    {NULL, "BoolStorage", G_STORAGE, KG_DTYPE_OTHER, "BOOL", 1},
    {NULL, "UntypedStorage", G_STORAGE, KG_DTYPE_OTHER, "U8", 1},
};
#define N_GLOBALS (sizeof GLOBALS / sizeof GLOBALS[0])

// The opcodes read (pickletools' names); protocol 2 is what torch.save writes, the few of
// protocol 4 (FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE) keep pickle_protocol=4 working.
enum {
    OP_PROTO = 0x80,
    OP_FRAME = 0x95,
    OP_STOP = '.',
    OP_MARK = '(',
    OP_EMPTY_DICT = '}',
    OP_EMPTY_LIST = ']',
    OP_EMPTY_TUPLE = ')',
    OP_TUPLE = 't',
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_BINUNICODE = 'X',
    OP_SHORT_BINUNICODE = 0x8c,
    OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r',
    OP_MEMOIZE = 0x94,
    OP_BINGET = 'h',
    OP_LONG_BINGET = 'j',
    OP_BININT = 'J',
    OP_BININT1 = 'K',
    OP_BININT2 = 'M',
    OP_LONG1 = 0x8a,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_NONE = 'N',
    OP_GLOBAL = 'c',
    OP_STACK_GLOBAL = 0x93,
    OP_REDUCE = 'R',
    OP_BUILD = 'b',
    OP_SETITEM = 's',
    OP_SETITEMS = 'u',
    OP_APPEND = 'a',
    OP_APPENDS = 'e',
    OP_BINPERSID = 'Q'
};

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    PvNode *nodes;
    size_t n_nodes, cap_nodes, n_items;
    uint32_t *stack;
    size_t sp, cap_stack;
    size_t marks[PICKLE_MAX_MARKS];
    int n_marks;
    uint32_t *memo;
    size_t cap_memo, memo_next;
    PickleStorage *storages;
    size_t n_storages, cap_storages;
    PickleTensor *views; // what _rebuild_tensor_v2 built; names come from the dict
    size_t n_views, cap_views;
    char *err;
} Pk;

static const char *kind_name(PvKind k) {
    static const char *const NAMES[] = {"None",   "a bool", "an int",   "a string",  "a tuple",
                                        "a list", "a dict", "a global", "a storage", "a tensor"};
    return NAMES[k];
}

// A string from the file, for a message (at most 80 bytes, odd bytes as '?').
static const char *show(const char *s, size_t n, char *out) { return kg_show(out, 81, s, n); }

// Grows *buf (of *cap elements of size esize) to hold need (kg_grow), refusing past max, one
// of the limits above. KG_OK, or KG_ENOMEM with the error written.
static int grow(Pk *k, void *buf, size_t *cap, size_t need, size_t esize, size_t max) {
    if (need > max || kg_grow(buf, cap, need, esize, NULL))
        return kg_err(k->err, KG_ENOMEM, "pickle: out of memory");
    return KG_OK;
}

static int new_node(Pk *k, PvKind kind, uint32_t *out) {
    if (k->n_nodes >= PICKLE_MAX_NODES)
        return kg_err(k->err, KG_EFORMAT, "pickle: more than %u values: not a state dict",
                      PICKLE_MAX_NODES);
    int rc = grow(k, &k->nodes, &k->cap_nodes, k->n_nodes + 1, sizeof *k->nodes, PICKLE_MAX_NODES);
    if (rc) return rc;
    k->nodes[k->n_nodes] = (PvNode){.kind = kind};
    *out = (uint32_t)k->n_nodes++;
    return KG_OK;
}

static int add_item(Pk *k, uint32_t node, uint32_t item) {
    PvNode *v = &k->nodes[node];
    if (k->n_items >= PICKLE_MAX_ITEMS)
        return kg_err(k->err, KG_EFORMAT, "pickle: more than %u items in containers",
                      PICKLE_MAX_ITEMS);
    int rc = grow(k, &v->items, &v->cap, v->n + 1, sizeof *v->items, PICKLE_MAX_ITEMS);
    if (rc) return rc;
    v->items[v->n++] = item;
    k->n_items++;
    return KG_OK;
}

// The stack above the innermost MARK is what an opcode may pop.
static size_t stack_base(const Pk *k) { return k->n_marks ? k->marks[k->n_marks - 1] : 0; }

static int push(Pk *k, uint32_t v) {
    if (k->sp >= PICKLE_MAX_STACK)
        return kg_err(k->err, KG_EFORMAT, "pickle: more than %u values on the stack",
                      PICKLE_MAX_STACK);
    int rc = grow(k, &k->stack, &k->cap_stack, k->sp + 1, sizeof *k->stack, PICKLE_MAX_STACK);
    if (rc) return rc;
    k->stack[k->sp++] = v;
    return KG_OK;
}

static int push_new(Pk *k, PvKind kind, int64_t i) {
    uint32_t n = 0;
    int rc = new_node(k, kind, &n);
    if (rc) return rc;
    k->nodes[n].i = i;
    return push(k, n);
}

static int underflow(Pk *k) {
    return kg_err(k->err, KG_EFORMAT, "pickle: stack underflow at byte %zu", k->pos);
}

static int pop(Pk *k, uint32_t *v) {
    if (k->sp <= stack_base(k)) return underflow(k);
    *v = k->stack[--k->sp];
    return KG_OK;
}

static int peek(Pk *k, uint32_t *v) {
    if (k->sp <= stack_base(k)) return underflow(k);
    *v = k->stack[k->sp - 1];
    return KG_OK;
}

// Ends the innermost MARK: the values above it are stack[*from .. sp).
static int pop_mark(Pk *k, size_t *from) {
    if (!k->n_marks)
        return kg_err(k->err, KG_EFORMAT, "pickle: no MARK to close at byte %zu", k->pos);
    *from = k->marks[--k->n_marks];
    return KG_OK;
}

static int need(Pk *k, size_t n) {
    if (n > k->size - k->pos)
        return kg_err(k->err, KG_EFORMAT, "pickle: truncated at byte %zu (wanted %zu more)", k->pos,
                      n);
    return KG_OK;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

// An argument of kind `want`, or an error naming where it was expected.
static int expect(Pk *k, uint32_t n, PvKind want, const char *what) {
    if (k->nodes[n].kind == want) return KG_OK;
    return kg_err(k->err, KG_EFORMAT, "pickle: %s is %s, expected %s (at byte %zu)", what,
                  kind_name(k->nodes[n].kind), kind_name(want), k->pos);
}

static int str_is(const PvNode *v, const char *s) {
    return v->kind == PV_STR && v->len == strlen(s) && !memcmp(v->s, s, v->len);
}

// module.name -> an allowlisted global, or the one line that refuses it.
static int find_global(Pk *k, const char *mod, size_t mlen, const char *name, size_t nlen) {
    for (size_t g = 0; g < N_GLOBALS; g++) {
        const char *gm = GLOBALS[g].module;
        int mod_ok = gm ? mlen == strlen(gm) && !memcmp(mod, gm, mlen)
                        : (mlen == 5 && !memcmp(mod, "torch", 5)) ||
                              (mlen == 10 && !memcmp(mod, "torch.cuda", 10));
        if (mod_ok && nlen == strlen(GLOBALS[g].name) && !memcmp(name, GLOBALS[g].name, nlen))
            return push_new(k, PV_GLOBAL, (int64_t)g);
    }
    char m[81], n[81];
    return kg_err(k->err, KG_EFORMAT,
                  "pickle: global %s.%s is not allowed (a state dict uses only "
                  "collections.OrderedDict, torch._utils._rebuild_tensor_v2/_rebuild_parameter "
                  "and torch.*Storage)",
                  show(mod, mlen, m), show(name, nlen, n));
}

// GLOBAL: "module\nname\n" inline.
static int op_global(Pk *k) {
    const char *line[2];
    size_t len[2];
    for (int i = 0; i < 2; i++) {
        const uint8_t *s = k->p + k->pos;
        const uint8_t *nl = memchr(s, '\n', k->size - k->pos < 256 ? k->size - k->pos : 256);
        if (!nl) return kg_err(k->err, KG_EFORMAT, "pickle: a GLOBAL name is cut or too long");
        line[i] = (const char *)s;
        len[i] = (size_t)(nl - s);
        k->pos += len[i] + 1;
    }
    return find_global(k, line[0], len[0], line[1], len[1]);
}

static int op_stack_global(Pk *k) {
    uint32_t mod = 0, name = 0;
    int rc;
    if ((rc = pop(k, &name)) || (rc = pop(k, &mod)) ||
        (rc = expect(k, mod, PV_STR, "STACK_GLOBAL's module")) ||
        (rc = expect(k, name, PV_STR, "STACK_GLOBAL's name")))
        return rc;
    return find_global(k, k->nodes[mod].s, k->nodes[mod].len, k->nodes[name].s, k->nodes[name].len);
}

// A tuple of the values stack[from .. sp), replacing them.
static int make_tuple(Pk *k, size_t from) {
    uint32_t t;
    int rc = new_node(k, PV_TUPLE, &t);
    for (size_t i = from; !rc && i < k->sp; i++)
        rc = add_item(k, t, k->stack[i]);
    if (rc) return rc;
    k->sp = from;
    return push(k, t);
}

// A storage key becomes part of a zip entry name: 1..64 letters, digits and '_' only.
static int plain_name(const char *s, size_t n) {
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

// BINPERSID: ('storage', torch.XStorage, key, location, numel) -> a storage record.
static int op_persid(Pk *k) {
    uint32_t pid = 0;
    int rc;
    if ((rc = pop(k, &pid)) || (rc = expect(k, pid, PV_TUPLE, "a persistent id"))) return rc;
    const PvNode *t = &k->nodes[pid];
    const PvNode *cls = t->n == 5 ? &k->nodes[t->items[1]] : NULL;
    const PvNode *key = t->n == 5 ? &k->nodes[t->items[2]] : NULL;
    const PvNode *numel = t->n == 5 ? &k->nodes[t->items[4]] : NULL;
    if (!cls || !str_is(&k->nodes[t->items[0]], "storage") || cls->kind != PV_GLOBAL ||
        GLOBALS[cls->i].role != G_STORAGE || key->kind != PV_STR || numel->kind != PV_INT ||
        numel->i < 0)
        return kg_err(k->err, KG_EFORMAT,
                      "pickle: a persistent id at byte %zu is not ('storage', torch.XStorage, "
                      "key, location, numel)",
                      k->pos);
    if (!plain_name(key->s, key->len)) {
        char s[81];
        return kg_err(k->err, KG_EFORMAT, "pickle: storage key '%s' is not a plain name",
                      show(key->s, key->len, s));
    }
    const size_t g = (size_t)cls->i;
    size_t bytes;
    if (kg_mul_overflow((size_t)numel->i, GLOBALS[g].elem_size, &bytes))
        return kg_err(k->err, KG_EFORMAT, "pickle: storage %.*s: %lld elements do not fit memory",
                      (int)key->len, key->s, (long long)numel->i);
    if ((rc = grow(k, &k->storages, &k->cap_storages, k->n_storages + 1, sizeof *k->storages,
                   PICKLE_MAX_NODES)))
        return rc;
    k->storages[k->n_storages] = (PickleStorage){
        key->s,          key->len, GLOBALS[g].dtype, GLOBALS[g].dtype_name, GLOBALS[g].elem_size,
        (size_t)numel->i};
    return push_new(k, PV_STORAGE, (int64_t)k->n_storages++);
}

// A tuple of non-negative ints (size or stride) into out; its length into *n.
static int int_tuple(Pk *k, uint32_t node, size_t *out, int *n, const char *what) {
    int rc = expect(k, node, PV_TUPLE, what);
    if (rc) return rc;
    const PvNode *t = &k->nodes[node];
    if (t->n > PICKLE_MAX_DIMS)
        return kg_err(k->err, KG_EFORMAT, "pickle: a tensor of %zu dimensions (at most %d)", t->n,
                      PICKLE_MAX_DIMS);
    for (size_t d = 0; d < t->n; d++) {
        const PvNode *v = &k->nodes[t->items[d]];
        if (v->kind != PV_INT || v->i < 0)
            return kg_err(k->err, KG_EFORMAT, "pickle: a tensor's %s holds %s", what,
                          v->kind == PV_INT ? "a negative number" : kind_name(v->kind));
        out[d] = (size_t)v->i;
    }
    *n = (int)t->n;
    return KG_OK;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, meta]).
static int rebuild_tensor(Pk *k, const PvNode *args) {
    PickleTensor v = {0};
    int rc, n_stride = 0;
    if (args->n != 6 && args->n != 7)
        return kg_err(k->err, KG_EFORMAT, "pickle: _rebuild_tensor_v2 with %zu arguments", args->n);
    const uint32_t *a = args->items;
    if ((rc = expect(k, a[0], PV_STORAGE, "a tensor's storage")) ||
        (rc = expect(k, a[1], PV_INT, "a tensor's storage offset")) ||
        (rc = int_tuple(k, a[2], v.shape, &v.ndim, "size")) ||
        (rc = int_tuple(k, a[3], v.stride, &n_stride, "stride")) ||
        (rc = expect(k, a[4], PV_BOOL, "a tensor's requires_grad")))
        return rc;
    if (k->nodes[a[1]].i < 0 || n_stride != v.ndim)
        return kg_err(k->err, KG_EFORMAT,
                      "pickle: a tensor with a negative offset or %d strides for %d dimensions",
                      n_stride, v.ndim);
    v.storage = (size_t)k->nodes[a[0]].i;
    v.offset = (size_t)k->nodes[a[1]].i;
    if ((rc =
             grow(k, &k->views, &k->cap_views, k->n_views + 1, sizeof *k->views, PICKLE_MAX_NODES)))
        return rc;
    k->views[k->n_views] = v;
    return push_new(k, PV_TENSOR, (int64_t)k->n_views++);
}

// REDUCE: "call" an allowlisted global, which here only builds a record.
static int op_reduce(Pk *k) {
    uint32_t args = 0, fn = 0;
    int rc;
    if ((rc = pop(k, &args)) || (rc = pop(k, &fn)) ||
        (rc = expect(k, fn, PV_GLOBAL, "REDUCE's callable")) ||
        (rc = expect(k, args, PV_TUPLE, "REDUCE's arguments")))
        return rc;
    const PvNode *a = &k->nodes[args];
    size_t g = (size_t)k->nodes[fn].i;
    switch (GLOBALS[g].role) {
    case G_ORDERED_DICT: // OrderedDict(): items follow by SETITEMS
        if (a->n) return kg_err(k->err, KG_EFORMAT, "pickle: OrderedDict called with arguments");
        return push_new(k, PV_DICT, 0);
    case G_REBUILD_TENSOR:
        return rebuild_tensor(k, a);
    case G_REBUILD_PARAMETER: // (tensor, requires_grad, hooks[, state]): the tensor itself
        if (a->n < 3 || a->n > 4 || k->nodes[a->items[0]].kind != PV_TENSOR)
            return kg_err(k->err, KG_EFORMAT, "pickle: %s without a tensor", GLOBALS[g].name);
        return push(k, a->items[0]);
    default:
        return kg_err(k->err, KG_EFORMAT,
                      "pickle: torch.%s is called: not how torch.save "
                      "writes a tensor",
                      GLOBALS[g].name);
    }
}

// BUILD sets an object's state: an OrderedDict's (a state dict's _metadata) or a tensor's
// (a parameter's __dict__). Neither matters for the weights, so the state is dropped.
static int op_build(Pk *k) {
    uint32_t state = 0, obj = 0;
    int rc;
    if ((rc = pop(k, &state)) || (rc = peek(k, &obj))) return rc;
    PvKind kind = k->nodes[obj].kind;
    if (kind != PV_DICT && kind != PV_TENSOR)
        return kg_err(k->err, KG_EFORMAT, "pickle: BUILD on %s at byte %zu", kind_name(kind),
                      k->pos);
    return KG_OK;
}

// SETITEM(S) and APPEND(S): the values stack[from .. sp) go into the container below them.
static int fill(Pk *k, size_t from, PvKind want) {
    if (from <= stack_base(k)) return underflow(k);
    uint32_t c = k->stack[from - 1];
    int rc = expect(k, c, want, want == PV_DICT ? "SETITEMS' target" : "APPENDS' target");
    if (!rc && want == PV_DICT && (k->sp - from) % 2)
        rc = kg_err(k->err, KG_EFORMAT, "pickle: SETITEMS with an odd number of values");
    for (size_t i = from; !rc && i < k->sp; i++)
        rc = add_item(k, c, k->stack[i]);
    k->sp = from;
    return rc;
}

static int op_memo_put(Pk *k, size_t idx) {
    uint32_t top = 0;
    int rc = peek(k, &top);
    if (rc) return rc;
    size_t old = k->cap_memo;
    if (idx >= PICKLE_MAX_MEMO)
        return kg_err(k->err, KG_EFORMAT, "pickle: memo index %zu (at most %u)", idx,
                      PICKLE_MAX_MEMO - 1);
    if ((rc = grow(k, &k->memo, &k->cap_memo, idx + 1, sizeof *k->memo, PICKLE_MAX_MEMO)))
        return rc;
    for (size_t i = old; i < k->cap_memo; i++)
        k->memo[i] = NO_NODE;
    k->memo[idx] = top;
    if (idx >= k->memo_next) k->memo_next = idx + 1;
    return KG_OK;
}

static int op_memo_get(Pk *k, size_t idx) {
    if (idx >= k->cap_memo || k->memo[idx] == NO_NODE)
        return kg_err(k->err, KG_EFORMAT, "pickle: memo slot %zu read before it is set", idx);
    return push(k, k->memo[idx]);
}

static int op_string(Pk *k, int len_bytes) {
    int rc = need(k, (size_t)len_bytes);
    if (rc) return rc;
    uint64_t len = le(k->p + k->pos, len_bytes);
    k->pos += (size_t)len_bytes;
    if ((rc = need(k, len))) return rc;
    uint32_t n;
    if ((rc = new_node(k, PV_STR, &n))) return rc;
    k->nodes[n].s = (const char *)k->p + k->pos;
    k->nodes[n].len = (size_t)len;
    k->pos += (size_t)len;
    return push(k, n);
}

// An inline integer of n bytes; signed for BININT (4) and LONG1, unsigned for BININT1/2.
static int op_int(Pk *k, int n, int is_signed) {
    int rc = need(k, (size_t)n);
    if (rc) return rc;
    uint64_t u = n ? le(k->p + k->pos, n) : 0;
    k->pos += (size_t)n;
    if (is_signed && n && n < 8 && (u >> (8 * n - 1) & 1)) u |= ~0ull << (8 * n); // sign-extend
    return push_new(k, PV_INT, (int64_t)u);
}

static int op_long1(Pk *k) {
    int rc = need(k, 1);
    if (rc) return rc;
    int n = k->p[k->pos++];
    if (n > 8)
        return kg_err(k->err, KG_EFORMAT, "pickle: an integer of %d bytes at byte %zu", n, k->pos);
    return op_int(k, n, 1);
}

static int op_tuple_n(Pk *k, size_t n) {
    if (k->sp - stack_base(k) < n) return underflow(k);
    return make_tuple(k, k->sp - n);
}

// One opcode at k->pos - 1 (already consumed). *done is set by STOP.
static int step(Pk *k, int op, uint32_t *result, int *done) {
    int rc;
    size_t from = 0;
    uint32_t a = 0, b = 0, c = 0;
    switch (op) {
    case OP_PROTO:
        if ((rc = need(k, 1))) return rc;
        if (k->p[k->pos++] > 5)
            return kg_err(k->err, KG_EFORMAT, "pickle: protocol %d is newer than 5",
                          k->p[k->pos - 1]);
        return KG_OK;
    case OP_FRAME: // protocol 4's framing: the frame's contents follow inline
        if ((rc = need(k, 8))) return rc;
        k->pos += 8;
        return KG_OK;
    case OP_STOP:
        if ((rc = pop(k, result))) return rc;
        *done = 1;
        return KG_OK;
    case OP_MARK:
        if (k->n_marks >= PICKLE_MAX_MARKS)
            return kg_err(k->err, KG_EFORMAT, "pickle: nested deeper than %d", PICKLE_MAX_MARKS);
        k->marks[k->n_marks++] = k->sp;
        return KG_OK;
    case OP_EMPTY_DICT:
        return push_new(k, PV_DICT, 0);
    case OP_EMPTY_LIST:
        return push_new(k, PV_LIST, 0);
    case OP_EMPTY_TUPLE:
        return push_new(k, PV_TUPLE, 0);
    case OP_TUPLE:
        return (rc = pop_mark(k, &from)) ? rc : make_tuple(k, from);
    case OP_TUPLE1:
    case OP_TUPLE2:
    case OP_TUPLE3:
        return op_tuple_n(k, (size_t)(op - OP_TUPLE1 + 1));
    case OP_BINUNICODE:
        return op_string(k, 4);
    case OP_SHORT_BINUNICODE:
        return op_string(k, 1);
    case OP_BINPUT:
        return (rc = need(k, 1)) ? rc : op_memo_put(k, k->p[k->pos++]);
    case OP_LONG_BINPUT:
        if ((rc = need(k, 4))) return rc;
        k->pos += 4;
        return op_memo_put(k, (size_t)le(k->p + k->pos - 4, 4));
    case OP_MEMOIZE:
        return op_memo_put(k, k->memo_next);
    case OP_BINGET:
        return (rc = need(k, 1)) ? rc : op_memo_get(k, k->p[k->pos++]);
    case OP_LONG_BINGET:
        if ((rc = need(k, 4))) return rc;
        k->pos += 4;
        return op_memo_get(k, (size_t)le(k->p + k->pos - 4, 4));
    case OP_BININT:
        return op_int(k, 4, 1);
    case OP_BININT1:
        return op_int(k, 1, 0);
    case OP_BININT2:
        return op_int(k, 2, 0);
    case OP_LONG1:
        return op_long1(k);
    case OP_NEWTRUE:
    case OP_NEWFALSE:
        return push_new(k, PV_BOOL, op == OP_NEWTRUE);
    case OP_NONE:
        return push_new(k, PV_NONE, 0);
    case OP_GLOBAL:
        return op_global(k);
    case OP_STACK_GLOBAL:
        return op_stack_global(k);
    case OP_REDUCE:
        return op_reduce(k);
    case OP_BUILD:
        return op_build(k);
    case OP_SETITEM:
    case OP_APPEND:
        if ((rc = pop(k, &c)) || (op == OP_SETITEM && (rc = pop(k, &b)))) return rc;
        if ((rc = peek(k, &a))) return rc;
        if ((rc = expect(k, a, op == OP_SETITEM ? PV_DICT : PV_LIST,
                         op == OP_SETITEM ? "SETITEM's target" : "APPEND's target")))
            return rc;
        return (op == OP_SETITEM && (rc = add_item(k, a, b))) ? rc : add_item(k, a, c);
    case OP_SETITEMS:
    case OP_APPENDS:
        return (rc = pop_mark(k, &from)) ? rc
                                         : fill(k, from, op == OP_SETITEMS ? PV_DICT : PV_LIST);
    case OP_BINPERSID:
        return op_persid(k);
    default:
        return kg_err(k->err, KG_EFORMAT,
                      "pickle: opcode 0x%02x ('%c') at byte %zu is not one a state dict uses", op,
                      op >= 32 && op < 127 ? op : '?', k->pos - 1);
    }
}

// The final value: a dict from names to tensors, copied out as d->tensors.
static int collect(Pk *k, uint32_t result, PickleDict *d) {
    const PvNode *dict = &k->nodes[result];
    if (dict->kind != PV_DICT)
        return kg_err(k->err, KG_EFORMAT, "pickle: the file holds %s, not a state dict",
                      kind_name(dict->kind));
    if (dict->n == 0) return kg_err(k->err, KG_EFORMAT, "pickle: the state dict is empty");
    d->tensors = calloc(dict->n / 2, sizeof *d->tensors);
    if (!d->tensors) return kg_err(k->err, KG_ENOMEM, "pickle: out of memory");
    for (size_t i = 0; i + 1 < dict->n; i += 2) {
        const PvNode *key = &k->nodes[dict->items[i]], *val = &k->nodes[dict->items[i + 1]];
        char s[81];
        if (key->kind != PV_STR)
            return kg_err(k->err, KG_EFORMAT, "pickle: a state dict key is %s, not a string",
                          kind_name(key->kind));
        if (val->kind != PV_TENSOR)
            return kg_err(k->err, KG_EFORMAT,
                          "pickle: '%s' is %s, not a tensor: not a state dict (torch.save "
                          "model.state_dict())",
                          show(key->s, key->len, s), kind_name(val->kind));
        PickleTensor *t = &d->tensors[d->n_tensors++];
        *t = k->views[val->i];
        t->name = key->s;
        t->name_len = key->len;
    }
    d->storages = k->storages;
    d->n_storages = k->n_storages;
    k->storages = NULL;
    return KG_OK;
}

int pickle_read_state_dict(PickleDict *d, const void *buf, size_t size, char *err) {
    *d = (PickleDict){0};
    Pk k = {.p = buf, .size = size, .err = err};
    uint32_t result = NO_NODE;
    int rc = KG_OK, done = 0;
    while (!rc && !done) {
        if (k.pos >= k.size) {
            rc = kg_err(err, KG_EFORMAT, "pickle: no STOP: truncated");
            break;
        }
        int op = k.p[k.pos++];
        rc = step(&k, op, &result, &done);
    }
    if (!rc && k.pos != k.size)
        rc = kg_err(err, KG_EFORMAT, "pickle: %zu bytes after STOP", k.size - k.pos);
    if (!rc) rc = collect(&k, result, d);
    for (size_t i = 0; i < k.n_nodes; i++)
        free(k.nodes[i].items);
    free(k.nodes);
    free(k.stack);
    free(k.memo);
    free(k.storages);
    free(k.views);
    if (rc) pickle_free(d);
    return rc;
}

void pickle_free(PickleDict *d) {
    free(d->tensors);
    free(d->storages);
    *d = (PickleDict){0};
}
