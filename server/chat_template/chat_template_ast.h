// chat_template_ast.h — what the parser (chat_template.c) hands the renderer
// (chat_template_render.c, chat_template_ops.c): one flat array of nodes, children by index,
// and the template's variable names; and the few text helpers all of kgchattemplate's files
// use (defined in chat_template_lex.c). Private to kgchattemplate (ct_ is its prefix).
#ifndef CHAT_TEMPLATE_AST_H
#define CHAT_TEMPLATE_AST_H

#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"

#define CT_MAX_NAMES 256 // distinct variable names in one template

// A node's kind; which view of CtNode's children it uses is said beside each.
enum {
    CT_NODE_TEXT,   // text: template text outside the tags
    CT_NODE_PRINT,  // unary.operand: {{ operand }}
    CT_NODE_IF,     // branch: if cond then, else otherwise (a body, or one elif CT_NODE_IF: op 1)
    CT_NODE_FOR,    // loop, slot: for slot in iter body, else otherwise
    CT_NODE_SET,    // unary.operand, slot: set slot = operand
    CT_NODE_STR,    // text: the decoded literal
    CT_NODE_INT,    // num
    CT_NODE_BOOL,   // num: 1 true, 0 false
    CT_NODE_NONE,   // nothing
    CT_NODE_NAME,   // slot, text: the name
    CT_NODE_LIST,   // list.first, the items chained by next
    CT_NODE_ATTR,   // sub.object, text: the attribute
    CT_NODE_ITEM,   // sub: object[index]
    CT_NODE_SLICE,  // sub: object[index:stop:step], -1 where left out
    CT_NODE_RAISE,  // unary.operand: raise_exception(operand)
    CT_NODE_METHOD, // call: op CT_METHOD_*, receiver.text(args), text: the method's name
    CT_NODE_FILTER, // call: op CT_FILTER_*, receiver | filter(args)
    CT_NODE_TEST,   // call (no args): op CT_TEST_*, receiver is test
    CT_NODE_NOT,    // unary.operand
    CT_NODE_NEG,    // unary.operand; op 1: unary plus
    CT_NODE_AND,    // pair: lhs and rhs
    CT_NODE_OR,     // pair: lhs or rhs
    CT_NODE_BIN,    // pair: op CT_BIN_*, lhs op rhs
    CT_NODE_COND,   // branch: then if cond else otherwise
};

enum {
    CT_BIN_ADD,
    CT_BIN_SUB,
    CT_BIN_MUL,
    CT_BIN_FLOORDIV,
    CT_BIN_MOD,
    CT_BIN_CONCAT,
    CT_BIN_EQ,
    CT_BIN_NE,
    CT_BIN_LT,
    CT_BIN_LE,
    CT_BIN_GT,
    CT_BIN_GE,
    CT_BIN_IN,
    CT_BIN_NOTIN
};

// One node of the tree. Children are indexes into ChatTemplate.nodes (-1: none); the kind
// (its comment above) says which view of them it uses; kids[] is the same four in order, for
// the walks that need no names (building a node, the depth check).
typedef struct {
    uint8_t kind;  // CT_NODE_*
    uint8_t op;    // CT_BIN_*, CT_FILTER_*, CT_METHOD_*, CT_TEST_*; 1: an elif if, a unary plus
    uint8_t depth; // expression nodes: levels below and including this one
    int line;
    int next; // the next statement of a body, or item of a list or argument list
    union {
        int kids[4];
        struct {
            int cond, then, otherwise;
        } branch;
        struct {
            int iter, body, otherwise;
        } loop;
        struct {
            int operand;
        } unary;
        struct {
            int receiver, args; // args: the first argument, the rest chained by next
        } call;
        struct {
            int object, index, stop, step;
        } sub;
        struct {
            int lhs, rhs;
        } pair;
        struct {
            int first;
        } list;
    };
    const char *text; // text[0..n_text)
    size_t n_text;
    union {
        long long num; // CT_NODE_INT, CT_NODE_BOOL
        int slot;      // the variable's index in ChatTemplate.names
    };
} CtNode;
_Static_assert(sizeof((CtNode *)0)->sub == sizeof((CtNode *)0)->kids, "views overlay kids[]");

typedef struct {
    const char *s;
    size_t n;
} CtName;

struct ChatTemplate {
    char *src; // the source with newlines normalized; CT_NODE_TEXT points here
    size_t n_src;
    char *lits; // decoded string literals, never longer in all than the source
    size_t n_lits;
    CtNode *nodes;
    int n_nodes;
    size_t cap_nodes;
    int root;    // the first top-level statement; -1 when none
    int n_binds; // CT_NODE_SET + 2 per CT_NODE_FOR: the most bindings a render keeps to undo
    int n_names;
    CtName names[CT_MAX_NAMES]; // SYM_* first
};

// Names every render defines, in slot order.
enum {
    CT_SYM_MESSAGES,
    CT_SYM_BOS,
    CT_SYM_EOS,
    CT_SYM_ADD_GEN,
    CT_SYM_TOOLS,
    CT_SYM_DOCUMENTS,
    CT_SYM_LOOP
};

// CT_NODE_FILTER's op
enum {
    CT_FILTER_TRIM,
    CT_FILTER_LENGTH,
    CT_FILTER_UPPER,
    CT_FILTER_LOWER,
    CT_FILTER_CAPITALIZE,
    CT_FILTER_DEFAULT,
    CT_FILTER_STRING,
    CT_FILTER_FIRST,
    CT_FILTER_LAST,
    CT_FILTER_JOIN
};

// CT_NODE_METHOD's op (s[0..n) is the method's name)
enum {
    CT_METHOD_STRIP,
    CT_METHOD_LSTRIP,
    CT_METHOD_RSTRIP,
    CT_METHOD_UPPER,
    CT_METHOD_LOWER,
    CT_METHOD_CAPITALIZE,
    CT_METHOD_STARTSWITH,
    CT_METHOD_ENDSWITH
};

// CT_NODE_TEST's op
enum {
    CT_TEST_DEFINED,
    CT_TEST_UNDEFINED,
    CT_TEST_NONE,
    CT_TEST_STRING,
    CT_TEST_NUMBER,
    CT_TEST_INTEGER,
    CT_TEST_BOOLEAN,
    CT_TEST_TRUE,
    CT_TEST_FALSE,
    CT_TEST_ODD,
    CT_TEST_EVEN
};

// The helpers below are pure: safe from any thread.

// "chat template: what (line N)" into err and code back; line 0 leaves the line out. what is
// made one line (control characters become spaces) and cut between characters to fit.
int ct_fail(char *err, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Where s[lo..hi) starts after (ends before) the characters of set[0..m) at its front (back);
// set NULL: whitespace as Python's str.isspace has it (Jinja's \s and strip() use it).
size_t ct_skip_set(const char *s, size_t lo, size_t hi, const char *set, size_t m);
size_t ct_rskip_set(const char *s, size_t lo, size_t hi, const char *set, size_t m);

#endif
