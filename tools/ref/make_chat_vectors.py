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


def main():
    OUT.mkdir(parents=True, exist_ok=True)
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
            if conv == "tool_call" and not uses_tools:
                continue
            if conv == "reasoning" and not uses_reasoning:
                continue
            if conv == "multimodal_content" and not uses_content_parts:
                continue
            for agp in (False, True):
                tools = TOOLS if conv == "tool_call" else None
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
