// chat_template_render.c — chat_template_render(): a tree walk over the nodes chat_template.c
// parsed (chat_template_ast.h): expressions evaluated into values, whose operations are
// chat_template_ops.c's; statements run. Variables live in one slot per name; a for iteration
// records what it overwrites and puts it back when it ends (Jinja's scoping: a set inside a
// for lasts for that iteration), so lookups are O(1). Bounded: output bytes, and the arena and
// work budget of chat_template_ops.h; recursion is no deeper than the template's nesting,
// which the parser bounds.
#include "chat_template.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/kg.h"
#include "chat_template_ast.h"
#include "chat_template_ops.h"

// s[0..n) onto the prompt, charged as a copy: KG_ERANGE past CHAT_TEMPLATE_MAX_OUTPUT.
static int ct_emit(CtRender *r, const char *s, size_t n, int line) {
    if (n > CHAT_TEMPLATE_MAX_OUTPUT - r->out.len)
        return ct_fail(r->err, KG_ERANGE, line, "the prompt would be longer than %d bytes",
                       CHAT_TEMPLATE_MAX_OUTPUT);
    if (buf_append(&r->out, s, n)) return ct_fail(r->err, KG_ENOMEM, line, "out of memory");
    return ct_work(r, n, line);
}

// --- expressions ---

// The value of the expression node idx.
static int ct_eval(CtRender *r, int idx, CtVal *out) {
    const CtNode *nd = &r->t->nodes[idx];
    int rc = ct_work(r, 0, nd->line), line = nd->line;
    CtVal a, b, args[2];
    if (rc) return rc;
    switch (nd->kind) {
    case CT_NODE_STR:
        return *out = ct_str(nd->text, nd->n_text), KG_OK;
    case CT_NODE_INT:
        return *out = ct_int(CT_VAL_INT, nd->num), KG_OK;
    case CT_NODE_BOOL:
        return *out = ct_int(CT_VAL_BOOL, nd->num), KG_OK;
    case CT_NODE_NONE:
        return *out = ct_int(CT_VAL_NONE, 0), KG_OK;
    case CT_NODE_NAME:
        *out = r->vals[nd->slot];
        if (out->kind == CT_VAL_UNSET) *out = ct_undef(nd->text, nd->n_text, 0);
        return KG_OK;
    case CT_NODE_LIST: {
        size_t n = 0, j = 0;
        for (int i = nd->list.first; i >= 0; i = r->t->nodes[i].next)
            n++;
        CtVal *items;
        if ((rc = ct_list_new(r, n, line, &items))) return rc;
        for (int i = nd->list.first; i >= 0; i = r->t->nodes[i].next)
            if ((rc = ct_eval(r, i, &items[j++]))) return rc;
        return ct_list_done(r, items, n, line, out);
    }
    case CT_NODE_ATTR:
        if ((rc = ct_eval(r, nd->sub.object, &a))) return rc;
        return ct_getattr(r, &a, nd->text, nd->n_text, line, out);
    case CT_NODE_ITEM:
        if ((rc = ct_eval(r, nd->sub.object, &a)) || (rc = ct_eval(r, nd->sub.index, &b)))
            return rc;
        return ct_getitem(r, &a, &b, line, out);
    case CT_NODE_SLICE: {
        CtVal v[3];
        const CtVal *part[3] = {NULL, NULL, NULL};
        const int kids[3] = {nd->sub.index, nd->sub.stop, nd->sub.step};
        if ((rc = ct_eval(r, nd->sub.object, &a))) return rc;
        for (int j = 0; j < 3; j++) {
            if (kids[j] < 0) continue;
            if ((rc = ct_eval(r, kids[j], &v[j]))) return rc;
            part[j] = &v[j];
        }
        return ct_slice(r, &a, part, line, out);
    }
    case CT_NODE_RAISE: {
        const char *s;
        size_t n;
        if ((rc = ct_eval(r, nd->unary.operand, &a)) || (rc = ct_text(r, &a, line, &s, &n)))
            return rc;
        return ct_fail(r->err, KG_EINVAL, 0, "%.*s", (int)(n < KG_ERRLEN ? n : KG_ERRLEN), s);
    }
    case CT_NODE_METHOD:
    case CT_NODE_FILTER: {
        int n_args = 0;
        if ((rc = ct_eval(r, nd->call.receiver, &a))) return rc;
        for (int i = nd->call.args; i >= 0; i = r->t->nodes[i].next) // parse checked the count
            if ((rc = ct_eval(r, i, &args[n_args++]))) return rc;
        if (nd->kind == CT_NODE_METHOD) return ct_method(r, nd, &a, args, out);
        return ct_filter(r, nd, &a, args, n_args, out);
    }
    case CT_NODE_TEST:
        if ((rc = ct_eval(r, nd->call.receiver, &a))) return rc;
        return ct_test(r, nd, &a, out);
    case CT_NODE_NOT:
        if ((rc = ct_eval(r, nd->unary.operand, &a))) return rc;
        return *out = ct_int(CT_VAL_BOOL, !ct_truthy(&a)), KG_OK;
    case CT_NODE_NEG:
        if ((rc = ct_eval(r, nd->unary.operand, &a))) return rc;
        if (a.kind == CT_VAL_UNDEF) return ct_undef_error(r, &a, line);
        if (!ct_num(&a))
            return ct_fail(r->err, KG_EINVAL, line, "bad operand type for unary %c: %s",
                           nd->op ? '+' : '-', ct_type(&a));
        if (!nd->op && a.i == LLONG_MIN)
            return ct_fail(r->err, KG_ERANGE, line, "integer overflow");
        return *out = ct_int(CT_VAL_INT, nd->op ? a.i : -a.i), KG_OK;
    case CT_NODE_AND:
    case CT_NODE_OR: // Python returns the deciding operand, not a bool
        if ((rc = ct_eval(r, nd->pair.lhs, out))) return rc;
        if (ct_truthy(out) == (nd->kind == CT_NODE_OR)) return KG_OK;
        return ct_eval(r, nd->pair.rhs, out);
    case CT_NODE_BIN:
        if ((rc = ct_eval(r, nd->pair.lhs, &a)) || (rc = ct_eval(r, nd->pair.rhs, &b))) return rc;
        return ct_binop(r, nd->op, &a, &b, line, out);
    default: // CT_NODE_COND
        if ((rc = ct_eval(r, nd->branch.cond, &a))) return rc;
        if (ct_truthy(&a)) return ct_eval(r, nd->branch.then, out);
        if (nd->branch.otherwise >= 0) return ct_eval(r, nd->branch.otherwise, out);
        *out = ct_undef("the inline if-expression was false and has no else", 51, 1);
        return KG_OK;
    }
}

// --- statements ---

// Binds sym in the current frame, recording the outer value the first time.
static void ct_bind(CtRender *r, int sym, const CtVal *v) {
    if (r->frame && r->owner[sym] != r->frame) {
        assert(r->n_undo < (size_t)r->t->n_binds);
        r->undo[r->n_undo++] = (CtUndo){sym, r->owner[sym], r->vals[sym]};
        r->owner[sym] = r->frame;
    }
    r->vals[sym] = *v;
}

static int ct_run(CtRender *r, int first);

static int ct_for_run(CtRender *r, const CtNode *nd) {
    CtVal list;
    int rc = ct_eval(r, nd->loop.iter, &list);
    if (rc) return rc;
    if (list.kind == CT_VAL_UNDEF) list = (CtVal){.kind = CT_VAL_LIST}; // Jinja loops zero times
    if (list.kind == CT_VAL_STR || list.kind == CT_VAL_MSG)
        return ct_fail(r->err, KG_EUNSUP, nd->line, "looping over a %s is not supported",
                       ct_type(&list));
    if (list.kind != CT_VAL_LIST)
        return ct_fail(r->err, KG_EINVAL, nd->line, "cannot loop over %s", ct_type(&list));
    if (list.n == 0) return ct_run(r, nd->loop.otherwise);
    CtLoop lp = {list.items, list.n, 0};
    CtVal loop = {.kind = CT_VAL_LOOP, .loop = &lp};
    unsigned outer = r->frame;
    for (; lp.i < lp.n && !rc; lp.i++) {
        size_t mark = r->n_undo;
        if ((rc = ct_work(r, 0, nd->line))) break;
        r->frame = ++r->serial; // a new scope for each iteration
        ct_bind(r, nd->slot, &lp.items[lp.i]);
        ct_bind(r, CT_SYM_LOOP, &loop);
        rc = ct_run(r, nd->loop.body);
        for (; r->n_undo > mark; r->n_undo--) {
            const CtUndo *u = &r->undo[r->n_undo - 1];
            r->vals[u->sym] = u->old, r->owner[u->sym] = u->owner;
        }
        r->frame = outer;
    }
    return rc;
}

static int ct_stmt(CtRender *r, const CtNode *nd) {
    const char *s;
    size_t n;
    CtVal v;
    int rc = ct_work(r, 0, nd->line);
    if (rc) return rc;
    switch (nd->kind) {
    case CT_NODE_TEXT:
        return ct_emit(r, nd->text, nd->n_text, nd->line);
    case CT_NODE_PRINT:
        if ((rc = ct_eval(r, nd->unary.operand, &v)) || (rc = ct_text(r, &v, nd->line, &s, &n)))
            return rc;
        return ct_emit(r, s, n, nd->line);
    case CT_NODE_SET:
        if ((rc = ct_eval(r, nd->unary.operand, &v))) return rc;
        ct_bind(r, nd->slot, &v);
        return KG_OK;
    case CT_NODE_FOR:
        return ct_for_run(r, nd);
    default: // CT_NODE_IF; elif chains in a loop, not by recursion
        for (;;) {
            if ((rc = ct_eval(r, nd->branch.cond, &v))) return rc;
            if (ct_truthy(&v)) return ct_run(r, nd->branch.then);
            if (nd->branch.otherwise < 0) return KG_OK;
            const CtNode *other = &r->t->nodes[nd->branch.otherwise];
            if (other->kind != CT_NODE_IF || !other->op) return ct_run(r, nd->branch.otherwise);
            nd = other;
        }
    }
}

static int ct_run(CtRender *r, int first) {
    for (int i = first, rc; i >= 0; i = r->t->nodes[i].next)
        if ((rc = ct_stmt(r, &r->t->nodes[i]))) return rc;
    return KG_OK;
}

static int ct_render_run(CtRender *r, const ChatMessage *msgs, size_t n, int add_generation_prompt,
                         const char *bos_token, const char *eos_token) {
    const ChatTemplate *t = r->t;
    r->vals = calloc((size_t)t->n_names, sizeof *r->vals);
    r->owner = calloc((size_t)t->n_names, sizeof *r->owner);
    r->undo = malloc((size_t)(t->n_binds + 1) * sizeof *r->undo);
    if (!r->vals || !r->owner || !r->undo) return ct_fail(r->err, KG_ENOMEM, 0, "out of memory");
    CtVal *items;
    int rc = ct_list_new(r, n, 0, &items);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++)
        items[i] = (CtVal){.kind = CT_VAL_MSG, .msg = &msgs[i]};
    rc = ct_list_done(r, items, n, 0, &r->vals[CT_SYM_MESSAGES]);
    const char *tokens[2] = {bos_token, eos_token};
    for (int j = 0; j < 2; j++) {
        const CtName *name = &t->names[CT_SYM_BOS + j];
        r->vals[CT_SYM_BOS + j] =
            tokens[j] ? ct_str(tokens[j], strlen(tokens[j])) : ct_undef(name->s, name->n, 0);
    }
    r->vals[CT_SYM_ADD_GEN] = ct_int(CT_VAL_BOOL, add_generation_prompt != 0);
    r->vals[CT_SYM_TOOLS] = r->vals[CT_SYM_DOCUMENTS] =
        ct_int(CT_VAL_NONE, 0); // as transformers passes
    if (rc || (rc = ct_run(r, t->root))) return rc;
    return ct_emit(r, "", 0, 0); // the prompt exists even when empty; one step, as every emit
}

int chat_template_render(const ChatTemplate *t, const ChatMessage *msgs, size_t n,
                         int add_generation_prompt, const char *bos_token, const char *eos_token,
                         char **out, size_t *out_len, char *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || (n && !msgs)) return kg_err(err, KG_EINVAL, "chat template: no template or messages");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role)
            return kg_err(err, KG_EINVAL, "chat template: message %zu has no role", i);
    CtRender r = {.t = t, .err = err};
    int rc = ct_render_run(&r, msgs, n, add_generation_prompt, bos_token, eos_token);
    if (rc == KG_OK) *out = buf_take(&r.out, out_len); // never NULL: ct_emit allocated it
    ct_arena_free(&r);
    buf_free(&r.out);
    free(r.vals);
    free(r.owner);
    free(r.undo);
    return rc;
}
