#!/usr/bin/env python3
"""Writes tests/chat_templates/vectors.json: chat templates rendered by Python's jinja2 (Debian:
python3-jinja2) in the environment transformers renders chat templates in, for
test_chat_template.c to compare server/chat_template/ against; and the seed corpus of
tests/fuzz/fuzz_chat_template (corpus/fuzz_chat_template/: every template here, a few refusals).
The C test reads only the JSON; run this again after adding or changing a vector and commit
what it writes.

Each vector: name, template, messages (role/content; content null is JSON null),
add_generation_prompt, bos_token and eos_token (null: not passed, so undefined), then either
"expected" (the rendered text) or "error" (jinja2's message: the C side must fail too, and where
the vector says "error_is_message", carry that text; that is raise_exception's message)."""
import ast
import json
import os
import re
import shutil

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(ROOT, "tests", "chat_templates", "vectors.json")


class RaisedByTemplate(TemplateError):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


# transformers' render_jinja_template: trim_blocks, lstrip_blocks, raise_exception
ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
ENV.globals["raise_exception"] = raise_exception


def c_defaults():
    """The default templates as server/chat_template/chat_template.c defines them (C strings)."""
    path = os.path.join(ROOT, "server", "chat_template", "chat_template.c")
    src = open(path, encoding="utf-8").read()
    out = {}
    for name, body in re.findall(r'const char (CHAT_TEMPLATE_\w+)\[\] =((?:\s*"(?:[^"\\]|\\.)*")+);',
                                 src):
        out[name] = "".join(ast.literal_eval(piece)
                            for piece in re.findall(r'"(?:[^"\\]|\\.)*"', body))
    return out


def m(role, content):
    return {"role": role, "content": content}


CONVS = {
    "chat": [m("system", "친절하게 답해요."), m("user", "안녕?"), m("assistant", "반가워요!"),
             m("user", "What's up?")],
    "alt": [m("user", "hi"), m("assistant", "hello"), m("user", "bye")],
    "bad_alt": [m("user", "one"), m("user", "two")],
    "one": [m("user", "hello")],
    "empty": [],
    "spaces": [m("user", "  padded \u3000\n"), m("assistant", "\n ok \t")],
    "null": [m("user", "q"), m("assistant", None)],
    "tool": [m("user", "2+2?"), m("tool", "4")],
}

GPT2 = "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}"
          "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
          "{% for message in loop_messages %}{% if (message['role'] == 'user') != "
          "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
          "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and "
          "system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
          "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
          "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
          "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
          "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
          "{% endif %}{% endfor %}")
ZEPHYR = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
           "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
           "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
           "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
           "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception("
           "'Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System "
         "role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] "
         "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
         "alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
         "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
         "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
         "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
         "{{'<start_of_turn>model\\n'}}{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
          "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
          "{% endif %}")
PHI3 = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
        "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + "
        "'\\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + "
        "'\\n'}}{% endif %}{% endfor %}")
# an Alpaca-style template written over lines, leaning on trim_blocks and lstrip_blocks
ALPACA = """{% for message in messages %}
    {% if message.role == 'system' %}
{{ message.content }}

    {% elif message.role == 'user' %}
### Instruction:
{{ message.content | trim }}

    {% else %}
### Response:
{{ message.content | trim }}{{ eos_token }}

    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
### Response:
{% endif %}
"""

BOS, EOS = "<s>", "</s>"

# (name, template, conversation, add_generation_prompt, bos_token, eos_token)
V = []


def vec(name, template, conv="chat", gen=False, bos=BOS, eos=EOS):
    V.append((name, template, conv, gen, bos, eos))


# --- real templates ---
for conv in ("chat", "alt", "empty"):
    vec("gpt2_default_" + conv, GPT2, conv)
for conv, gen in (("chat", True), ("alt", False), ("spaces", True)):
    vec("chatml_%s_%d" % (conv, gen), CHATML, conv, gen)
for conv in ("chat", "alt", "spaces", "bad_alt", "one"):
    vec("llama2_" + conv, LLAMA2, conv)
for conv, gen in (("chat", True), ("alt", False), ("one", True)):
    vec("zephyr_%s_%d" % (conv, gen), ZEPHYR, conv, gen)
for conv in ("alt", "bad_alt", "tool"):
    vec("mistral_" + conv, MISTRAL, conv)
for conv, gen in (("alt", True), ("chat", True), ("spaces", False)):
    vec("gemma_%s_%d" % (conv, gen), GEMMA, conv, gen)
for conv, gen in (("chat", True), ("spaces", False)):
    vec("llama3_%s_%d" % (conv, gen), LLAMA3, conv, gen)
vec("phi3_alt", PHI3, "alt")
for conv, gen in (("chat", True), ("spaces", False)):
    vec("alpaca_%s_%d" % (conv, gen), ALPACA, conv, gen)

# --- the defaults of server/chat_template/chat_template.c ---
DEFAULTS = c_defaults()
for conv, gen in (("chat", True), ("alt", False), ("null", True), ("empty", True), ("tool", True)):
    vec("default_usr_sys_%s_%d" % (conv, gen), DEFAULTS["CHAT_TEMPLATE_USR_SYS"], conv, gen)
for conv, gen in (("chat", True), ("null", False), ("tool", True), ("empty", False)):
    vec("default_plain_%s_%d" % (conv, gen), DEFAULTS["CHAT_TEMPLATE_PLAIN"], conv, gen)

# --- one construct at a time ---
vec("text_only", "hello\nworld")
vec("variables", "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages|length }}",
    gen=True)
vec("undefined_bos", "[{{ bos_token }}]{{ bos_token is defined }}{{ eos_token }}", bos=None)
vec("tools_documents", "{{ tools is none }}{{ documents is none }}{{ tools is defined }}")
vec("if_elif_else", "{% for m in messages %}{% if m.role == 'user' %}U{% elif m.role == "
    "'assistant' %}A{% elif m.role == 'tool' %}T{% else %}S{% endif %}{% endfor %}")
vec("if_no_else", "{% if false %}no{% endif %}{% if 1 %}yes{% endif %}{% if '' %}no{% endif %}"
    "{% if [] %}no{% endif %}{% if messages %}msgs{% endif %}{% if none %}no{% endif %}")
vec("loop_attrs", "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
    "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}")
vec("loop_prev_next", "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined "
    "else '-' }}>{{ m.role }}>{{ loop.nextitem.role if loop.nextitem is defined else '-' }} "
    "{% endfor %}")
vec("for_else_empty", "{% for m in messages %}x{% else %}empty{% endfor %}", "empty")
vec("for_else_full", "{% for m in messages %}x{% else %}empty{% endfor %}", "one")
vec("for_undefined", "{% for x in nothing %}a{% else %}b{% endfor %}")
vec("for_list_literal", "{% for x in [1, 'two', none, true] %}{{ x }},{% endfor %}")
vec("nested_loop_attrs", "{% for a in [1,2] %}{% for b in [3] %}{{ loop.index }}{{ loop.length }}"
    "{% endfor %}{{ loop.index }};{% endfor %}")
vec("set_scope_for", "{% set x = 'top' %}{% for m in messages %}{{ x }}{% set x = m.role %}"
    "{{ x }};{% endfor %}{{ x }}")
vec("set_in_if_top", "{% if messages %}{% set first = messages[0].role %}{% endif %}{{ first }}")
vec("set_per_iteration", "{% for m in messages %}{% if loop.first %}{% set y = 5 %}{% endif %}"
    "[{{ y }}]{% endfor %}")
vec("set_nested_loops", "{% for a in [1,2] %}{% set q = a %}{% for b in [10,20] %}"
    "{% set q = q + b %}{{ q }},{% endfor %}{{ q }};{% endfor %}")
vec("set_loop_var_shadow", "{% set m = 9 %}{% for m in [1,2] %}{{ m }}{% endfor %}[{{ m }}]")
vec("set_messages", "{% set messages = messages[1:] %}{{ messages|length }}"
    "{% for m in messages %}{{ m.role }}{% endfor %}")
vec("ws_minus", "  {%- if true -%}  \n x \n  {%- endif -%}\n y {{- ' z ' -}}  w")
vec("ws_trim_lstrip", "{% for m in messages %}\n    {{ m.role }}\n    {% if loop.last %}\n  last\n"
    "    {% endif %}\n{% endfor %}\n")
vec("ws_comments", "a {# c #}\n  b\n  {# d #}\nc {#- e -#}  d {#+ f +#}\n g")
vec("ws_plus", "  {%+ if true %}x{% endif +%}\ny\n  {% if true +%}\nz{% endif %}")
vec("ws_unicode", "x\u3000{%- if true -%}\u3000\u2028 y{% endif %}\n  {%- if true %}\u3000\n"
    "{% endif %}z")
vec("ws_after_print", "{{ 1 }}\n  {% if true %}a{% endif %}\n")
vec("newlines", "a\r\nb\rc{{ 'd\r\ne' }}\n")
vec("string_escapes", "{{ 'a\\nb\\tc\\'d\\\"e\\\\f\\x41\\u00e9\\U0001F600\\101\\q\\\nz' }}"
    "{{ \"it's\" }}{{ 'a' 'b' \"c\" }}{{ '한국어' }}")
vec("integers", "{{ 1 + 2 }} {{ 10 - 3 * 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} "
    "{{ 7 % -3 }} {{ 1_000 }} {{ true + 1 }} {{ -(3) }} {{ +4 }} {{ 2 * -3 }} {{ 00 }}")
vec("constants", "{{ true }}{{ True }}{{ false }}{{ False }}{{ none }}{{ None }}")
vec("concat_tilde", "{{ 'a' ~ 1 ~ true ~ none ~ undefined_thing ~ 'z' }}")
vec("string_plus", "{{ 'a' + 'b' }}{{ messages[0].role + '!' }}")
vec("comparisons", "{{ 1 == 1 }}{{ 1 != 1 }}{{ 1 == true }}{{ 'a' < 'b' }}{{ 2 >= 3 }}"
    "{{ 'ab' <= 'ab' }}{{ none == none }}{{ [1,2] == [1,2] }}{{ 'x' == 1 }}{{ 3 > 2 }}"
    "{{ 'b' > 'abc' }}{{ undefined_a == undefined_b }}{{ messages[0] == messages[0] }}"
    "{{ messages[0] == messages[1] }}{{ '가' > 'z' }}")
vec("and_or_not", "{{ 0 and 'y' }}|{{ 'q' and 'y' }}|{{ '' or 'd' }}|{{ 'a' or 'b' }}|{{ not 1 }}|"
    "{{ not '' }}|{{ not 1 == 2 }}|{{ x is defined and x }}|{{ not undefined_thing }}")
vec("in_operator", "{{ 'ell' in 'hello' }}{{ 'x' not in 'hello' }}{{ 2 in [1,2] }}"
    "{{ 'role' in messages[0] }}{{ 'name' in messages[0] }}{{ '' in 'a' }}"
    "{{ 'a' in undefined_thing }}{{ 'user' in ['user', 'system'] }}{{ messages[1] in messages }}")
vec("tests", "{{ x is defined }}{{ messages is defined }}{{ none is none }}{{ 1 is not none }}"
    "{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}"
    "{{ 1 is integer }}{{ true is boolean }}{{ 3 is odd }}{{ 3 is even }}{{ true is true }}"
    "{{ 0 is false }}{{ x is undefined }}{{ 4 is not odd }}")
vec("attr_item", "{{ messages[0].role }}|{{ messages[0]['content'] }}|{{ messages[-1].role }}|"
    "{{ messages.0.role }}|{{ messages[10] is defined }}|{{ messages[0].name is defined }}|"
    "{{ messages['x'] is defined }}|{{ none.x is defined }}|{{ 'abc'.x is defined }}|"
    "{{ messages[true].role }}|{{ [[1, 2], [3]][0][1] }}")
vec("slices", "{% for m in messages[1:] %}{{ m.role }},{% endfor %}|{{ messages[:-1]|length }}|"
    "{{ messages[::-1][0].role }}|{{ messages[1:3]|length }}|{{ messages[5:]|length }}|"
    "{{ [1,2,3,4,5][::2]|join(',') }}|{{ [1,2,3][-2:]|join }}|{{ [1,2,3][-10:10]|join }}|"
    "{{ [1,2,3,4,5][4:0:-2]|join }}|{{ [1,2,3][none:2]|join }}|{{ [1,2,3,4][::-3]|join }}")
vec("filters", "{{ '  a b \u3000'|trim }}|{{ 'xxaxx'|trim('x') }}|{{ '한국어'|length }}|"
    "{{ 'abc'|count }}|{{ 'hELLo wORLD'|capitalize }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|"
    "{{ none|trim }}|{{ undefined_thing|default('d') }}|{{ none|default('d') }}|"
    "{{ none|d('d', true) }}|{{ ''|default('e', true) }}|{{ 1|string ~ 2 }}|"
    "{{ [1,'a',none]|join(', ') }}|{{ [3,4]|first }}{{ [3,4]|last }}|"
    "{{ (messages|first).role }}|{{ ([]|first) is defined }}|{{ undefined_thing|length }}|"
    "{{ messages[0]|length }}|{{ true|lower }}|{{ 'x'|default }}|{{ undefined_thing|default }}.")
vec("filter_precedence", "{{ 'x' ~ '  y  ' | trim ~ 'z' }}|{{ 'a b'|upper|lower }}")
vec("methods", "{{ '  x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x '.lstrip() }}.|"
    "{{ '  x '.rstrip() }}.|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}"
    "{{ 'abc'.startswith('c') }}{{ 'a'.endswith('abc') }}|{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}"
    "{{ 'aBC'.capitalize() }}|{{ messages[1].content.strip('?') }}|{{ '안녕 '.rstrip() }}.")
vec("cond_expr", "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}|{{ 'a' if false }}|"
    "{{ 1 if false else 2 if true else 3 }}|{{ 'y' if messages else 'n' }}")
vec("lists", "{{ ([1] + [2, 3])|length }}{{ 'a' in ['a', 'b'] }}{{ []|length }}"
    "{{ [[1], [2]][1][0] }}{{ [1, 2,]|length }}{{ (messages + messages)|length }}")
vec("precedence", "{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}{{ 2 - 1 - 1 }}{{ not true or true }}"
    "{{ not (true or true) }}{{ - 2 + 3 }}{{ 1 + 1 == 2 }}{{ 'a' ~ 'b' == 'ab' }}"
    "{{ 1 == 1 and 2 == 2 }}{{ 2 * 3 % 4 }}")
vec("repeat", "{{ 'ab' * 2 }}{{ 2 * 'ab' }}{{ ([1] * 3)|length }}[{{ 'a' * -1 }}]{{ 'a' * true }}"
    "{{ ([] * 5)|length }}{{ '=' * 3 ~ '|' }}")
vec("join_mixed", "{{ [1, 'b', none, true]|join }}"
    "{{ ['x']|join(', ') }}|{{ []|join(', ') }}")
vec("content_null", "{% for m in messages %}{{ m.content }}|{{ m.content is none }};{% endfor %}",
    "null")
vec("raise_ok", "{% if messages|length > 1 %}{{ raise_exception('too many: ' ~ messages|length) }}"
    "{% endif %}ok", "one")
vec("raise_fires", "{% if messages|length > 1 %}{{ raise_exception('too many: ' ~ "
    "messages|length) }}{% endif %}ok", "chat")
# errors at render time (the C side must fail as jinja2 does)
vec("err_undefined_attr", "{{ x.y }}")
vec("err_undefined_add", "{{ undefined_thing + 'a' }}")
vec("err_int_plus_str", "{{ 1 + 'a' }}")
vec("err_concat_precedence", "{{ 'a' ~ 1 + 2 }}")
vec("err_for_none", "{% for x in none %}{% endfor %}")
vec("err_past_end", "{{ messages[10].role }}")
vec("err_none_content_plus", "{% for m in messages %}{{ m.content + '!' }}{% endfor %}", "null")
vec("err_compare_types", "{{ 1 < 'a' }}")
vec("err_divide_zero", "{{ 1 // 0 }}")
vec("err_neg_before_filter", "{{ -'ab'|length }}")
vec("err_in_none", "{{ 'a' in none }}")
vec("err_unhashable_in_dict", "{{ [1] in messages[0] }}")
vec("err_method_on_none", "{% for m in messages %}{{ m.content.strip() }}{% endfor %}", "null")


def render(template, conv, gen, bos, eos):
    kw = {"messages": CONVS[conv], "add_generation_prompt": gen, "tools": None, "documents": None}
    if bos is not None:
        kw["bos_token"] = bos
    if eos is not None:
        kw["eos_token"] = eos
    return ENV.from_string(template).render(**kw)


# seeds for tests/fuzz/fuzz_chat_template: every template above, and a few refusals
FUZZ_REFUSALS = {
    "refuse_tojson": "{{ messages | tojson }}",
    "refuse_macro": "{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}",
    "refuse_namespace": "{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}",
    "refuse_unclosed": "{% for m in messages %}{{ m.content",
    "deep_ifs": "{% if true %}" * 70 + "x" + "{% endif %}" * 70,
    "work_loops": "{% for a in messages %}" * 5 + "{{ a.role }}" + "{% endfor %}" * 5,
}


def write_fuzz_seeds(vectors):
    d = os.path.join(ROOT, "tests", "fuzz", "corpus", "fuzz_chat_template")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    seen = set()
    seeds = [(v["name"], v["template"]) for v in vectors] + sorted(FUZZ_REFUSALS.items())
    for name, template in seeds:
        if template not in seen:
            seen.add(template)
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(template)
    return len(seen)


def main():
    vectors = []
    for name, template, conv, gen, bos, eos in V:
        v = {"name": name, "template": template, "messages": conv,
             "add_generation_prompt": gen, "bos_token": bos, "eos_token": eos}
        try:
            v["expected"] = render(template, conv, gen, bos, eos)
            assert not name.startswith("err_"), name
        except RaisedByTemplate as e:
            v["error"], v["error_is_message"] = str(e), True
        except TemplateError as e:
            v["error"] = "%s: %s" % (type(e).__name__, e)
        except Exception as e:  # int + str, 1 // 0: jinja2 lets Python's errors through
            v["error"] = "%s: %s" % (type(e).__name__, e)
        if "error" in v:
            assert name.startswith("err_") or "raise" in name or "bad_alt" in name or \
                name.endswith("_tool_1") or name.startswith(("mistral_tool", "gemma_chat")), name
        vectors.append(v)
    out = {"generator": "tests/tools/chat_template_vectors.py", "jinja2": jinja2.__version__,
           "environment": "ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) "
                          "+ raise_exception, as transformers renders chat templates",
           "conversations": CONVS, "vectors": vectors}
    with open(VECTORS, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    seeds = write_fuzz_seeds(vectors)
    print("%d vectors (%d errors) with jinja2 %s; %d fuzz seeds" % (len(vectors),
          sum("error" in v for v in vectors), jinja2.__version__, seeds))


if __name__ == "__main__":
    main()
