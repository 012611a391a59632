// chat_template_lex.h — the lexer of chat templates (chat_template_lex.c), as the parser
// (chat_template.c) drives it: ct_lex_text cuts the template text up to the next tag, with
// Jinja's whitespace control under transformers' settings (trim_blocks, lstrip_blocks);
// inside a tag, ct_next reads one token at a time. Private to kgchattemplate (ct_ prefix).
//
// Not thread-safe per CtParser; a parse owns its CtParser alone.
#ifndef CHAT_TEMPLATE_LEX_H
#define CHAT_TEMPLATE_LEX_H

#include <stddef.h>

#include "chat_template_ast.h"

// A token's kind, and CT_TK_OP's operators that are two characters (one character: itself).
enum { CT_TK_EOF, CT_TK_END, CT_TK_NAME, CT_TK_STR, CT_TK_INT, CT_TK_OP };
enum { CT_OP_FLOORDIV = 256, CT_OP_POW, CT_OP_EQ, CT_OP_NE, CT_OP_LE, CT_OP_GE };

// One parse: the lexer's position and current token, and the parser's nesting counts.
typedef struct {
    ChatTemplate *t;
    const char *s; // t->src
    size_t n, pos;
    size_t line_pos; // line is the line of byte line_pos (positions only grow)
    int line;
    int line_starting; // the last tag ended with a newline (lstrip_blocks looks at it)
    char tag;          // '{' or '%' inside {{ }} or {% %}
    int tag_line, balance;
    int tok, op; // the current token; op for CT_TK_OP
    const char *ts;
    size_t tn;    // its text (CT_TK_STR: the decoded bytes, in t->lits)
    long long ti; // CT_TK_INT
    int tline;
    int depth, edepth; // the parser's: open blocks, open expression levels
    char *err;
} CtParser;

// The template text from p->pos up to the next tag or comment. [*start, *end) is the text to
// keep (a {{- / {%- / {#- takes the whitespace before it, lstrip_blocks the spaces alone on
// a block tag's line), *line its line. Returns the tag's kind, '{', '%' or '#', with p->pos
// after its opening mark and p->tag_line set; or 0 at the end of the source (p->pos == p->n).
// Cannot fail.
char ct_lex_text(CtParser *p, size_t *start, size_t *end, int *line);

// Skips a comment whose opening mark ends at p->pos, with the whitespace after it that its
// closing mark takes (#} one newline, -#} all, +#} none). KG_OK, or KG_EFORMAT when it is not
// closed (err set).
int ct_lex_comment(CtParser *p);

// Reads the next token of the current tag into p->tok (and op, ts, tn, ti, tline): KG_OK, a
// CT_TK_EOF at the end of the source, a CT_TK_END at the tag's closing mark (which takes the
// whitespace trim_blocks and -%} say, and ends the tag); or KG_EFORMAT (a stray character, an
// unclosed string), KG_EUNSUP (a float, a non-decimal integer, an escape we lack) with err set.
// String literals are decoded into p->t->lits.
int ct_next(CtParser *p);

// Is the current token the name kw (the operator op)?
int ct_is_name(const CtParser *p, const char *kw);
int ct_is_op(const CtParser *p, int op);

// The current token is op: read the next one (ct_next's codes); otherwise ct_unexpected.
int ct_expect_op(CtParser *p, int op);

// KG_OK when the current token ends the tag; otherwise ct_unexpected.
int ct_expect_end(CtParser *p);

// KG_EFORMAT, "unexpected ..." naming the current token (or the unclosed tag) in err.
int ct_unexpected(CtParser *p);

#endif
