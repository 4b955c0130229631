#!/usr/bin/env python3
"""Random Jinja differential vectors: a seeded grammar-based generator of small templates in the
style of chat templates, rendered by jinja2 the way transformers renders a chat template; writes
tests/fixtures/chat_templates/random_vectors.json for tests/unit/jinja_random_test.cc.

Run with a venv that has jinja2 (transformers optional):
    /work/main/.venv-bench/bin/python tools/ref/make_jinja_random_vectors.py [--seed S] [--count N]

With transformers installed, the environment is transformers' own (`_compile_jinja_template`, as
tools/ref/make_chat_vectors.py uses). Without it, the same environment is built by hand from
transformers' chat_template_utils: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]), the default Undefined (not
StrictUndefined), a `tojson` filter that is json.dumps(x, ensure_ascii=False, indent=None,
separators=None, sort_keys=False), and globals raise_exception (a bare TemplateError) and
strftime_now (datetime.now().strftime, pinned to FIXED_NOW here as in make_chat_vectors.py).

Every vector is a template, the index of one of the shared contexts, and either jinja2's output
("expected") or the exception it raised ("error": "Type: message"). A vector that uses a feature
docs/ARCHITECTURE.md lists as rejected by loom carries "loom_error": the words loom's error must
contain (jinja2's output is kept for reference; where jinja2 raised, the vector is a plain error
vector). Outputs that print an object address ("at 0x...", e.g. a generator or a bound method)
differ between runs of jinja2 itself and are dropped, and so are vectors where the int filter made
an integer beyond 64 bits (a documented limit of loom).
"""
import argparse
import datetime as dt
import json
import random
import re
import sys
import warnings
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "chat_templates" / "random_vectors.json"
FIXED_NOW = dt.datetime(2024, 7, 26, 13, 45, 0)
DEFAULT_SEED = 20240726
DEFAULT_COUNT = 4000
N_CONTEXTS = 48


def make_environment():
    """Returns (environment, how it was made)."""
    try:
        from transformers.utils import chat_template_utils as ctu  # noqa: PLC0415

        class _FixedDatetime(dt.datetime):
            @classmethod
            def now(cls, tz=None):
                return FIXED_NOW

        ctu.datetime = _FixedDatetime
        import transformers  # noqa: PLC0415
        env = ctu._compile_jinja_template("{{ 1 }}").environment
        return env, f"transformers {transformers.__version__} _compile_jinja_template"
    except ImportError:
        pass

    class AssistantTracker(Extension):  # transformers' {% generation %}: renders its body as is
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):  # noqa: A002 - transformers' parameter name
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env, "by hand, as transformers' _compile_jinja_template (transformers not installed)"


# ---------------------------------------------------------------------------------------------
# Contexts

WORDS = ["hi", "Hello World", "  pad  ", "a,b,,c", "é", "Zürich", "中文", "<b>&amp;</b>", "",
         "x", "it's", 'say "q"', "line1\nline2", "tab\there", "UPPER lower", "3", "-2.5",
         "{x}", "ab", "ba", "user", "assistant", "hello wORLD 1st", "\u00e9t\u00e9", "Ωμέγα"]
ROLES = ["system", "user", "assistant", "tool"]


def rand_scalar(rng):
    return rng.choice([rng.randint(-5, 20), rng.choice([0.5, -1.25, 2.0, 1e-7, 3.14159, 1e20]),
                       rng.choice(WORDS), rng.choice([True, False, None])])


def rand_message(rng):
    role = rng.choice(ROLES)
    m = {"role": role}
    r = rng.random()
    if r < 0.6:
        m["content"] = rng.choice(WORDS)
    elif r < 0.8:
        parts = []
        for _ in range(rng.randint(0, 3)):
            if rng.random() < 0.7:
                parts.append({"type": "text", "text": rng.choice(WORDS)})
            else:
                parts.append({"type": "image"})
        m["content"] = parts
    elif r < 0.9:
        m["content"] = None
    if role == "assistant" and rng.random() < 0.4:
        calls = []
        for i in range(rng.randint(1, 2)):
            args = {"city": rng.choice(WORDS), "days": rng.randint(1, 3)}
            if rng.random() < 0.5:
                args = json.dumps(args, ensure_ascii=False)
            calls.append({"id": f"call_{i}", "type": "function",
                          "function": {"name": rng.choice(["get_weather", "search"]),
                                       "arguments": args}})
        m["tool_calls"] = calls
    if role == "tool" and rng.random() < 0.5:
        m["tool_call_id"] = "call_0"
    if role == "assistant" and rng.random() < 0.2:
        m["reasoning_content"] = rng.choice(WORDS)
    return m


def rand_context(rng):
    ctx = {
        "s": rng.choice(WORDS),
        "t": rng.choice(WORDS),
        "n": rng.randint(-3, 12),
        "m": rng.randint(1, 5),
        "f": rng.choice([0.5, -1.25, 2.0, 3.14159, 1e-7, 100.0, -0.0, 1.5e300]),
        "b": rng.choice([True, False]),
        "z": None,
        "xs": [rng.randint(-5, 9) for _ in range(rng.randint(0, 5))],
        "ws": [rng.choice(WORDS) for _ in range(rng.randint(0, 4))],
        "d": {k: rand_scalar(rng) for k in rng.sample(["a", "b", "c", "role", "content", "Z"],
                                                       rng.randint(0, 4))},
        "users": [{"name": rng.choice(["ann", "Bob", "cy", "Dee"]), "age": rng.randint(18, 60),
                   "admin": rng.choice([True, False])} for _ in range(rng.randint(0, 4))],
        "messages": [rand_message(rng) for _ in range(rng.randint(0, 5))],
        "add_generation_prompt": rng.choice([True, False]),
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    if rng.random() < 0.5:
        ctx["tools"] = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]
    elif rng.random() < 0.5:
        ctx["tools"] = None
    return ctx


# ---------------------------------------------------------------------------------------------
# Templates

STR_LITERALS = ["'a'", '"b"', "'it\\'s'", '"say \\"hi\\""', "'tab\\there'", "'nl\\n'", "'\\\\'",
                "'é'", "'中文'", "''", "' pad '", "'Hello World'", "'a,b,,c'", "'<tag>&'",
                "'{x}'", "'\\x41'", "'\\u00e9'", "'\\101'", "'ab'", "\"x'y\"", "'user'",
                "'assistant'", "'\\q'", "'a\\\nb'", "'\\r\\n'", "'Ωμέγα'", "'1.5'", "'42'",
                "' 7 '", "'abc'", "'-'", "', '", "'\\t'"]
INT_LITERALS = ["0", "1", "2", "3", "7", "10", "42", "100", "1_000", "-1", "-5", "12"]
FLOAT_LITERALS = ["0.5", "1.5", "-2.25", "1e3", "1.5e-3", "2E2", "0.1", "3.0", "1e20", "1e-7",
                  "123456789.0", "1.0e16", "0.0", "-0.0", "2.675", "1_0.5", "100.0", "1e16"]
CONST_LITERALS = ["none", "None", "true", "True", "false", "False"]
TEXTS = ["x", " ", "\n", "  ", "\n\n", "A\n", "  B  ", "\t", "end\n", ",", " | ", "\n    "]
# Filters loom does not implement (docs/ARCHITECTURE.md: "Rejected with an error naming it and
# its line: ... unknown ... filters"); used by a few vectors that expect that error from loom.
UNSUPPORTED_FILTERS = ["wordcount", "striptags", "center", "truncate", "format", "wordwrap",
                       "urlencode", "xmlattr", "groupby", "attr", "slice", "filesizeformat",
                       "forceescape", "pprint", "urlize"]


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.unsupported = None

    def pick(self, *options):
        return self.rng.choice(options)

    def chance(self, p):
        return self.rng.random() < p

    # --- expressions; `scope` maps variable names to kinds ------------------------------------
    def expr(self, kind, depth, scope):
        if depth <= 0 or self.chance(0.3):
            return self.atom(kind, scope)
        fn = getattr(self, "e_" + kind)
        return fn(depth - 1, scope)

    def var_of(self, kind, scope):
        names = [n for n, k in scope.items() if k == kind]
        return self.rng.choice(names) if names else None

    def atom(self, kind, scope):
        v = self.var_of(kind, scope) if self.chance(0.5) else None
        if v:
            return v
        if kind == "str":
            return self.pick(*STR_LITERALS)
        if kind == "int":
            return self.pick(*INT_LITERALS)
        if kind == "num":
            return self.pick(*(INT_LITERALS + FLOAT_LITERALS))
        if kind == "bool":
            return self.pick("true", "false", "True", "False", "b")
        if kind == "list":
            return self.pick("xs", "ws", "[]", "[1, 2, 3]", "['b', 'a', 'c']", "(1, 2)", "(1,)",
                             "()", "[1, 'a', none, true, 1.5]", "[[1, 2], [3]]", "('x', 'y',)",
                             "[3, 1, 2, 1]", "['B', 'a', 'c', 'a']")
        if kind == "dict":
            return self.pick("d", "{}", "{'a': 1, 'b': [1, 2]}", "{'k': 'v'}",
                             "{\"x\": none, 'y': 1.5}", "users[0]", "messages[0]",
                             "{'role': 'user', 'content': 'hi'}")
        if kind == "msg":
            return self.pick("messages[0]", "messages[-1]", "messages | first",
                             "messages | last")
        return self.any_atom(scope)

    def any_atom(self, scope):
        return self.pick(*(STR_LITERALS + INT_LITERALS + FLOAT_LITERALS + CONST_LITERALS +
                           ["s", "t", "n", "m", "f", "b", "z", "xs", "ws", "d", "nope",
                            "missing", "users", "messages", "tools", "bos_token",
                            "add_generation_prompt", "[1, 'a']", "{'k': 'v'}", "(1, 'x')"] +
                           list(scope)))

    def e_any(self, depth, scope):
        kind = self.pick("str", "int", "num", "bool", "list", "dict", "str", "int")
        if self.chance(0.08):  # deliberately loose: jinja2's errors and coercions
            op = self.pick("+", "-", "*", "~", "==", "<", "in", "and", "or")
            return f"{self.expr('any', depth, scope)} {op} {self.expr('any', depth, scope)}"
        if self.chance(0.1):
            return self.undefined_expr(depth, scope)
        return self.expr(kind, depth, scope)

    def undefined_expr(self, depth, scope):
        return self.pick("nope", "missing", "d.missing", "d['missing']", "z.attr", "nope | d(1)",
                         "nope | default('dflt')", "missing is defined", "nope ~ 'x'",
                         "nope | length", "nope | list", "nope.x", "nope + 1", "z['k']",
                         "users[9]", "xs[99]", "nope | string", "nope | tojson",
                         "nope is none", "(nope or 'fallback')", "nope | upper",
                         "messages[0].nope", "d.get('missing')", "none | d('x', true)")

    def e_str(self, depth, scope):
        r = self.rng.randrange(30)
        e = lambda k: self.expr(k, depth, scope)  # noqa: E731
        if r == 0:
            return f"{e('str')} ~ {e('any')}"
        if r == 1:
            return f"{e('str')} + {e('str')}"
        if r == 2:
            return f"{e('str')} * {self.pick('0', '1', '2', '3', '-1')}"
        if r == 3:
            return f"{e('str')} | {self.pick('upper', 'lower', 'title', 'capitalize', 'trim')}"
        if r == 4:
            return (f"{e('str')} | replace({e('str')}, {e('str')}"
                    f"{self.pick('', ', 1', ', 0', ', -1')})")
        if r == 5:
            return f"{e('list')} | join({self.pick('', repr(', '), repr('|'), e('str'))})"
        if r == 6:
            return f"{e('any')} | string"
        if r == 7:
            ind = self.pick("", "(indent=2)", "(indent=0)", "(sort_keys=true)",
                            "(separators=(',', ':'))", "(ensure_ascii=true)", "(indent=1)")
            return f"{e('any')} | tojson{ind}"
        if r == 8:
            return f"{e('str')}[{self.slice_or_index()}]"
        if r == 9:
            meth = self.pick("strip()", "lstrip()", "rstrip()", "strip('x')", "strip(' a')",
                             "lstrip('a')", "rstrip('\\n ')", "upper()", "lower()", "title()",
                             "capitalize()", "replace('a', 'X')", "replace('', '-')",
                             "replace('l', 'L', 1)", "format(1, 'x')")
            return f"{e('str')}.{meth}"
        if r == 10:
            return f"({e('str')} if {e('bool')} else {e('str')})"
        if r == 11:
            return f"{e('str')} | indent({self.pick('2', '4, true', 'first=true', '2, blank=true', repr('> '))})"
        if r == 12:
            return f"{e('any')} | default({e('str')}{self.pick('', ', true')})"
        if r == 13:
            return f"({e('list')} | first) ~ ''"
        if r == 14:
            return f"{e('str')} | reverse"
        if r == 15:
            fmt = self.pick('"{}-{}"', "'{0}{0}'", "'<{a}>'")
            return f"{fmt}.format({self.pick('1, 2', 'n, s', 'a=s', 'a=1', '[1], none')})"
        if r == 16:
            return f"{self.pick(repr(', '), repr(''), repr('-'))}.join({e('list')})"
        if r == 17:
            return f"{e('msg')}['role']"
        if r == 18:
            return f"{e('dict')} | dictsort | join(',')"
        if r == 19:
            return f"{e('list')} | map({self.pick(repr('string'), repr('upper'), repr('lower'), repr('trim'))}) | join"
        if r == 20:
            return f"(users | map(attribute={self.pick(repr('name'), repr('age'), repr('nope'))}) | join(', '))"
        if r == 21:
            return f"{e('str')} | e"
        if r == 22:
            return f"({e('str')} | safe) ~ {e('str')}"
        if r == 23:
            return f"strftime_now({self.pick(repr('%d %b %Y'), repr('%Y-%m-%d'), repr('%H:%M %A'))})"
        if r == 24:
            return f"{e('str')}.split({self.pick('', repr(','), repr(' '), repr('a'), repr(',') + ', 1')})[{self.pick('0', '-1', '1')}]"
        if r == 25:
            return f"'%s'"  # a plain string that looks like a format (no % operator)
        if r == 26:
            return f"{e('num')} | string"
        if r == 27:
            return f"({e('num')} ~ '')"
        if r == 28:
            return f"{e('str')}.rsplit({self.pick(repr(','), repr(' ') + ', 1', '')}) | join('/')"
        return f"{e('list')} | join(attribute={self.pick(repr('name'), '0')})" if self.chance(0.2) \
            else f"{e('str')}"

    def slice_or_index(self):
        vals = ["", "0", "1", "-1", "2", "-2", "10", "-10"]
        if self.chance(0.35):
            return self.pick("0", "1", "-1", "2", "-2", "n", "m")
        a, b = self.pick(*vals), self.pick(*vals)
        if self.chance(0.4):
            return f"{a}:{b}:{self.pick('1', '-1', '2', '-2', '3', '')}"
        return f"{a}:{b}"

    def e_int(self, depth, scope):
        r = self.rng.randrange(16)
        e = lambda k: self.expr(k, depth, scope)  # noqa: E731
        if r <= 2:
            op = self.pick("+", "-", "*", "//", "%")
            return f"({e('int')} {op} {e('int')})"
        if r == 3:
            return f"{e('int')} ** {self.pick('0', '1', '2', '3')}"
        if r == 4:
            return f"({e(self.pick('str', 'list', 'dict'))} | {self.pick('length', 'count')})"
        if r == 5:
            return f"{e('any')} | int{self.pick('', '(7)', '(default=3)', '(base=16)')}"
        if r == 6:
            return f"-{e('int')}"
        if r == 7:
            return f"{e('int')} | abs"
        if r == 8:
            return f"xs[{self.pick('0', '-1', 'n', '1')}]"
        if r == 9:
            return f"{e('str')}.{self.pick('find', 'count')}({self.pick(repr('a'), repr('l'), repr(''))})"
        if r == 10:
            return f"xs | {self.pick('sum', 'min', 'max', 'length', 'first', 'last')}"
        if r == 11:
            return f"users | sum(attribute='age')"
        if r == 12:
            return e('num') + " | round" + self.pick('', '(1)', '(0, "floor")', '(-1)') + " | int"
        if r == 13:
            return f"{e('list')}.index({e('any')})" if self.chance(0.3) else f"{e('list')}.count({e('any')})"
        if r == 14:
            return f"(n if {e('bool')} else m)"
        return f"{e('int')}"

    def e_num(self, depth, scope):
        r = self.rng.randrange(10)
        e = lambda k: self.expr(k, depth, scope)  # noqa: E731
        if r <= 2:
            op = self.pick("+", "-", "*", "/", "//", "%")
            return f"({e('num')} {op} {e('num')})"
        if r == 3:
            # No fractional exponent: a negative base gives a complex number, which loom does not
            # have (docs/ARCHITECTURE.md: "there are no complex numbers").
            return f"{e('num')} ** {self.pick('0', '1', '2', '-1')}"
        if r == 4:
            return f"{e('any')} | float{self.pick('', '(1.5)')}"
        if r == 5:
            return e('num') + " | round" + self.pick('', '(2)', '(1, "ceil")', '(0, "floor")', '(-1)')
        if r == 6:
            return f"-{e('num')}"
        if r == 7:
            return f"f"
        if r == 8:
            return f"{e('num')} | abs"
        return e("int")

    def e_bool(self, depth, scope):
        r = self.rng.randrange(12)
        e = lambda k: self.expr(k, depth, scope)  # noqa: E731
        cmp = lambda: self.pick("==", "!=", "<", "<=", ">", ">=")  # noqa: E731
        if r <= 1:
            k = self.pick("int", "num", "str", "int")
            return f"{e(k)} {cmp()} {e(k)}"
        if r == 2:
            return f"{e('int')} {self.pick('<', '<=')} {e('int')} {self.pick('<', '<=', '==', '>')} {e('int')}"
        if r == 3:
            return f"{e('bool')} {self.pick('and', 'or')} {e('bool')}"
        if r == 4:
            return f"not {e('bool')}"
        if r == 5:
            c = self.pick("str", "list", "dict")
            item = "str" if c != "list" else self.pick("int", "str")
            return f"{e(item)} {self.pick('in', 'not in')} {e(c)}"
        if r == 6 or r == 7:
            t = self.pick("defined", "undefined", "none", "string", "number", "integer", "float",
                          "boolean", "mapping", "iterable", "sequence", "true", "false", "even",
                          "odd", "divisibleby 3", "divisibleby(2)", "eq 1", "equalto 'a'",
                          "ne 2", "lt 3", "le 0", "gt 1", "ge 2", "in [1, 2]", "in 'abc'",
                          "lower", "upper", "sameas none", "callable", "== 3", "!= 'x'",
                          "greaterthan 1", "lessthan 4")
            return f"{e('any')} is {self.pick('', 'not ')}{t}"
        if r == 8:
            return f"{e('str')}.{self.pick('startswith', 'endswith')}({self.pick(repr('a'), repr('H'), repr(''), repr('<'), '(' + repr('x') + ', ' + repr('a') + ')')})"
        if r == 9:
            return f"({e('any')} {self.pick('and', 'or')} {e('any')}) | string"
        if r == 10:
            return f"{e('any')} == {e('any')}"
        return e("any") if self.chance(0.5) else self.pick("b", "true", "false", "add_generation_prompt")

    def e_list(self, depth, scope):
        r = self.rng.randrange(20)
        e = lambda k: self.expr(k, depth, scope)  # noqa: E731
        if r == 0:
            items = ", ".join(e("any") for _ in range(self.rng.randint(0, 3)))
            return f"[{items}]"
        if r == 1:
            items = ", ".join(e("any") for _ in range(self.rng.randint(1, 3)))
            return f"({items},)"
        if r == 2:
            return f"{e('str')}.split({self.pick('', repr(','), repr(' '), repr(',') + ', 1', 'none, 1')})"
        if r == 3:
            sort = self.pick("sort", "sort(reverse=true)", "sort(case_sensitive=true)",
                             "sort(attribute='age')", "sort(attribute='name', reverse=true)")
            if "attribute" in sort:
                return f"users | {sort} | map(attribute='name') | list"
            return f"{e('list')} | {sort}"
        if r == 4:
            return f"{e('list')} | {self.pick('reverse', 'unique', 'list')} | list"
        if r == 5:
            return f"{e('list')} | map({self.pick(repr('string'), repr('int'), repr('abs'), repr('length'), repr('first'))}) | list"
        if r == 6:
            return f"{e('list')} | {self.pick('select', 'reject')}({self.pick('', repr('odd'), repr('even'), repr('none'), repr('string'), repr('defined'), repr('gt') + ', 1', repr('in') + ', [1, 2]')}) | list"
        if r == 7:
            attr, test = self.pick(("'admin'", ""), ("'age'", ", 'gt', 30"), ("'name'", ", 'equalto', 'ann'"),
                                   ("'name'", ", 'in', ['ann', 'cy']"), ("'nope'", ""), ("'age'", ", 'even'"))
            return f"users | {self.pick('selectattr', 'rejectattr')}({attr}{test}) | map(attribute='name') | list"
        if r == 8:
            return f"messages | selectattr('role', {self.pick(repr('equalto'), repr('eq'), repr('ne'))}, {self.pick(repr('user'), repr('assistant'))}) | map(attribute={self.pick(repr('role'), repr('content'))}) | list"
        if r == 9:
            return f"{e('dict')}.{self.pick('keys()', 'values()', 'items()')} | list"
        if r == 10:
            return f"{e('dict')} | {self.pick('items', 'dictsort', 'list', 'dictsort(reverse=true)', 'dictsort(true)', 'dictsort(by=' + repr('value') + ')')} | list"
        if r == 11:
            return f"{e('list')}[{self.slice_or_index() if self.chance(0.2) else self.pick('1:', ':-1', '::-1', '::2', '-2:', '1:3', ':0')}]"
        if r == 12:
            return f"{e('list')} + {e('list')}"
        if r == 13:
            return f"range({self.pick('3', '0', '1, 4', '5, 0, -2', '-2', '0, 10, 3', 'm')}) | list"
        if r == 14:
            return f"{e('list')} | batch({self.pick('2', '3', '2, 0')}) | list"
        if r == 15:
            return f"{e('str')} | list"
        if r == 16:
            return f"{e('list')} * {self.pick('0', '2', '-1')}"
        if r == 17:
            return f"(messages | map(attribute='content') | list)"
        if r == 18:
            return f"({e('list')} if {e('bool')} else {e('list')})"
        return self.atom("list", scope)

    def e_dict(self, depth, scope):
        r = self.rng.randrange(6)
        e = lambda k: self.expr(k, depth, scope)  # noqa: E731
        if r == 0:
            keys = self.rng.sample(["'a'", "'b'", '"c"', "'role'", "'content'", "'é'"],
                                   self.rng.randint(0, 3))
            return "{" + ", ".join(f"{k}: {e('any')}" for k in keys) + "}"
        if r == 1:
            return f"dict({self.pick('', 'a=1', 'a=s, b=xs', 'role=' + repr('user'))})"
        if r == 2:
            return f"users[{self.pick('0', '-1', 'n', '1')}]"
        if r == 3:
            return f"messages[{self.pick('0', '-1', '1')}]"
        if r == 4:
            return f"(tools[0] if tools else d)"
        return self.atom("dict", scope)

    def e_msg(self, depth, scope):
        return self.atom("msg", scope)

    # --- statements ---------------------------------------------------------------------------
    def out(self, expr):
        lo, ro = self.pick("{{", "{{", "{{", "{{-"), self.pick("}}", "}}", "}}", "-}}")
        return f"{lo} {expr} {ro}"

    def tag(self, body):
        lo = self.pick("{%", "{%", "{%", "{%-", "{%+")
        ro = self.pick("%}", "%}", "%}", "-%}", "+%}")
        t = f"{lo} {body} {ro}"
        r = self.rng.random()
        if r < 0.2:  # own line, indented: trim_blocks / lstrip_blocks at work
            return self.pick("\n", "\n  ", "\n\t", "  ") + t + self.pick("\n", "\n\n", "  \n", "")
        return t

    def body(self, depth, scope, loop=False):
        return "".join(self.stmt(depth, scope, loop) for _ in range(self.rng.randint(1, 3)))

    def stmt(self, depth, scope, loop):
        r = self.rng.randrange(100)
        if depth <= 0 or r < 18:
            return self.pick(*TEXTS)
        if r < 45:
            return self.out(self.expr(self.pick("any", "str", "int", "num", "bool", "list", "dict"),
                                      self.rng.randint(1, 3), scope))
        if r < 56:
            s = self.tag(f"if {self.expr('bool', 2, scope)}") + self.body(depth - 1, scope, loop)
            for _ in range(self.rng.choice([0, 0, 1, 2])):
                s += self.tag(f"elif {self.expr('bool', 2, scope)}") + self.body(depth - 1, scope, loop)
            if self.chance(0.5):
                s += self.tag("else") + self.body(depth - 1, scope, loop)
            return s + self.tag("endif")
        if r < 72:
            return self.for_stmt(depth, scope)
        if r < 80:
            return self.set_stmt(scope)
        if r < 84:
            return self.namespace_stmt(depth, scope)
        if r < 88:
            return self.macro_stmt(depth, scope)
        if r < 91:
            return self.pick("{# c #}", "{#- trims -#}", "{# multi\nline #}", "\n  {# own line #}\n",
                             "{#- x #}", "{# {{ not }} {% code %} #}")
        if r < 93:
            return self.pick("{% raw %}{{ x }}{% if %}{% endraw %}", "{%- raw -%} a {{ b }} {%- endraw -%}",
                             "{% raw %}\n  {% x %}\n{% endraw %}\n")
        if r < 95 and loop:
            return self.tag(f"if {self.expr('bool', 1, scope)}") + self.tag(self.pick("break", "continue")) + self.tag("endif")
        if r < 97:
            return self.tag("filter " + self.pick("upper", "trim", "lower")) + self.body(depth - 1, scope, loop) + self.tag("endfilter")
        if r < 99 or self.chance(0.7):
            return self.tag("generation") + self.body(depth - 1, scope, loop) + self.tag("endgeneration")
        return self.unsupported_stmt(scope)

    def unsupported_stmt(self, scope):
        name = self.pick(*UNSUPPORTED_FILTERS)
        self.unsupported = f"no filter named '{name}'"
        arg = {"center": "(9)", "truncate": "(3)", "wordwrap": "(3)", "groupby": "('name')",
               "attr": "('x')", "slice": "(2)", "format": "(1)"}.get(name, "")
        return self.out(f"{self.expr('any', 1, scope)} | {name}{arg}")

    def for_stmt(self, depth, scope):
        inner = dict(scope)
        r = self.rng.randrange(9)
        if r == 0:
            head, inner["x"] = f"x in {self.pick('xs', '[3, 1, 2]', 'range(4)', 'range(m)', 'xs | sort', 'xs | reverse')}", "int"
        elif r == 1:
            head, inner["w"] = "w in " + self.pick('ws', 's', 's.split()', 'ws | unique', '("a", "b")'), "str"
        elif r == 2:
            head, inner["u"] = "u in " + self.pick('users', 'users | sort(attribute="age")', 'users | selectattr("admin")'), "dict"
        elif r in (3, 4):
            head, inner["message"] = "message in " + self.pick('messages', 'messages[1:]', 'messages | reverse', 'messages | rejectattr("role", "eq", "system")'), "msg"
        elif r == 5:
            inner["k"], inner["v"] = "str", "any"
            head = "k, v in " + self.pick('d.items()', 'd | items', 'd | dictsort', '{"a": 1, "b": 2}.items()')
        elif r == 6:
            inner["a"], inner["c"] = "any", "any"
            head = "a, c in " + self.pick('[(1, 2), (3, 4)]', '[[1, "x"]]', 'xs | batch(2)', '["ab", "cd"]', '[1]')
        elif r == 7:
            head, inner["tc"] = f"tc in {self.pick('message.tool_calls', 'messages[-1].tool_calls', '(messages | last).tool_calls')}", "dict"
            if "message" not in scope and "message." in head:
                head = head.replace("message.", "messages[0].")
        else:
            head, inner["y"] = f"y in {self.expr('list', 2, scope)}", "any"
        if self.chance(0.2):
            head += f" if {self.expr('bool', 1, inner)}"
        for lv, k in (("loop.index", "int"), ("loop.index0", "int"), ("loop.first", "bool"),
                      ("loop.last", "bool"), ("loop.length", "int"), ("loop.revindex", "int"),
                      ("loop.revindex0", "int")):
            inner[lv] = k
        inner["loop.previtem"] = "any"
        inner["loop.nextitem"] = "any"
        inner["loop.cycle('odd', 'even')"] = "str"
        s = self.tag(f"for {head}") + self.body(depth - 1, inner, loop=True)
        if self.chance(0.25):
            s += self.tag("else") + self.body(depth - 1, scope)
        return s + self.tag("endfor")

    def set_stmt(self, scope):
        r = self.rng.randrange(5)
        if r == 0:
            k = self.pick("str", "int", "list", "any", "dict")
            scope["v1"] = k
            return self.tag(f"set v1 = {self.expr(k, 2, scope)}") + self.out("v1")
        if r == 1:
            scope["p"], scope["q"] = "any", "any"
            rhs = self.pick(f"{self.expr('any', 1, scope)}, {self.expr('any', 1, scope)}",
                            "[1, 2]", "'ab'", "(1, 2, 3)", "d.items() | first", "xs")
            return self.tag(f"set p, q = {rhs}") + self.out("p ~ '/' ~ q")
        if r == 2:
            scope["blk"] = "str"
            filt = self.pick("", " | trim", " | upper", " | trim | length")
            return (self.tag(f"set blk{filt}") + self.body(1, scope) + self.tag("endset") +
                    self.out("'[' ~ blk ~ ']'"))
        # Not a context variable's name: a name set in a frame after a nested frame (a for body,
        # a macro, a block) read it is undefined there in jinja2, but the context's value in loom
        # (docs/ARCHITECTURE.md: "A name a frame sets after ... reads as the context's value").
        if r == 3:
            scope["n1"] = "int"
            return self.tag(f"set n1 = {self.expr('int', 2, scope)}")
        scope["s1"] = "str"
        return self.tag(f"set s1 = {self.expr('str', 2, scope)}")

    def namespace_stmt(self, depth, scope):
        init = self.pick("namespace(k=0, last='')", "namespace(k=0)", "namespace(last=none, k=1)")
        s = self.tag(f"set ns = {init}")
        loop_src = self.pick("messages", "xs", "ws", "users", "range(3)")
        s += self.tag(f"for it in {loop_src}")
        s += self.tag(f"if {self.pick('loop.index is odd', 'it', 'not loop.first', 'true')}")
        s += self.tag(f"set ns.k = ns.k + {self.pick('1', 'loop.index', '2')}")
        s += self.tag("endif")
        if "last" in init:
            s += self.tag("set ns.last = it")
        s += self.tag("endfor")
        return s + self.out(self.pick("ns.k", "ns.last", "ns.k ~ '|' ~ ns.last", "ns", "ns.missing"))

    def macro_stmt(self, depth, scope):
        inner = dict(scope)
        inner["p1"], inner["p2"] = "any", "str"
        params = self.pick("p1", "p1, p2='dflt'", "p1=1, p2=''", "p1, p2=none")
        body = self.body(max(1, depth - 1), inner)
        s = self.tag(f"macro mac({params})") + body + self.tag("endmacro")
        calls = []
        for _ in range(self.rng.randint(1, 2)):
            args = self.pick("1", "'a', 'b'", "p2='kw', p1=2", "s", "xs", "", "1, 2, 3", "q=1",
                             "p1=none")
            calls.append(self.out(f"mac({args})" + self.pick("", " | trim", " ~ '!'", " | length")))
        return s + "".join(calls)

    def template(self):
        self.unsupported = None
        scope = {"s": "str", "t": "str", "n": "int", "m": "int", "f": "num", "b": "bool",
                 "xs": "list", "ws": "list", "d": "dict", "bos_token": "str"}
        text = "".join(self.stmt(self.rng.randint(1, 3), scope, False)
                       for _ in range(self.rng.randint(1, 4)))
        if self.chance(0.1):
            text += self.pick("\n", "\r\n", "\n\n")
        if self.chance(0.03):
            text = text.replace("\n", "\r\n")
        return text


ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# Set when the int filter made an integer outside 64 bits: loom's integers are 64-bit and
# overflow is an error (docs/ARCHITECTURE.md: "Integers are 64-bit (overflow is an error)"), so
# such vectors are dropped.
BIG_INT = []


def watch_int_filter(env):
    do_int = env.filters["int"]

    def int_filter(*args, **kwargs):
        r = do_int(*args, **kwargs)
        if not -2**63 <= r < 2**63:
            BIG_INT.append(r)
        return r

    env.filters["int"] = int_filter


def without_unsupported(env):
    """`env` as loom sees it: the filters loom does not have (UNSUPPORTED_FILTERS) removed, so
    that naming one fails as jinja2 fails on an unknown name — at compile time, or, in an if or a
    conditional expression, only when it runs (loom does the same: ValidateNames)."""
    rv = env.overlay()
    rv.filters = {k: v for k, v in env.filters.items() if k not in UNSUPPORTED_FILTERS}
    return rv


def names_outside_soft_frames(env, text, names):
    """Whether a filter or test named in `names` appears outside jinja2's soft frames (an if's
    condition and bodies, an inline if), which open again at a for, block or macro."""
    inner = (nodes.For, nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.AssignBlock,
             nodes.With, nodes.Scope)

    def walk(node, soft):
        if isinstance(node, (nodes.Filter, nodes.Test)) and node.name in names and not soft:
            return True
        if isinstance(node, nodes.For):  # the iterable is in the enclosing frame
            return walk(node.iter, soft) or any(walk(c, False) for c in (
                node.target, node.test, *node.body, *node.else_) if c is not None)
        if isinstance(node, nodes.If):
            soft = True
        elif isinstance(node, nodes.CondExpr):
            soft = True
        elif isinstance(node, inner):
            soft = False
        return any(walk(c, soft) for c in node.iter_child_nodes())

    return walk(env.parse(text), False)


def unknown_names(env, text):
    """The first filter or test `text` names that loom does not have (UNSUPPORTED_FILTERS) or
    that jinja2 does not have either (a dotted name, say)."""
    try:
        tree = env.parse(text)
    except jinja2.TemplateSyntaxError:
        return None
    for node in tree.find_all((nodes.Filter, nodes.Test)):
        if isinstance(node, nodes.Filter) and (node.name not in env.filters or
                                               node.name in UNSUPPORTED_FILTERS):
            return f"no filter named '{node.name}'"
        if isinstance(node, nodes.Test) and node.name not in env.tests:
            return f"no test named '{node.name}'"
    return None


def render(env, text, ctx):
    BIG_INT.clear()
    try:
        out = env.from_string(text).render(**ctx)
        return {"expected": out}
    except Exception as e:  # noqa: BLE001 - record whatever jinja2 raises
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    # Compiling a random template warns ('int' object is not subscriptable, invalid escape).
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    env, how = make_environment()
    watch_int_filter(env)
    loom_env = without_unsupported(env)
    rng = random.Random(args.seed)
    contexts = [rand_context(rng) for _ in range(N_CONTEXTS)]
    gen = Gen(rng)
    vectors, seen = [], set()
    stats = {"rendered": 0, "raised": 0, "unsupported": 0, "dropped_address": 0,
             "dropped_big_int": 0, "dropped_unsupported_differs": 0, "dropped_folded": 0}
    while len(vectors) < args.count:
        text = gen.template()
        if text in seen or len(text) > 600:
            continue
        seen.add(text)
        ci = rng.randrange(N_CONTEXTS)
        r = render(env, text, contexts[ci])
        if ADDRESS.search(r.get("expected", "") + r.get("error", "")):
            stats["dropped_address"] += 1
            continue
        if BIG_INT:
            stats["dropped_big_int"] += 1
            continue
        v = {"template": text, "context": ci}
        v.update(r)
        unknown = unknown_names(env, text)
        if unknown:
            # Rendered without the filters loom lacks: where that fails on the name, loom's error
            # is expected (also where jinja2 with the filter failed later, running it); where the
            # name is never reached (an if not taken), jinja2's output or error.
            r2 = render(loom_env, text, contexts[ci])
            e2 = r2.get("error", "")
            named = re.search(r"No (filter|test) named '([^']*)'", e2)
            if named:  # the name it failed on (not always the first one the text names)
                v["loom_error"] = f"no {named.group(1)} named '{named.group(2)}'"
                stats["unsupported"] += 1
            elif r2 != r:
                stats["dropped_unsupported_differs"] += 1
                continue
            elif names_outside_soft_frames(env, text, UNSUPPORTED_FILTERS):
                # jinja2's optimizer folded the name away before checking it (`1 or x | nope`):
                # loom checks every name outside an if (docs/ARCHITECTURE.md, ValidateNames).
                stats["dropped_folded"] += 1
                continue
            else:
                stats["raised" if "error" in r else "rendered"] += 1
        elif "error" in r:
            stats["raised"] += 1
        else:
            stats["rendered"] += 1
        vectors.append(v)
    doc = {"generator": "tools/ref/make_jinja_random_vectors.py", "seed": args.seed,
           "count": args.count, "jinja2": jinja2.__version__, "environment": how,
           "fixed_now": FIXED_NOW.isoformat(), "contexts": contexts}
    # One vector a line: small diffs when the generator changes, and a readable file.
    lines = [json.dumps(doc, ensure_ascii=False)[:-1] + ', "vectors": [']
    lines += [json.dumps(v, ensure_ascii=False) + ("," if i + 1 < len(vectors) else "")
              for i, v in enumerate(vectors)]
    lines.append("]}")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(vectors)} vectors, {args.out.stat().st_size} bytes: {stats}", file=sys.stderr)


if __name__ == "__main__":
    main()
