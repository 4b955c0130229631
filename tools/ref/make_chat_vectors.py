#!/usr/bin/env python3
"""Chat-template reference vectors: renders every real chat template with jinja2 exactly as
transformers does and writes tests/fixtures/chat_templates/{*.jinja, cases.json, PROVENANCE.md}.

Run with the reference venv (jinja2 + transformers):
    /work/refenv/bin/python tools/ref/make_chat_vectors.py

Rendering goes through transformers' own `render_jinja_template` (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, its tojson / raise_exception / strftime_now / namespace
/ dict) after `_normalize_chat_messages`, so the output is what `apply_chat_template(...,
tokenize=False)` returns. strftime_now is pinned to FIXED_NOW for reproducibility; loom's test
injects the same time.

Sources: ../shared/fixtures/tokenizers/*/tokenizer_config*.json (chat_template string or named
list), chat_template.jinja / chat_template.json in those folders, and
../shared/fixtures/chat_templates/ (llama.cpp *.jinja, onnxruntime-extensions, and ollama's
index.json / templates.jsonl, which hold the Hugging Face Jinja templates ollama maps to its own
Go templates; the Go templates themselves are not Jinja and are not in the fixtures).
"""
import datetime as dt
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

ROOT = Path(__file__).resolve().parents[2]
SHARED = (ROOT / ".." / "shared" / "fixtures").resolve()
OUT = ROOT / "tests" / "fixtures" / "chat_templates"
FIXED_NOW = dt.datetime(2024, 7, 26, 13, 45, 0)


class _FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime  # strftime_now() reads the module-level name at call time

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "description": "Forecast days"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
                "required": ["query"],
            },
        },
    },
]

CONVERSATIONS = {
    "single_turn": [{"role": "user", "content": "Hello! What's 2+2?"}],
    "system_multi_turn": [
        {"role": "system", "content": "You are a concise assistant. Answer in one line."},
        {"role": "user", "content": "Name a prime number.\n  Just one, please.  "},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another — in 中文, with \"quotes\" and an emoji 🎉?"},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke about <tags> & {braces}."},
    ],
    "starts_with_assistant": [
        {"role": "assistant", "content": "I speak first."},
        {"role": "user", "content": "Odd."},
    ],
    "tool_call": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Zürich?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1a2b3c4d5",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1a2b3c4d5", "name": "get_weather",
         "content": "{\"temperature\": 21.5, \"sky\": \"sunny\"}"},
        {"role": "user", "content": "Thanks!"},
    ],
    "tools_available": [
        {"role": "user", "content": "Search for loom inference servers."},
    ],
    "tool_call_string_arguments": [
        {"role": "user", "content": "Search for jinja."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9z8y7x6w5", "type": "function",
             "function": {"name": "search", "arguments": "{\"query\": \"jinja\", \"limit\": 3}"}}]},
        {"role": "tool", "tool_call_id": "call_9z8y7x6w5", "content": "[\"jinja.palletsprojects.com\"]"},
    ],
    "reasoning": [
        {"role": "user", "content": "What is 3*4?"},
        {"role": "assistant", "content": "12", "reasoning_content": "3 times 4 is 12."},
        {"role": "user", "content": "And 5*6?"},
    ],
    "multimodal_content": [
        {"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    ],
}


def token_text(tok):
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def collect():
    """Returns [(source_label, provenance_path, template, bos, eos)]."""
    found = []
    for d in sorted((SHARED / "tokenizers").iterdir()):
        specials = {}
        stm = d / "special_tokens_map.json"
        if stm.exists():
            specials.update(json.loads(stm.read_text()))
        for cfg in sorted(d.glob("tokenizer_config*.json")):
            conf = json.loads(cfg.read_text())
            bos = token_text(conf.get("bos_token", specials.get("bos_token")))
            eos = token_text(conf.get("eos_token", specials.get("eos_token")))
            ct = conf.get("chat_template")
            rel = cfg.relative_to(SHARED).as_posix()
            if isinstance(ct, str):
                found.append((f"{rel}", rel, ct, bos, eos))
            elif isinstance(ct, list):
                for t in ct:
                    found.append((f"{rel}#{t['name']}", rel, t["template"], bos, eos))
            for name in ("chat_template.jinja", "chat_template.json"):
                f = d / name
                if f.exists() and cfg.name == "tokenizer_config.json":
                    text = f.read_text(encoding="utf-8")
                    if name.endswith(".json"):
                        text = json.loads(text)["chat_template"]
                    found.append((f.relative_to(SHARED).as_posix(), f.relative_to(SHARED).as_posix(),
                                  text, bos, eos))
    ct_dir = SHARED / "chat_templates"
    for f in sorted((ct_dir / "llama.cpp").glob("*.jinja")):
        rel = f.relative_to(SHARED).as_posix()
        found.append((rel, rel, f.read_text(encoding="utf-8"), "<s>", "</s>"))
    for f in sorted((ct_dir / "onnxruntime-extensions").iterdir()):
        rel = f.relative_to(SHARED).as_posix()
        text = f.read_text(encoding="utf-8")
        if f.suffix == ".json":
            text = json.loads(text)["chat_template"]
        found.append((rel, rel, text, "<bos>", "<eos>"))
    index = json.loads((ct_dir / "ollama" / "index.json").read_text())
    for i, entry in enumerate(index):
        rel = "chat_templates/ollama/index.json"
        found.append((f"{rel}#{i}:{entry['name']}", rel, entry["template"], "<s>", "</s>"))
    rel = "chat_templates/ollama/templates.jsonl"
    for i, line in enumerate((ct_dir / "ollama" / "templates.jsonl").read_text().splitlines()):
        for name, text in json.loads(line).items():
            found.append((f"{rel}#{i}:{name}", rel, text, "<s>", "</s>"))
    return found


def slug(label):
    label = re.sub(r"^(chat_templates|tokenizers)/", "", label)
    label = re.sub(r"\.(jinja|json)(?=$|#)", "", label)
    s = re.sub(r"[^A-Za-z0-9.]+", "_", label).strip("_")
    return s[:90]


def render(template, messages, tools, agp, bos, eos):
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[ctu._normalize_chat_messages(messages)],
            tools=tools,
            chat_template=template,
            add_generation_prompt=agp,
            **kwargs,
        )
        return {"expected": rendered[0]}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": {"type": type(e).__name__, "message": str(e), "raised": False}}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception() raises a bare TemplateError: its message is what loom must report.
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": {"type": type(e).__name__, "message": str(e), "raised": raised}}
    except Exception as e:  # TypeError etc. from inside the template
        return {"error": {"type": type(e).__name__, "message": str(e), "raised": False}}


# Targeted constructs for tests/unit/jinja_interpreter_test.cc: (name, template, context).
SNIPPETS = [
    ("text_only", "hello\n", {}),
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for_prev_next_cycle", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {{ loop.cycle('a', 'b') }};{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter_if", "{% for x in range(10) if x is odd %}{{ x }}{{ '.' if not loop.last }}{% endfor %} {{ loop }}", {}),
    ("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": [1, 2]}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "y": 2}}),
    ("for_scope", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("set_tuple_and_block", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set blk %}  inner {{ a }}  {% endset %}[{{ blk }}]{% set t | trim | upper %} x {% endset %}[{{ t }}]", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", {}),
    ("macro_defaults", "{% macro greet(name, punct='!', twice=false) %}Hi {{ name }}{{ punct }}{% if twice %}{{ greet(name, punct) }}{% endif %}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', '?') }} {{ greet(name='Cy', twice=true) }} {{ greet() }}|", {}),
    ("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}done", {}),
    ("comments", "a{# a comment #}b\n  {# own line #}\nc{#- trims -#}  d", {}),
    ("whitespace_control", "x  {{- ' y ' -}}  z\n{%- if true -%}\n  w\n{%- endif %}\n", {}),
    ("trim_lstrip_blocks", "<ul>\n    {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n    {% endfor %}\n</ul>\n  {%+ if true %}kept{% endif %}\n{% if true +%}\nnl\n{% endif %}", {}),
    ("arithmetic", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 4 * 2 }} {{ -3 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e20 }} {{ 3.0 }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ undefined_var ~ [1] }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'a' }} {{ 1 < 2 < 3 }} {{ [1, 2] == [1, 2] }} {{ none == none }}", {}),
    ("in_not_in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in 'abc' }} {{ 3 not in [1] }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or '' or 'z' }} {{ [] and 1 }}", {}),
    ("cond_expr", "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if false }}]", {}),
    ("subscript_slice", "{{ s[0] }}{{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ l[1:] }} {{ l[:-1] }} {{ l[-2:] }} {{ l[5:] }} {{ l[10] }}|{{ s[-2::-2] }}", {"s": "héllo", "l": [1, 2, 3]}),
    ("attr_and_item", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} [{{ d.missing }}] {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", {"d": {"a": 1, "b": {"c": 2}}}),
    ("literals", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ \"it's\" }} {{ 'say \"hi\"' }} {{ ['a\\nb'] }}", {}),
    ("print_values", "{{ none }} {{ true }} {{ false }} {{ 12 }} {{ -0.5 }} {{ [none, false] }} {{ undefined_thing }}", {}),
    ("string_methods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}|{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a-b-c'.split('-', 1) }}{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'aXbX'.replace('X', '_') }}|{{ 'hello wORLD 1st'.title() }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'abc'.capitalize() }}|{{ '{}-{}'.format(1, 'x') }}{{ '{a}!'.format(a=2) }}|{{ ', '.join(['x', 'y']) }}|{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}", {}),
    ("dict_methods", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d | length }}", {"d": {"x": 1, "y": 2}}),
    ("filters_text", "{{ '  pad  ' | trim }}|{{ 'xhix' | trim('x') }}|{{ 'Hi' | upper }}{{ 'Hi' | lower }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello-world foo(bar)' | title }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 3 | string }}{{ none | string }}|{{ '<a&b>' | e }}|{{ 'x' | safe }}", {}),
    ("filters_default", "{{ missing | default('d') }} {{ missing | d('d2') }} {{ '' | default('e', true) }} {{ 0 | default(5) }} {{ none | default('n') }}", {}),
    ("filters_length", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ missing | length }}", {}),
    ("filters_join_list", "{{ [1, 2, 3] | join(', ') }} {{ 'abc' | list }} {{ users | join('/', attribute='name') }} {{ [1, 2] | first }}{{ [1, 2] | last }}", {"users": [{"name": "a"}, {"name": "b"}]}),
    ("filters_select", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ msgs | selectattr('tool') | list }} {{ ['a', 'B'] | map('upper') | list }}", {"msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1", "tool": 1}, {"role": "user", "content": "u2"}]}),
    ("filters_numbers", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 7 | round }}", {}),
    ("filters_tojson", "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(sort_keys=true) }}\n{{ 'é' | tojson(ensure_ascii=true) }}{{ v | tojson(separators=(',', ':')) }}{{ [] | tojson(indent=2) }}{{ 1.0 | tojson }}", {"v": {"b": [1, 2.5, "é\n\"q\" <tag>"], "a": None, "t": True, "e": {}}}),
    ("filters_indent", "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(4, first=true) }}|{{ 'a\n\nb' | indent('> ', blank=true) }}", {}),
    ("filters_sort_unique", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ users | sort(attribute='age') | map(attribute='name') | join }} {{ ['a', 'A', 'b', 'a'] | unique | list }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ d | dictsort }} {{ [1, 2, 3, 4, 5] | batch(2) | list }}", {"users": [{"name": "x", "age": 30}, {"name": "y", "age": 20}], "d": {"b": 1, "a": 2}}),
    ("filters_min_max_sum", "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2.5] | sum }}", {}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ 1 is integer }}{{ 1.5 is float }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'a' is equalto 'a' }}{{ 1 is eq 2 }}{{ 2 is in [1, 2] }}{{ x is not none }}{{ range is callable }}{{ 'abc' is lower }}{{ 2 is gt 1 }}", {"x": 1, "n": None}),
    ("undefined_semantics", "[{{ nope }}][{{ nope | trim }}][{% for a in nope %}x{% endfor %}][{{ nope is none }}][{{ 'a' in nope }}][{{ nope == nope2 }}][{{ nope | length }}][{% if nope %}t{% else %}f{% endif %}][{{ d.missing_key is defined }}]", {"d": {}}),
    ("none_attribute_is_undefined", "[{{ n.attr }}][{{ n['k'] }}][{{ n.attr is defined }}]", {"n": None}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%A %B %j') }}", {}),
    ("range_forms", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict(a=1).a }}", {}),
    ("nested_macro_loop", "{%- macro render(items) -%}{%- for i in items -%}{{ i.name }}{% if i.children %}({{ render(i.children) }}){% endif %}{{ ',' if not loop.last }}{%- endfor -%}{%- endmacro -%}{{ render(tree) }}", {"tree": [{"name": "a", "children": [{"name": "b"}, {"name": "c", "children": [{"name": "d"}]}]}, {"name": "e"}]}),
    ("markup_safe_concat", "{{ '<b>' | safe + '<i>' }} {{ 'a&' + ('<x>' | safe) }} {{ ('x' | safe) ~ '<' }} {{ '<' | e + '>' | e }} {{ (' <p> ' | safe) | trim + '&' }}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}", {}),
    ("generation_block", "{% for m in messages %}{% generation %}{{ m }}{% endgeneration %}{% endfor %}", {"messages": ["a", "b"]}),
    ("string_escapes", "{{ 'tab\\there' }}|{{ \"uni\\u00e9\" }}|{{ 'nl\\n' }}|{{ 'q\\'s' }}", {}),
    ("multiline_tag", "{%\n  set x = [\n    1,\n    2\n  ]\n%}\n{{ x\n  | length }}", {}),
    ("crlf_and_trailing_newline", "a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n", {}),
    ("generator_values", "{{ (['a'] | map('upper')) is iterable }} {{ [] | select | list }} {% if [] | select %}gen-truthy{% endif %}", {}),
    ("int_float_edge", "{{ 10 / 5 }} {{ 2 ** -1 }} {{ 1e16 }} {{ 123456789.0 }} {{ 0.0001 }} {{ 1 / 3 }} {{ -0.0 }}", {}),
]

# Snippets jinja2 rejects; loom must reject them too (the C++ test checks loom's own message).
ERROR_SNIPPETS = [
    ("unknown_filter", "line\n{{ x | no_such_filter }}", {}),
    ("unknown_test", "{% if x is no_such_test %}{% endif %}", {}),
    ("unknown_tag", "{% frobnicate %}", {}),
    ("unclosed_if", "{% if true %}never closed", {}),
    ("unclosed_string", "{{ 'abc }}", {}),
    ("raise_exception", "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", {}),
    ("undefined_attribute_chain", "{{ nope.attr }}", {}),
    ("call_undefined", "{{ nope() }}", {}),
    ("add_str_int", "{{ 'a' + 1 }}", {}),
    ("iterate_none", "{% for x in n %}{% endfor %}", {"n": None}),
    ("tojson_undefined", "{{ nope | tojson }}", {}),
    ("list_append_unsafe", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("range_too_big", "{{ range(1000000) | length }}", {}),
    ("division_by_zero", "{{ 1 / 0 }}", {}),
    ("compare_int_str", "{{ 1 < 'a' }}", {}),
    ("include_tag", "{% include 'other.jinja' %}", {}),
    ("break_outside_loop", "{% break %}", {}),
]


def render_snippets():
    env = ctu._compile_jinja_template("{{ 1 }}").environment
    ok, errors = [], []
    for name, text, ctx in SNIPPETS:
        out = env.from_string(text).render(**ctx)
        ok.append({"name": name, "template": text, "context": ctx, "expected": out})
    for name, text, ctx in ERROR_SNIPPETS:
        try:
            env.from_string(text).render(**ctx)
            raise SystemExit(f"snippet {name} was expected to fail in jinja2")
        except Exception as e:  # noqa: BLE001 - record whatever jinja2 raises
            errors.append({"name": name, "template": text, "context": ctx,
                           "jinja2_error": f"{type(e).__name__}: {e}"})
    doc = {"generator": "tools/ref/make_chat_vectors.py", "jinja2": jinja2.__version__,
           "fixed_now": FIXED_NOW.isoformat(), "snippets": ok, "errors": errors}
    (OUT / "snippets.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                                       encoding="utf-8")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    render_snippets()
    for old in OUT.glob("*.jinja"):
        old.unlink()
    templates = {}  # sha → {file, sources, bos, eos, text}
    for label, prov, text, bos, eos in collect():
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        key = (sha, bos, eos)
        if key not in templates:
            name = slug(label) + ".jinja"
            templates[key] = {"file": name, "sources": [], "bos_token": bos, "eos_token": eos,
                              "text": text, "provenance": set()}
        templates[key]["sources"].append(label)
        templates[key]["provenance"].add(prov)
    cases = []
    summary = {"ok": 0, "raised": 0, "other_error": 0}
    for t in templates.values():
        (OUT / t["file"]).write_bytes(t["text"].encode("utf-8"))
        uses_tools = "tools" in t["text"] or "tool_calls" in t["text"]
        uses_reasoning = "reasoning_content" in t["text"] or "thinking" in t["text"]
        uses_content_parts = any(k in t["text"] for k in ("is string", "'text'", '"text"', "image"))
        for conv, messages in CONVERSATIONS.items():
            if conv.startswith("tool") and not uses_tools:
                continue
            if conv == "reasoning" and not uses_reasoning:
                continue
            if conv == "multimodal_content" and not uses_content_parts:
                continue
            for agp in (False, True):
                tools = TOOLS if conv.startswith("tool") else None
                r = render(t["text"], messages, tools, agp, t["bos_token"], t["eos_token"])
                case = {"template": t["file"], "conversation": conv, "tools": tools is not None,
                        "add_generation_prompt": agp, "bos_token": t["bos_token"],
                        "eos_token": t["eos_token"]}
                case.update(r)
                if "expected" in r:
                    summary["ok"] += 1
                elif r["error"]["raised"]:
                    summary["raised"] += 1
                else:
                    summary["other_error"] += 1
                cases.append(case)
    doc = {
        "generator": "tools/ref/make_chat_vectors.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "fixed_now": FIXED_NOW.isoformat(),
        "tools": TOOLS,
        "conversations": CONVERSATIONS,
        "templates": [{"file": t["file"], "sources": t["sources"]} for t in templates.values()],
        "cases": cases,
    }
    (OUT / "cases.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                                    encoding="utf-8")
    write_provenance(templates)
    print(f"{len(templates)} templates, {len(cases)} cases: {summary}", file=sys.stderr)


def write_provenance(templates):
    prov_rows = {}
    for line in (SHARED / "PROVENANCE.md").read_text().splitlines():
        m = re.match(r"\| (\S+) \|", line)
        if m:
            prov_rows[m.group(1)] = line
    lines = [
        "# Provenance of the chat-template fixtures",
        "",
        "Each `*.jinja` here is a chat template copied byte for byte out of a file under",
        "`../shared/fixtures/` (identical templates are stored once; `cases.json` lists every",
        "source of each). `cases.json` holds the conversations and what jinja2 renders for them",
        "the way transformers does; it is made by `tools/ref/make_chat_vectors.py`.",
        "",
        "ollama's own templates are Go templates, not Jinja, and are not used; its index.json and",
        "templates.jsonl are the Hugging Face Jinja templates it recognizes, and those are used.",
        "",
        "`random_vectors.json` is not taken from anywhere: it holds random templates made by",
        "`tools/ref/make_jinja_random_vectors.py` (its seed and jinja2 version are in the file) and",
        "what jinja2 renders for them in transformers' environment.",
        "",
        "## Template files and their sources",
        "",
        "| file | taken from (path under ../shared/fixtures, #entry) |",
        "|---|---|",
    ]
    for t in templates.values():
        lines.append(f"| {t['file']} | {'<br>'.join(t['sources'])} |")
    lines += ["", "## Source rows from ../shared/fixtures/PROVENANCE.md", "",
              "| file | source repository | path in repository | commit | size | sha256 |",
              "|---|---|---|---|---|---|"]
    used = sorted({p for t in templates.values() for p in t["provenance"]})
    for p in used:
        lines.append(prov_rows.get(p, f"| {p} | (no row in ../shared/fixtures/PROVENANCE.md) | | | | |"))
    (OUT / "PROVENANCE.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
