// chat_template.c — the parser of chat templates (issue 15; the subset, the limits and the
// defaults are described in chat_template.h): a recursive-descent parser with Jinja's grammar
// and precedence, over the tokens chat_template_lex.c reads, into the nodes of
// chat_template_ast.h, which chat_template_render.c walks. Also the source's normalization
// (\r\n and \r read as \n, one trailing newline dropped) and the default templates.
#include "chat_template.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "chat_template_ast.h"
#include "chat_template_lex.h"

#define CT_MAX_NODES (1 << 16) // parts of a template: statements and expression nodes

// The names every render defines, in CT_SYM_* order.
static const char *const CT_GLOBALS[] = {
    "messages", "bos_token", "eos_token", "add_generation_prompt", "tools", "documents", "loop"};

// The filters, string methods and tests we have, with the arguments each takes.
typedef struct {
    const char *name;
    uint8_t id, min_args, max_args;
} CtFunc;

static const CtFunc CT_FILTERS[] = {
    {"trim", CT_FILTER_TRIM, 0, 1},       {"length", CT_FILTER_LENGTH, 0, 0},
    {"count", CT_FILTER_LENGTH, 0, 0},    {"upper", CT_FILTER_UPPER, 0, 0},
    {"lower", CT_FILTER_LOWER, 0, 0},     {"capitalize", CT_FILTER_CAPITALIZE, 0, 0},
    {"default", CT_FILTER_DEFAULT, 0, 2}, {"d", CT_FILTER_DEFAULT, 0, 2},
    {"string", CT_FILTER_STRING, 0, 0},   {"first", CT_FILTER_FIRST, 0, 0},
    {"last", CT_FILTER_LAST, 0, 0},       {"join", CT_FILTER_JOIN, 0, 1},
};

static const CtFunc CT_METHODS[] = {
    {"strip", CT_METHOD_STRIP, 0, 1},           {"lstrip", CT_METHOD_LSTRIP, 0, 1},
    {"rstrip", CT_METHOD_RSTRIP, 0, 1},         {"upper", CT_METHOD_UPPER, 0, 0},
    {"lower", CT_METHOD_LOWER, 0, 0},           {"capitalize", CT_METHOD_CAPITALIZE, 0, 0},
    {"startswith", CT_METHOD_STARTSWITH, 1, 1}, {"endswith", CT_METHOD_ENDSWITH, 1, 1},
};

static const CtFunc CT_TESTS[] = {
    {"defined", CT_TEST_DEFINED, 0, 0}, {"undefined", CT_TEST_UNDEFINED, 0, 0},
    {"none", CT_TEST_NONE, 0, 0},       {"string", CT_TEST_STRING, 0, 0},
    {"number", CT_TEST_NUMBER, 0, 0},   {"integer", CT_TEST_INTEGER, 0, 0},
    {"boolean", CT_TEST_BOOLEAN, 0, 0}, {"true", CT_TEST_TRUE, 0, 0},
    {"false", CT_TEST_FALSE, 0, 0},     {"odd", CT_TEST_ODD, 0, 0},
    {"even", CT_TEST_EVEN, 0, 0},
};

static const CtFunc *ct_find(const CtFunc *tab, size_t n, const char *s, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(tab[i].name) == len && !memcmp(tab[i].name, s, len)) return &tab[i];
    return NULL;
}

// --- parser: expressions ---

#define NODE(p, i) (&(p)->t->nodes[i])

static int ct_new(CtParser *p, int kind, int line, int *out) {
    ChatTemplate *t = p->t;
    if (t->n_nodes >= CT_MAX_NODES)
        return ct_fail(p->err, KG_ERANGE, line, "the template has more than %d parts",
                       CT_MAX_NODES);
    if (KG_GROW(t->nodes, &t->cap_nodes, (size_t)t->n_nodes + 1, NULL))
        return ct_fail(p->err, KG_ENOMEM, 0, "out of memory");
    *out = t->n_nodes++;
    t->nodes[*out] =
        (CtNode){.kind = (uint8_t)kind, .line = line, .kids = {-1, -1, -1, -1}, .next = -1};
    return KG_OK;
}

// The deepest node of the chain first, first->next, ...
static int ct_chain_depth(const ChatTemplate *t, int first) {
    int d = 0;
    for (int i = first; i >= 0; i = t->nodes[i].next)
        if (t->nodes[i].depth > d) d = t->nodes[i].depth;
    return d;
}

// An expression node with children (chains for lists and arguments), its depth checked;
// k0..k3 land in kids[] in order, which the kind's view names (CtNode).
static int ct_expr_node(CtParser *p, int kind, int op, int line, int k0, int k1, int k2, int k3,
                        int *out) {
    int rc = ct_new(p, kind, line, out);
    if (rc) return rc;
    CtNode *nd = NODE(p, *out);
    const int kids[4] = {k0, k1, k2, k3};
    int depth = 0;
    nd->op = (uint8_t)op;
    for (int j = 0; j < 4; j++) {
        nd->kids[j] = kids[j];
        int kd = ct_chain_depth(p->t, kids[j]);
        if (kd > depth) depth = kd;
    }
    if (depth + 1 > CHAT_TEMPLATE_MAX_DEPTH)
        return ct_fail(p->err, KG_ERANGE, line, "an expression is nested deeper than %d levels",
                       CHAT_TEMPLATE_MAX_DEPTH);
    NODE(p, *out)->depth = (uint8_t)(depth + 1);
    return KG_OK;
}

static int ct_intern(CtParser *p, const char *s, size_t n, int *sym) {
    ChatTemplate *t = p->t;
    *sym = 0;
    for (int i = 0; i < t->n_names; i++)
        if (t->names[i].n == n && !memcmp(t->names[i].s, s, n)) return *sym = i, KG_OK;
    if (t->n_names == CT_MAX_NAMES)
        return ct_fail(p->err, KG_ERANGE, p->tline, "more than %d variable names", CT_MAX_NAMES);
    t->names[t->n_names] = (CtName){s, n};
    *sym = t->n_names++;
    return KG_OK;
}

static int ct_expr(CtParser *p, int *out);
static int ct_or(CtParser *p, int *out);
static int ct_unary(CtParser *p, int *out, int with_filters);

// (arg, arg, ...) after the '(' into a chain; *count of them.
static int ct_args(CtParser *p, int *first, int *count) {
    int rc, last = -1, item;
    *first = -1, *count = 0;
    while (!ct_is_op(p, ')')) {
        if ((rc = ct_expr(p, &item))) return rc;
        if (ct_is_op(p, '='))
            return ct_fail(p->err, KG_EUNSUP, p->tline, "keyword arguments are not supported");
        if (last < 0)
            *first = item;
        else
            NODE(p, last)->next = item;
        last = item, ++*count;
        if (!ct_is_op(p, ',')) break;
        if ((rc = ct_next(p))) return rc;
    }
    return ct_expect_op(p, ')');
}

static int ct_check_args(CtParser *p, const CtFunc *f, const char *what, int count, int line) {
    if (count >= f->min_args && count <= f->max_args) return KG_OK;
    if (f->min_args == f->max_args)
        return ct_fail(p->err, KG_EFORMAT, line, "the %s '%s' takes %d argument%s, not %d", what,
                       f->name, f->min_args, f->min_args == 1 ? "" : "s", count);
    return ct_fail(p->err, KG_EFORMAT, line, "the %s '%s' takes %d to %d arguments, not %d", what,
                   f->name, f->min_args, f->max_args, count);
}

// '(' after an expression: raise_exception(msg) or a string method.
static int ct_call(CtParser *p, int *node) {
    const CtNode callee = *NODE(p, *node);
    int line = p->tline, args, count, rc;
    if (callee.kind == CT_NODE_NAME && callee.n_text == 15 &&
        !memcmp(callee.text, "raise_exception", 15)) {
        if ((rc = ct_next(p)) || (rc = ct_args(p, &args, &count))) return rc;
        if (count != 1)
            return ct_fail(p->err, KG_EFORMAT, line, "raise_exception takes one argument");
        return ct_expr_node(p, CT_NODE_RAISE, 0, line, args, -1, -1, -1, node);
    }
    if (callee.kind == CT_NODE_NAME)
        return ct_fail(p->err, KG_EUNSUP, line, "the function '%.*s' is not supported",
                       (int)callee.n_text, callee.text);
    if (callee.kind != CT_NODE_ATTR)
        return ct_fail(p->err, KG_EUNSUP, line, "calling this value is not supported");
    const CtFunc *m =
        ct_find(CT_METHODS, sizeof CT_METHODS / sizeof *CT_METHODS, callee.text, callee.n_text);
    if (!m)
        return ct_fail(p->err, KG_EUNSUP, line, "the method '%.*s' is not supported",
                       (int)callee.n_text, callee.text);
    if ((rc = ct_next(p)) || (rc = ct_args(p, &args, &count)) ||
        (rc = ct_check_args(p, m, "method", count, line)))
        return rc;
    if ((rc = ct_expr_node(p, CT_NODE_METHOD, m->id, line, callee.sub.object, args, -1, -1, node)))
        return rc;
    NODE(p, *node)->text = callee.text, NODE(p, *node)->n_text = callee.n_text; // for messages
    return KG_OK;
}

// [index] or [start:stop:step] after the '['.
static int ct_subscript(CtParser *p, int *node, int line) {
    int rc, part[3] = {-1, -1, -1}, slice = 0;
    for (int j = 0; j < 3; j++) {
        if (!ct_is_op(p, ':') && !ct_is_op(p, ']') && (rc = ct_expr(p, &part[j]))) return rc;
        if (!ct_is_op(p, ':') || j == 2) break;
        slice = 1;
        if ((rc = ct_next(p))) return rc;
    }
    if (ct_is_op(p, ',') || (!slice && part[0] < 0)) // x[a, b] and x[] index by a tuple
        return ct_fail(p->err, KG_EUNSUP, line, "tuple subscripts are not supported");
    if ((rc = ct_expect_op(p, ']'))) return rc;
    if (!slice) return ct_expr_node(p, CT_NODE_ITEM, 0, line, *node, part[0], -1, -1, node);
    return ct_expr_node(p, CT_NODE_SLICE, 0, line, *node, part[0], part[1], part[2], node);
}

static int ct_postfix(CtParser *p, int *node) {
    for (int rc;;) {
        int line = p->tline;
        if (ct_is_op(p, '.')) {
            if ((rc = ct_next(p))) return rc;
            if (p->tok == CT_TK_INT) { // x.0 is x[0]
                int index;
                if ((rc = ct_expr_node(p, CT_NODE_INT, 0, line, -1, -1, -1, -1, &index))) return rc;
                NODE(p, index)->num = p->ti;
                if ((rc = ct_expr_node(p, CT_NODE_ITEM, 0, line, *node, index, -1, -1, node)))
                    return rc;
            } else if (p->tok == CT_TK_NAME) {
                if ((rc = ct_expr_node(p, CT_NODE_ATTR, 0, line, *node, -1, -1, -1, node)))
                    return rc;
                NODE(p, *node)->text = p->ts, NODE(p, *node)->n_text = p->tn;
            } else {
                return ct_unexpected(p);
            }
            if ((rc = ct_next(p))) return rc;
        } else if (ct_is_op(p, '[')) {
            if ((rc = ct_next(p)) || (rc = ct_subscript(p, node, line))) return rc;
        } else if (ct_is_op(p, '(')) {
            if ((rc = ct_call(p, node))) return rc;
        } else {
            return KG_OK;
        }
    }
}

// The name of a filter or test (Jinja allows dotted ones), looked up in tab; the token after.
static int ct_func_name(CtParser *p, const CtFunc *tab, size_t n, const char *what,
                        const CtFunc **f) {
    if (p->tok != CT_TK_NAME) return ct_unexpected(p);
    const char *name = p->ts;
    size_t len = p->tn;
    int rc, line = p->tline;
    for (;;) {
        len = (size_t)(p->ts + p->tn - name);
        if ((rc = ct_next(p))) return rc;
        if (!ct_is_op(p, '.')) break;
        if ((rc = ct_next(p))) return rc;
        if (p->tok != CT_TK_NAME) return ct_unexpected(p);
    }
    if ((*f = ct_find(tab, n, name, len))) return KG_OK;
    return ct_fail(p->err, KG_EUNSUP, line, "the %s '%.*s' is not supported", what,
                   (int)(len > 40 ? 40 : len), name);
}

// |filter(args) and is [not] test, in any order.
static int ct_filters(CtParser *p, int *node) {
    for (int rc;;) {
        int line = p->tline;
        if (ct_is_op(p, '|')) {
            const CtFunc *f;
            int args = -1, count = 0;
            if ((rc = ct_next(p)) ||
                (rc = ct_func_name(p, CT_FILTERS, sizeof CT_FILTERS / sizeof *CT_FILTERS, "filter",
                                   &f)))
                return rc;
            if (ct_is_op(p, '(') && ((rc = ct_next(p)) || (rc = ct_args(p, &args, &count))))
                return rc;
            if ((rc = ct_check_args(p, f, "filter", count, line)) ||
                (rc = ct_expr_node(p, CT_NODE_FILTER, f->id, line, *node, args, -1, -1, node)))
                return rc;
        } else if (ct_is_name(p, "is")) {
            if ((rc = ct_next(p))) return rc;
            int negate = ct_is_name(p, "not");
            const CtFunc *f;
            if ((negate && (rc = ct_next(p))) ||
                (rc = ct_func_name(p, CT_TESTS, sizeof CT_TESTS / sizeof *CT_TESTS, "test", &f)))
                return rc;
            if (ct_is_name(p, "is"))
                return ct_fail(p->err, KG_EFORMAT, line, "tests cannot be chained with is");
            // what Jinja would read as the test's argument: (x), or x is odd 'a' [1] if ...
            int arg = p->tok == CT_TK_STR || p->tok == CT_TK_INT || ct_is_op(p, '(') ||
                      ct_is_op(p, '[') || ct_is_op(p, '{') ||
                      (p->tok == CT_TK_NAME && !ct_is_name(p, "else") && !ct_is_name(p, "or") &&
                       !ct_is_name(p, "and"));
            if (arg)
                return ct_fail(p->err, KG_EUNSUP, line, "the test '%s' takes no arguments",
                               f->name);
            if ((rc = ct_expr_node(p, CT_NODE_TEST, f->id, line, *node, -1, -1, -1, node)))
                return rc;
            if (negate && (rc = ct_expr_node(p, CT_NODE_NOT, 0, line, *node, -1, -1, -1, node)))
                return rc;
        } else if (ct_is_op(p, '(')) {
            return ct_fail(p->err, KG_EUNSUP, line, "calling this value is not supported");
        } else {
            return KG_OK;
        }
    }
}

static int ct_primary(CtParser *p, int *out) {
    int rc, line = p->tline;
    if (p->tok == CT_TK_NAME) {
        static const char *const CONSTS[] = {"true", "True", "false", "False", "none", "None"};
        for (int j = 0; j < 6; j++)
            if (ct_is_name(p, CONSTS[j])) {
                if ((rc = ct_expr_node(p, j < 4 ? CT_NODE_BOOL : CT_NODE_NONE, 0, line, -1, -1, -1,
                                       -1, out)))
                    return rc;
                NODE(p, *out)->num = j < 2;
                return ct_next(p);
            }
        int sym;
        if ((rc = ct_intern(p, p->ts, p->tn, &sym)) ||
            (rc = ct_expr_node(p, CT_NODE_NAME, 0, line, -1, -1, -1, -1, out)))
            return rc;
        NODE(p, *out)->slot = sym, NODE(p, *out)->text = p->ts, NODE(p, *out)->n_text = p->tn;
        return ct_next(p);
    }
    if (p->tok == CT_TK_STR) { // 'a' 'b' is 'ab': their bytes lie side by side in t->lits
        const char *s = p->ts;
        size_t n = 0;
        while (p->tok == CT_TK_STR) {
            assert(p->ts == s + n);
            n += p->tn;
            if ((rc = ct_next(p))) return rc;
        }
        if ((rc = ct_expr_node(p, CT_NODE_STR, 0, line, -1, -1, -1, -1, out))) return rc;
        NODE(p, *out)->text = s, NODE(p, *out)->n_text = n;
        return KG_OK;
    }
    if (p->tok == CT_TK_INT) {
        if ((rc = ct_expr_node(p, CT_NODE_INT, 0, line, -1, -1, -1, -1, out))) return rc;
        NODE(p, *out)->num = p->ti;
        return ct_next(p);
    }
    if (ct_is_op(p, '(')) {
        if ((rc = ct_next(p)) || (rc = ct_expr(p, out))) return rc;
        if (ct_is_op(p, ',')) return ct_fail(p->err, KG_EUNSUP, line, "tuples are not supported");
        return ct_expect_op(p, ')');
    }
    if (ct_is_op(p, '[')) {
        int first, last = -1, item;
        if ((rc = ct_next(p))) return rc;
        for (first = -1; !ct_is_op(p, ']');) {
            if ((rc = ct_expr(p, &item))) return rc;
            if (last < 0)
                first = item;
            else
                NODE(p, last)->next = item;
            last = item;
            if (!ct_is_op(p, ',')) break;
            if ((rc = ct_next(p))) return rc;
        }
        if ((rc = ct_expect_op(p, ']'))) return rc;
        return ct_expr_node(p, CT_NODE_LIST, 0, line, first, -1, -1, -1, out);
    }
    if (ct_is_op(p, '{'))
        return ct_fail(p->err, KG_EUNSUP, line, "dict literals are not supported");
    return ct_unexpected(p);
}

// -x, +x, then x.attr[i](args), then |filters and tests
static int ct_unary(CtParser *p, int *out, int with_filters) {
    int rc, line = p->tline;
    if (ct_is_op(p, '-') || ct_is_op(p, '+')) {
        int plus = p->op == '+';
        if (++p->edepth > CHAT_TEMPLATE_MAX_DEPTH)
            return ct_fail(p->err, KG_ERANGE, line, "an expression is nested deeper than %d levels",
                           CHAT_TEMPLATE_MAX_DEPTH);
        if ((rc = ct_next(p)) || (rc = ct_unary(p, out, 0)) ||
            (rc = ct_expr_node(p, CT_NODE_NEG, plus, line, *out, -1, -1, -1, out)))
            return rc;
        p->edepth--;
    } else if ((rc = ct_primary(p, out))) {
        return rc;
    }
    if ((rc = ct_postfix(p, out))) return rc;
    return with_filters ? ct_filters(p, out) : KG_OK;
}

static int ct_binary(CtParser *p, int op, int line, int lhs, int rhs, int *out) {
    return ct_expr_node(p, CT_NODE_BIN, op, line, lhs, rhs, -1, -1, out);
}

// * // %, and a refusal of / (a float) and **
static int ct_math2(CtParser *p, int *out) {
    int rc = ct_unary(p, out, 1), rhs;
    while (!rc) {
        if (ct_is_op(p, '/') || ct_is_op(p, CT_OP_POW))
            return ct_fail(p->err, KG_EUNSUP, p->tline, "the operator '%s' is not supported",
                           p->op == '/' ? "/" : "**");
        int line = p->tline, op = ct_is_op(p, '*')              ? CT_BIN_MUL
                                  : ct_is_op(p, '%')            ? CT_BIN_MOD
                                  : ct_is_op(p, CT_OP_FLOORDIV) ? CT_BIN_FLOORDIV
                                                                : -1;
        if (op < 0) break;
        if ((rc = ct_next(p)) || (rc = ct_unary(p, &rhs, 1))) break;
        rc = ct_binary(p, op, line, *out, rhs, out);
    }
    return rc;
}

static int ct_concat(CtParser *p, int *out) {
    int rc = ct_math2(p, out), rhs;
    while (!rc && ct_is_op(p, '~')) {
        int line = p->tline;
        if ((rc = ct_next(p)) || (rc = ct_math2(p, &rhs))) break;
        rc = ct_binary(p, CT_BIN_CONCAT, line, *out, rhs, out);
    }
    return rc;
}

static int ct_math1(CtParser *p, int *out) {
    int rc = ct_concat(p, out), rhs;
    while (!rc && (ct_is_op(p, '+') || ct_is_op(p, '-'))) {
        int line = p->tline, op = p->op == '+' ? CT_BIN_ADD : CT_BIN_SUB;
        if ((rc = ct_next(p)) || (rc = ct_concat(p, &rhs))) break;
        rc = ct_binary(p, op, line, *out, rhs, out);
    }
    return rc;
}

// The comparison operator at the current token, or -1.
static int ct_compare_op(const CtParser *p) {
    if (p->tok == CT_TK_OP) {
        switch (p->op) {
        case CT_OP_EQ:
            return CT_BIN_EQ;
        case CT_OP_NE:
            return CT_BIN_NE;
        case '<':
            return CT_BIN_LT;
        case CT_OP_LE:
            return CT_BIN_LE;
        case '>':
            return CT_BIN_GT;
        case CT_OP_GE:
            return CT_BIN_GE;
        }
    }
    return ct_is_name(p, "in") ? CT_BIN_IN : ct_is_name(p, "not") ? CT_BIN_NOTIN : -1;
}

static int ct_compare(CtParser *p, int *out) {
    int rc = ct_math1(p, out), op = ct_compare_op(p), line = p->tline, rhs;
    if (rc || op < 0) return rc;
    if ((rc = ct_next(p))) return rc;
    if (op == CT_BIN_NOTIN && (!ct_is_name(p, "in") || (rc = ct_next(p))))
        return rc ? rc : ct_unexpected(p);
    if ((rc = ct_math1(p, &rhs)) || (rc = ct_binary(p, op, line, *out, rhs, out))) return rc;
    if (ct_compare_op(p) >= 0)
        return ct_fail(p->err, KG_EUNSUP, p->tline,
                       "chained comparisons (a < b < c) are not supported");
    return KG_OK;
}

static int ct_not(CtParser *p, int *out) {
    if (!ct_is_name(p, "not")) return ct_compare(p, out);
    int rc, line = p->tline;
    if (++p->edepth > CHAT_TEMPLATE_MAX_DEPTH)
        return ct_fail(p->err, KG_ERANGE, line, "an expression is nested deeper than %d levels",
                       CHAT_TEMPLATE_MAX_DEPTH);
    if ((rc = ct_next(p)) || (rc = ct_not(p, out))) return rc;
    p->edepth--;
    return ct_expr_node(p, CT_NODE_NOT, 0, line, *out, -1, -1, -1, out);
}

// operand (kw operand)*, left-associative: kind CT_NODE_AND or CT_NODE_OR
static int ct_logic(CtParser *p, const char *kw, int kind, int (*operand)(CtParser *, int *),
                    int *out) {
    int rc = operand(p, out), rhs;
    while (!rc && ct_is_name(p, kw)) {
        int line = p->tline;
        if ((rc = ct_next(p)) || (rc = operand(p, &rhs))) break;
        rc = ct_expr_node(p, kind, 0, line, *out, rhs, -1, -1, out);
    }
    return rc;
}

static int ct_and(CtParser *p, int *out) { return ct_logic(p, "and", CT_NODE_AND, ct_not, out); }
static int ct_or(CtParser *p, int *out) { return ct_logic(p, "or", CT_NODE_OR, ct_and, out); }

// x if cond else y (else optional: undefined), Jinja's top expression level
static int ct_expr(CtParser *p, int *out) {
    if (++p->edepth > CHAT_TEMPLATE_MAX_DEPTH)
        return ct_fail(p->err, KG_ERANGE, p->tline, "an expression is nested deeper than %d levels",
                       CHAT_TEMPLATE_MAX_DEPTH);
    int rc = ct_or(p, out);
    while (!rc && ct_is_name(p, "if")) {
        int line = p->tline, cond, other = -1;
        if ((rc = ct_next(p)) || (rc = ct_or(p, &cond))) break;
        if (ct_is_name(p, "else") && ((rc = ct_next(p)) || (rc = ct_expr(p, &other)))) break;
        rc = ct_expr_node(p, CT_NODE_COND, 0, line, cond, *out, other, -1, out);
    }
    p->edepth--;
    return rc;
}

// --- parser: statements ---

static int ct_body(CtParser *p, const char *const *stops, int *first, int *stop);

static const char *const CT_STOP_IF[] = {"elif", "else", "endif", NULL};
static const char *const CT_STOP_ENDIF[] = {"endif", NULL};
static const char *const CT_STOP_FOR[] = {"else", "endfor", NULL};
static const char *const CT_STOP_ENDFOR[] = {"endfor", NULL};

static int ct_open_block(CtParser *p) {
    if (++p->depth <= CHAT_TEMPLATE_MAX_DEPTH) return KG_OK;
    return ct_fail(p->err, KG_ERANGE, p->tag_line, "blocks are nested deeper than %d levels",
                   CHAT_TEMPLATE_MAX_DEPTH);
}

// The body of a block up to one of stops (*stop its index; the tag's name read), or a
// refusal naming the block's end tag when the source ends first.
static int ct_block_body(CtParser *p, const char *const *stops, const char *block, int line,
                         int *first, int *stop) {
    int rc = ct_body(p, stops, first, stop);
    if (rc || *stop >= 0) return rc;
    return ct_fail(p->err, KG_EFORMAT, 0, "missing {%% end%s %%} for the %s on line %d", block,
                   block, line);
}

// if cond %} ... {% elif cond %} ... {% else %} ... {% endif %}; elif chains stay flat: each
// elif is the else of the one before, marked op 1.
static int ct_if(CtParser *p, int *out) {
    int rc, node = -1, prev = -1, stop = 0, line = p->tag_line, cond, body, other;
    if ((rc = ct_open_block(p))) return rc;
    while (stop == 0) { // the if, then each elif
        int at = p->tag_line;
        if ((rc = ct_or(p, &cond)) || (rc = ct_expect_end(p)) || // Jinja: no x if c else y here
            (rc = ct_block_body(p, CT_STOP_IF, "if", line, &body, &stop)) ||
            (rc = ct_new(p, CT_NODE_IF, at, &node)))
            return rc;
        NODE(p, node)->branch.cond = cond, NODE(p, node)->branch.then = body;
        if (prev < 0)
            *out = node;
        else
            NODE(p, prev)->branch.otherwise = node, NODE(p, node)->op = 1;
        prev = node;
    }
    if (stop == 1) { // else
        if ((rc = ct_expect_end(p)) ||
            (rc = ct_block_body(p, CT_STOP_ENDIF, "if", line, &other, &stop)))
            return rc;
        NODE(p, node)->branch.otherwise = other;
    }
    p->depth--;
    return ct_expect_end(p);
}

// A name a set or for may assign: not a constant, not a.b (namespace()) nor a, b.
static int ct_target(CtParser *p, int *sym) {
    static const char *const CONSTS[] = {"true", "True", "false", "False", "none", "None"};
    if (p->tok != CT_TK_NAME) return ct_unexpected(p);
    for (int j = 0; j < 6; j++)
        if (ct_is_name(p, CONSTS[j]))
            return ct_fail(p->err, KG_EFORMAT, p->tline, "cannot assign to '%s'", CONSTS[j]);
    int rc = ct_intern(p, p->ts, p->tn, sym);
    if (rc || (rc = ct_next(p))) return rc;
    if (ct_is_op(p, '.'))
        return ct_fail(p->err, KG_EUNSUP, p->tline,
                       "assigning to an attribute (namespace()) is not supported");
    if (ct_is_op(p, ','))
        return ct_fail(p->err, KG_EUNSUP, p->tline, "unpacking (a, b = ...) is not supported");
    return KG_OK;
}

// for x in list %} ... {% else %} ... {% endfor %}
static int ct_for(CtParser *p, int *out) {
    int rc, line = p->tag_line, sym, list, body, other = -1, stop;
    if ((rc = ct_open_block(p)) || (rc = ct_target(p, &sym))) return rc;
    if (!ct_is_name(p, "in")) return ct_unexpected(p);
    if ((rc = ct_next(p)) || (rc = ct_or(p, &list))) return rc;
    if (ct_is_name(p, "if") || ct_is_name(p, "recursive"))
        return ct_fail(p->err, KG_EUNSUP, p->tline, "for ... %.*s is not supported", (int)p->tn,
                       p->ts);
    if ((rc = ct_expect_end(p)) || (rc = ct_block_body(p, CT_STOP_FOR, "for", line, &body, &stop)))
        return rc;
    if (stop == 0 && ((rc = ct_expect_end(p)) ||
                      (rc = ct_block_body(p, CT_STOP_ENDFOR, "for", line, &other, &stop))))
        return rc;
    if ((rc = ct_expect_end(p)) || (rc = ct_new(p, CT_NODE_FOR, line, out))) return rc;
    CtNode *nd = NODE(p, *out);
    nd->slot = sym, nd->loop.iter = list, nd->loop.body = body, nd->loop.otherwise = other;
    p->t->n_binds += 2;
    p->depth--;
    return KG_OK;
}

// set name = value %}
static int ct_set(CtParser *p, int *out) {
    int rc, line = p->tag_line, sym, value;
    if ((rc = ct_target(p, &sym))) return rc;
    if (p->tok == CT_TK_END)
        return ct_fail(p->err, KG_EUNSUP, line,
                       "block assignments ({%% set x %%}...{%% endset %%}) are not supported");
    if ((rc = ct_expect_op(p, '=')) || (rc = ct_expr(p, &value))) return rc;
    if (ct_is_op(p, ',')) return ct_fail(p->err, KG_EUNSUP, line, "tuples are not supported");
    if ((rc = ct_expect_end(p)) || (rc = ct_new(p, CT_NODE_SET, line, out))) return rc;
    NODE(p, *out)->slot = sym, NODE(p, *out)->unary.operand = value;
    p->t->n_binds++;
    return KG_OK;
}

// {% name ... %} after the name: one of ours, or why not.
static int ct_tag(CtParser *p, int *out) {
    char name[24];
    int rc;
    if (p->tok != CT_TK_NAME)
        return ct_fail(p->err, KG_EFORMAT, p->tag_line, "expected a tag name");
    snprintf(name, sizeof name, "%.*s", (int)(p->tn < 20 ? p->tn : 20), p->ts);
    if ((rc = ct_next(p))) return rc;
    if (!strcmp(name, "if")) return ct_if(p, out);
    if (!strcmp(name, "for")) return ct_for(p, out);
    if (!strcmp(name, "set")) return ct_set(p, out);
    if (!strncmp(name, "end", 3) || !strcmp(name, "elif") || !strcmp(name, "else"))
        return ct_fail(p->err, KG_EFORMAT, p->tag_line, "unexpected {%% %s %%}", name);
    return ct_fail(p->err, KG_EUNSUP, p->tag_line, "the tag '%s' is not supported", name);
}

static void ct_link(CtParser *p, int *first, int *last, int node) {
    if (*last < 0)
        *first = node;
    else
        NODE(p, *last)->next = node;
    *last = node;
}

// Statements until the end (*stop -1) or a {% tag %} named in stops (*stop its index, the
// token after the name current).
static int ct_body(CtParser *p, const char *const *stops, int *first, int *stop) {
    int last = -1, rc, node;
    *first = -1, *stop = -1;
    for (;;) {
        size_t start, end;
        int line;
        char kind = ct_lex_text(p, &start, &end, &line);
        if (end > start) {
            if ((rc = ct_new(p, CT_NODE_TEXT, line, &node))) return rc;
            NODE(p, node)->text = p->s + start, NODE(p, node)->n_text = end - start;
            ct_link(p, first, &last, node);
        }
        if (!kind) return KG_OK;
        if (kind == '#') {
            if ((rc = ct_lex_comment(p))) return rc;
            continue;
        }
        p->tag = kind, p->balance = 0;
        if ((rc = ct_next(p))) return rc;
        if (kind == '{') {
            int value;
            if ((rc = ct_expr(p, &value)) || (rc = ct_expect_end(p)) ||
                (rc = ct_new(p, CT_NODE_PRINT, p->tag_line, &node)))
                return rc;
            NODE(p, node)->unary.operand = value;
            ct_link(p, first, &last, node);
            continue;
        }
        for (int j = 0; stops && stops[j]; j++)
            if (ct_is_name(p, stops[j])) {
                *stop = j;
                return ct_next(p);
            }
        if ((rc = ct_tag(p, &node))) return rc;
        ct_link(p, first, &last, node);
    }
}

int chat_template_parse(ChatTemplate **out, const char *source, size_t len, char *err) {
    *out = NULL;
    if (!source && len) return kg_err(err, KG_EINVAL, "chat template: no source");
    if (len > CHAT_TEMPLATE_MAX_SOURCE)
        return ct_fail(err, KG_ERANGE, 0, "the template is longer than %d bytes",
                       CHAT_TEMPLATE_MAX_SOURCE);
    ChatTemplate *t = calloc(1, sizeof *t);
    if (t) t->src = malloc(len + 1), t->lits = malloc(len + 1);
    if (!t || !t->src || !t->lits) {
        chat_template_free(t);
        return ct_fail(err, KG_ENOMEM, 0, "out of memory");
    }
    for (size_t i = 0; i < len; i++) { // \r\n and \r are \n, as Jinja reads them
        if (source[i] == '\r' && i + 1 < len && source[i + 1] == '\n') i++;
        t->src[t->n_src++] = source[i] == '\r' ? '\n' : source[i];
    }
    if (t->n_src && t->src[t->n_src - 1] == '\n') t->n_src--; // keep_trailing_newline=False
    t->src[t->n_src] = '\0';
    for (size_t i = 0; i < sizeof CT_GLOBALS / sizeof *CT_GLOBALS; i++)
        t->names[t->n_names++] = (CtName){CT_GLOBALS[i], strlen(CT_GLOBALS[i])};
    CtParser p = {.t = t, .s = t->src, .n = t->n_src, .line = 1, .line_starting = 1, .err = err};
    int stop, rc = ct_body(&p, NULL, &t->root, &stop);
    if (rc) {
        chat_template_free(t);
        return rc;
    }
    *out = t;
    return KG_OK;
}

void chat_template_free(ChatTemplate *t) {
    if (!t) return;
    free(t->src);
    free(t->lits);
    free(t->nodes);
    free(t);
}

// --- the defaults (chat_template.h) ---

const char CHAT_TEMPLATE_USR_SYS[] =
    "{%- for message in messages %}\n"
    "{%- set content = message.content or '' %}\n"
    "{%- if message.role == 'system' or message.role == 'developer' %}{{ content }}\n"
    "{%- elif message.role == 'user' %}{{ '<usr>' ~ content }}\n"
    "{%- elif message.role == 'assistant' %}{{ '<sys>' ~ content ~ eos_token }}\n"
    "{%- else %}{{ raise_exception('the <usr>/<sys> chat template takes the roles system, "
    "user and assistant, not ' ~ message.role) }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{ '<sys>' }}{% endif %}";

const char CHAT_TEMPLATE_PLAIN[] = "{%- for message in messages %}\n"
                                   "{{- message.role ~ ': ' ~ (message.content or '') ~ '\\n' }}\n"
                                   "{%- endfor %}\n"
                                   "{%- if add_generation_prompt %}{{ 'assistant:' }}{% endif %}";
