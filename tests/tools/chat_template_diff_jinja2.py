#!/usr/bin/env python3
"""Differential test of server/chat_template/ against Python's jinja2 (Debian: python3-jinja2)
on random templates; a tool to run by hand after changing the renderer, not a ctest.

    tests/tools/chat_template_diff_jinja2.py build/test_chat_template [SEED] [N]

Two generators, N templates each: "exprs" (every construct of the subset, freely nested, so
that most renderings fail on both sides) and "layout" (valid expressions in blocks, text and
comments under every whitespace control, where trim_blocks and lstrip_blocks matter). Each
template goes to `test_chat_template --diff`, rendered with vectors.json's "chat" conversation.
Counts: same output; both fail; we refuse (KG_EUNSUP/KG_ERANGE, or a syntax error in a branch
jinja2 never compiles far enough to reject) where jinja2 renders; and mismatches: different
output, or one side failing alone. Prints the first mismatches; exit 1 when there are any."""
import json
import os
import random
import struct
import subprocess
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KG_EFORMAT, KG_ERANGE, KG_EUNSUP = -4, -5, -6


def raise_exception(message):
    raise TemplateError(message)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
ENV.globals["raise_exception"] = raise_exception
CHAT = json.load(open(os.path.join(ROOT, "tests", "chat_templates", "vectors.json"), encoding="utf-8"))["conversations"]["chat"]

STRS = ["'a'", '"b"', "''", "' x '", "'user'", "'role'", "'\\n'", "'안'", "'a\\tb'", "\"it's\"",
        "'  '", "'ab' 'c'"]
OPS = ["+", "-", "*", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and",
       "or"]
POSTFIX = [".role", ".content", "['content']", "[%d]", "[%s:%s]", ".strip()", ".upper()",
           ".lower()", ".lstrip()", ".rstrip(' ?')", ".capitalize()", ".startswith('a')",
           ".endswith('?')"]
FILTERS = ["trim", "length", "upper", "lower", "capitalize", "string", "default('D')",
           "d('E', true)", "first", "last", "join(',')", "count", "trim('?')"]
TESTS = ["defined", "undefined", "none", "not none", "string", "number", "integer", "boolean",
         "odd", "even", "true", "false"]
WS = ["", " ", "\n", "  \n  ", "\t", "\n\n", " x ", "\u3000", "\n  ", "  ", "\r\n", "\n\t \n"]


class Exprs:
    """Any construct, nested at random."""

    def __init__(self, rnd):
        self.r = rnd

    def atom(self, d, scope):
        r, c = self.r, self.r.randrange(10)
        if c == 0:
            return r.choice(STRS)
        if c == 1:
            return str(r.randrange(-3, 5))
        if c == 2:
            return r.choice(["true", "false", "none", "True", "None"])
        if c == 3:
            return "[" + ", ".join(self.expr(d + 1, scope) for _ in range(r.randrange(3))) + "]"
        if c == 4:
            return "(" + self.expr(d + 1, scope) + ")"
        if c == 5:
            return "messages[%d]" % r.randrange(-5, 5)
        return r.choice(["messages", "bos_token", "eos_token", "add_generation_prompt", "tools",
                         "undef_x"] + scope)

    def unary(self, d, scope):
        r, e = self.r, self.atom(d, scope)
        for _ in range(r.randrange(3)):
            c = r.randrange(3)
            if c == 0:
                p = r.choice(POSTFIX)
                e += p % r.randrange(-3, 3) if p == "[%d]" else p % (
                    r.choice(["", "1", "-1", "0"]), r.choice(["", "2", "-1"])) if "%s" in p else p
            elif c == 1:
                e += "|" + r.choice(FILTERS)
            else:
                e += " is " + r.choice(TESTS)
        return (r.choice(["-", "not ", "+"]) if r.randrange(8) == 0 else "") + e

    def expr(self, d, scope):
        r = self.r
        c = r.randrange(5) if d <= 3 else 0
        if c < 2:
            return self.unary(d, scope)
        if c < 4:
            return self.unary(d, scope) + " " + r.choice(OPS) + " " + self.expr(d + 1, scope)
        return "%s if %s%s" % (self.expr(d + 1, scope), self.expr(d + 1, scope),
                               " else " + self.expr(d + 1, scope) if r.randrange(2) else "")

    def cond(self, scope):
        return self.expr(0, scope)

    def value(self, scope):
        return self.expr(0, scope)

    def loop_list(self, scope):
        return self.r.choice(["messages", "messages[1:]", "messages[::-1]", "[1, 'a', none]",
                              "undef_y", "v1" if "v1" in scope else "messages"])


class Layout(Exprs):
    """Expressions that render, so that the whitespace around blocks decides the output."""

    def cond(self, scope):
        return self.r.choice(["true", "false", "add_generation_prompt", "messages"] + (
            ["m.role == 'user'", "loop.last", "loop.index0 % 2 == 0", "'user' in m.role"]
            if "m" in scope else []))

    def value(self, scope):
        return self.r.choice(["'a'", "bos_token", "'\\n'", "messages|length", "' y '"] + (
            ["m.role", "m.content|trim", "loop.index", "loop.first", "m.content.strip()",
             "'<|' ~ m.role ~ '|>'"] if "m" in scope else []))

    def loop_list(self, scope):
        return "messages"


def tag(r, body):
    return "{%" + r.choice(["", "", "-", "+"]) + " " + body + " " + r.choice(["", "", "-", "+"]) + "%}"


def body(g, d, scope, n):
    r, out = g.r, []
    for _ in range(n):
        out.append(r.choice(WS))
        c = r.randrange(9 if d < 3 else 5)
        if c == 0:
            out.append(r.choice(["txt", "A b", "-", "\n", "  line\n", "x\n  "]))
        elif c == 1:
            out.append("{{" + r.choice(["", "-", "+"]) + " " + g.value(scope) + " " +
                       r.choice(["", "-"]) + "}}")
        elif c == 2:
            out.append("{#" + r.choice(["", "-", "+"]) + " c " + r.choice(["", "-", "+"]) + "#}")
        elif c == 3:
            v = r.choice(["v1", "v2"])
            out.append(tag(r, "set %s = %s" % (v, g.value(scope))))
            scope = scope + [v]
        elif c == 4:
            out.append(tag(r, "if " + g.cond(scope)) + body(g, d + 1, scope, r.randrange(3)))
            for _ in range(r.randrange(2)):
                out.append(r.choice(WS) + tag(r, "elif " + g.cond(scope)) +
                           body(g, d + 1, scope, r.randrange(3)))
            if r.randrange(2):
                out.append(r.choice(WS) + tag(r, "else") + body(g, d + 1, scope, r.randrange(3)))
            out.append(r.choice(WS) + tag(r, "endif"))
        elif c < 7:
            out.append(tag(r, "for m in " + g.loop_list(scope)) +
                       body(g, d + 1, scope + ["m", "loop"], r.randrange(1, 4)))
            if r.randrange(4) == 0:
                out.append(tag(r, "else") + body(g, d + 1, scope, 1))
            out.append(r.choice(WS) + tag(r, "endfor"))
        else:
            out.append(r.choice(["{{ loop.index }}", "{{ loop.revindex0 ~ loop.length }}",
                                 "{{ loop.previtem is defined }}", "{{ loop|length }}"]
                                if "loop" in scope else ["{{ 1 }}"]))
    return "".join(out)


def ours(driver, templates):
    data = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in templates)
    res = subprocess.run([driver, "--diff"], input=data, capture_output=True, check=True)
    out, pos = [], 0
    for _ in templates:
        nl = res.stdout.index(b"\n", pos)
        head, pos = res.stdout[pos:nl].decode(), nl + 1
        if head.startswith("OK "):
            n = int(head[3:])
            out.append((res.stdout[pos:pos + n].decode("utf-8", "replace"), None))
            pos += n
        else:
            out.append((None, head))
    return out


def main():
    driver = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    bad = 0
    for gen in (Exprs, Layout):
        g = gen(random.Random(seed))
        templates = [body(g, 0, [], g.r.randrange(1, 5)) for _ in range(n)]
        stats = dict(same=0, both_fail=0, we_refuse=0, mismatch=0)
        for t, (text, err) in zip(templates, ours(driver, templates)):
            try:
                ref, ref_err = ENV.from_string(t).render(
                    messages=CHAT, add_generation_prompt=True, bos_token="<s>", eos_token="</s>",
                    tools=None, documents=None), None
            except Exception as e:  # jinja2's and Python's errors alike
                ref, ref_err = None, "%s: %s" % (type(e).__name__, e)
            code = int(err.split()[1]) if err else 0
            if ref is not None and text == ref:
                stats["same"] += 1
            elif ref is None and text is None:
                stats["both_fail"] += 1
            elif ref is not None and code in (KG_EUNSUP, KG_ERANGE, KG_EFORMAT):
                stats["we_refuse"] += 1
            else:
                stats["mismatch"] += 1
                if stats["mismatch"] <= 5:
                    print("MISMATCH %r\n  jinja2: %r %s\n  ours:   %r %s" % (t, ref, ref_err or "",
                                                                            text, err or ""))
        print(gen.__name__.lower(), "seed", seed, stats)
        bad += stats["mismatch"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
