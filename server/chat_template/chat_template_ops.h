// chat_template_ops.h — a render's values and the operations on them (chat_template_ops.c),
// for the tree walk of chat_template_render.c: comparisons, arithmetic, subscripts, string
// methods, filters and tests, as Jinja computes them. Values point into the messages, the
// template or the render's arena; every operation charges the render's work budget and takes
// what it builds from its arena, so both bound any template. Private to kgchattemplate.
//
// Each function returns KG_OK, or a KG_* code with "chat template: what (line N)" in r->err:
// KG_EINVAL where jinja2 raises (an undefined value used, int + str), KG_EUNSUP for what the
// subset lacks (chat_template.h), KG_ERANGE over the memory or work budget, KG_ENOMEM. Inputs
// are left alone; a CtRender is one render's, used by one thread.
#ifndef CHAT_TEMPLATE_OPS_H
#define CHAT_TEMPLATE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/kg.h"
#include "chat_template_ast.h"

#define CT_MAX_MEMORY (16 << 20) // arena bytes per render (strings and lists built)
#define CT_MAX_WORK   (1 << 22)  // steps per render: any render stops within ~0.1 s (below)
// Bytes one step pays for, by how fast an operation goes through them, so that a step costs
// about what a node or loop iteration does (~17 ns). Measured on 2 EPYC cores, the slowest
// input of each: memmem ~10 ns a byte (a 3-byte needle over a run of its first byte; glibc's
// is linear, with that constant), a byte loop ~1.4 ns. The worst render of each kind (256
// messages of 4 KB, two nested loops) stops after 20-95 ms; charged 1 step per 64 bytes for
// everything, an `in` ran for 1.2 s before its budget was spent.
#define CT_BYTES_COPIED   64 // memcpy, memcmp, strlen
#define CT_BYTES_LOOPED   16 // a byte-at-a-time loop: length, upper, lower, strip()
#define CT_BYTES_SEARCHED 1  // memmem (in); strip(chars) pays per byte of s and of chars

// --- values ---

enum {
    CT_VAL_UNSET, // a variable no one bound (looked up: CT_VAL_UNDEF with its name)
    CT_VAL_UNDEF,
    CT_VAL_NONE,
    CT_VAL_BOOL,
    CT_VAL_INT,
    CT_VAL_STR,
    CT_VAL_LIST,
    CT_VAL_MSG,
    CT_VAL_LOOP
};

typedef struct CtLoop CtLoop;

typedef struct CtVal {
    uint8_t kind;
    uint8_t depth; // CT_VAL_LIST: 1 + the deepest list inside (at most CHAT_TEMPLATE_MAX_DEPTH)
    uint8_t plain; // CT_VAL_UNDEF: s is the message itself, not the undefined name
    size_t n;      // CT_VAL_STR, CT_VAL_UNDEF: bytes of s; CT_VAL_LIST: items
    union {
        long long i;               // CT_VAL_BOOL, CT_VAL_INT
        const char *s;             // CT_VAL_STR, CT_VAL_UNDEF
        const struct CtVal *items; // CT_VAL_LIST
        const ChatMessage *msg;    // CT_VAL_MSG
        const CtLoop *loop;        // CT_VAL_LOOP
    };
} CtVal;

struct CtLoop { // the current for loop, on the C stack of ct_for_run
    const CtVal *items;
    size_t n, i;
};

// An undefined value: name[0..n) the name looked up, or (plain) the message to raise.
static inline CtVal ct_undef(const char *name, size_t n, int plain) {
    return (CtVal){.kind = CT_VAL_UNDEF, .plain = (uint8_t)plain, .n = n, .s = name};
}

static inline CtVal ct_str(const char *s, size_t n) {
    return (CtVal){.kind = CT_VAL_STR, .n = n, .s = s};
}

// kind CT_VAL_INT, CT_VAL_BOOL (i 0 or 1) or CT_VAL_NONE (i 0)
static inline CtVal ct_int(int kind, long long i) { return (CtVal){.kind = (uint8_t)kind, .i = i}; }

// Python's name of v's type, for messages ("str", "dict", ...).
static inline const char *ct_type(const CtVal *v) {
    static const char *const NAMES[] = {"undefined", "undefined", "none", "bool", "int",
                                        "str",       "list",      "dict", "loop"};
    return NAMES[v->kind];
}

static inline int ct_num(const CtVal *v) { return v->kind == CT_VAL_INT || v->kind == CT_VAL_BOOL; }

// bool(v) as Python has it; undefined is false.
static inline int ct_truthy(const CtVal *v) {
    switch (v->kind) {
    case CT_VAL_BOOL:
    case CT_VAL_INT:
        return v->i != 0;
    case CT_VAL_STR:
    case CT_VAL_LIST:
        return v->n != 0;
    case CT_VAL_MSG:
    case CT_VAL_LOOP:
        return 1;
    default:
        return 0;
    }
}

// --- render state ---

typedef struct CtChunk CtChunk; // a block of the arena (chat_template_ops.c)

typedef struct {
    int sym;
    unsigned owner;
    CtVal old;
} CtUndo;

// One render. The operations here use only err, the arena (mem, mem_used) and work; the rest
// is the tree walk's (chat_template_render.c). Zero-initialize, set t and err.
typedef struct {
    const ChatTemplate *t;
    CtVal *vals;     // (n_names) every variable's current value; CT_VAL_UNSET: none
    unsigned *owner; // (n_names) the frame that bound it; 0: the top level
    CtUndo *undo;    // (n_binds) what for iterations overwrote, put back when they end
    size_t n_undo;
    unsigned frame, serial; // the current for iteration (0: top level); the last one given
    KgBuf out;              // the prompt so far (at most CHAT_TEMPLATE_MAX_OUTPUT bytes)
    CtChunk *mem;           // the arena: strings and lists built on the way
    size_t mem_used, work;  // arena bytes taken; work steps spent
    char *err;
} CtRender;

// Frees r's arena (r->mem NULL after): every value built in it is gone.
void ct_arena_free(CtRender *r);

// Charges one step plus bytes at per bytes a step (CT_BYTES_*): the budget bounds time, not
// only memory, whatever mix of operations a template uses. Inline: every node the tree walk
// evaluates pays a step.
static inline int ct_charge(CtRender *r, size_t bytes, size_t per, int line) {
    r->work += 1 + bytes / per;
    if (r->work <= CT_MAX_WORK) return KG_OK;
    return ct_fail(r->err, KG_ERANGE, line, "rendering takes more than %d steps", CT_MAX_WORK);
}

// One step plus bytes copied (memcpy/memcmp speed): what most operations and every node pay.
static inline int ct_work(CtRender *r, size_t bytes, int line) {
    return ct_charge(r, bytes, CT_BYTES_COPIED, line);
}

// The error an undefined v gives when used: KG_EINVAL, its message or "'name' is undefined".
int ct_undef_error(CtRender *r, const CtVal *v, int line);

// v as Jinja turns it into text ({{ v }}, ~, the string filters): str(v); "" when undefined;
// KG_EUNSUP for a list, message or loop. *s points into v, the template or the arena.
int ct_text(CtRender *r, const CtVal *v, int line, const char **s, size_t *n);

// A list of n items: ct_list_new gives the arena's room for them (*items), to fill; then
// ct_list_done makes *out of them (KG_ERANGE when lists nest deeper than the limit).
int ct_list_new(CtRender *r, size_t n, int line, CtVal **items);
int ct_list_done(CtRender *r, CtVal *items, size_t n, int line, CtVal *out);

// a op b, op a CT_BIN_*: a bool for the comparisons and in; ~ joins text; + - * // % as
// Python has them on 64-bit integers (overflow: KG_ERANGE), + and * on strs and lists.
int ct_binop(CtRender *r, int op, const CtVal *a, const CtVal *b, int line, CtVal *out);

// obj.name (obj['name']): a message's role or content, the loop's attributes; else undefined.
int ct_getattr(CtRender *r, const CtVal *obj, const char *name, size_t n, int line, CtVal *out);

// obj[key]: a list's item (negative from the end; out of range undefined), or ct_getattr.
int ct_getitem(CtRender *r, const CtVal *obj, const CtVal *key, int line, CtVal *out);

// list[start:stop:step] as Python slices (the parts left out NULL).
int ct_slice(CtRender *r, const CtVal *obj, const CtVal *part[3], int line, CtVal *out);

// The method, filter or test node nd (CT_NODE_METHOD, _FILTER, _TEST: nd->op says which) on
// v, with args[0..) as the parser counted them (n_args for a filter).
int ct_method(CtRender *r, const CtNode *nd, const CtVal *v, const CtVal *args, CtVal *out);
int ct_filter(CtRender *r, const CtNode *nd, const CtVal *v, const CtVal *args, int n_args,
              CtVal *out);
int ct_test(CtRender *r, const CtNode *nd, const CtVal *v, CtVal *out);

#endif
