// chat_template_ast.h — what chat_template.c (lexer, parser) hands chat_template_render.c:
// one flat array of nodes, children by index, and the template's variable names; and the few
// helpers both use. Internal to those two files (ct_ is their prefix).
#ifndef CHAT_TEMPLATE_AST_H
#define CHAT_TEMPLATE_AST_H

#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"

#define CT_MAX_NAMES 256 // distinct variable names in one template

enum {
    N_TEXT, // s[0..n)
    N_PRINT,
    N_IF,  // a cond, b then, c else (a body, or one N_IF with op 1 for elif)
    N_FOR, // i name, a list, b body, c else
    N_SET, // i name, a value
    N_STR, // s[0..n)
    N_INT, // i
    N_BOOL,
    N_NONE,
    N_NAME,   // i name, s[0..n) its text
    N_LIST,   // a first item, items chained by next
    N_ATTR,   // a object, s[0..n) attribute
    N_ITEM,   // a[b]
    N_SLICE,  // a[b:c:d], -1 where left out
    N_RAISE,  // raise_exception(a)
    N_METHOD, // op method, a receiver, b args
    N_FILTER, // op filter, a value, b args
    N_TEST,   // op test, a value
    N_NOT,
    N_NEG, // op 1: unary plus
    N_AND,
    N_OR,
    N_BIN,  // op, a, b
    N_COND, // b if a else c
};

enum {
    B_ADD,
    B_SUB,
    B_MUL,
    B_FLOORDIV,
    B_MOD,
    B_CONCAT,
    B_EQ,
    B_NE,
    B_LT,
    B_LE,
    B_GT,
    B_GE,
    B_IN,
    B_NOTIN
};

typedef struct {
    uint8_t kind, op;
    uint8_t depth; // expression nodes: levels below and including this one
    int line;
    int a, b, c, d; // children; -1: none
    int next;       // the next statement of a body, or item of a list or argument list
    const char *s;
    size_t n;
    long long i;
} CtNode;

typedef struct {
    const char *s;
    size_t n;
} CtName;

struct ChatTemplate {
    char *src; // the source with newlines normalized; N_TEXT points here
    size_t n_src;
    char *lits; // decoded string literals, never longer in all than the source
    size_t n_lits;
    CtNode *nodes;
    int n_nodes, cap_nodes;
    int root;    // the first top-level statement; -1 when none
    int n_binds; // N_SET + 2 per N_FOR: the most bindings a render keeps to undo
    int n_names;
    CtName names[CT_MAX_NAMES]; // SYM_* first
};

// Names every render defines, in slot order.
enum { SYM_MESSAGES, SYM_BOS, SYM_EOS, SYM_ADD_GEN, SYM_TOOLS, SYM_DOCUMENTS, SYM_LOOP };

// N_FILTER's op
enum {
    F_TRIM,
    F_LENGTH,
    F_UPPER,
    F_LOWER,
    F_CAPITALIZE,
    F_DEFAULT,
    F_STRING,
    F_FIRST,
    F_LAST,
    F_JOIN
};

// N_METHOD's op (s[0..n) is the method's name)
enum { M_STRIP, M_LSTRIP, M_RSTRIP, M_UPPER, M_LOWER, M_CAPITALIZE, M_STARTSWITH, M_ENDSWITH };

// N_TEST's op
enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_STRING,
    T_NUMBER,
    T_INTEGER,
    T_BOOLEAN,
    T_TRUE,
    T_FALSE,
    T_ODD,
    T_EVEN
};

// "chat template: what (line N)" into err and code back; line 0 leaves the line out. what is
// made one line (control characters become spaces) and cut between characters to fit.
int ct_fail(char *err, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Where s[lo..hi) starts after (ends before) the characters of set[0..m) at its front (back);
// set NULL: whitespace as Python's str.isspace has it (Jinja's \s and strip() use it).
size_t ct_skip_set(const char *s, size_t lo, size_t hi, const char *set, size_t m);
size_t ct_rskip_set(const char *s, size_t lo, size_t hi, const char *set, size_t m);

#endif
