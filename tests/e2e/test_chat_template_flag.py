"""--chat-template (vLLM's flag): a template file or an inline template replaces the model
folder's, also for a folder that has none; a path that is not there, a template that does not
parse, or a folder without a tokenizer stops the server with a message naming the flag."""
import json
import shutil
import subprocess

import pytest

from conftest import BASE, loom_bin

TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[bot] {% endif %}")


def without_template(tmp_path, llama_dir):
    d = tmp_path / BASE
    shutil.copytree(llama_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def prompt_ids(srv, **kw):
    r = srv.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "hi"}], max_tokens=1,
        extra_body={"return_token_ids": True}, **kw)
    return r.choices[0].prompt_token_ids


@pytest.mark.parametrize("inline", [False, True], ids=["file", "inline"])
def test_chat_template_flag_serves_chat_on_a_folder_without_one(start_server, llama_dir,
                                                               tmp_path, inline):
    d = without_template(tmp_path, llama_dir)
    f = tmp_path / "t.jinja"
    f.write_text(TEMPLATE)
    srv = start_server(d, ["--chat-template", TEMPLATE if inline else str(f)])
    assert bytes(prompt_ids(srv)) == b"[user] hi\n[bot] "
    # /tokenize renders through the same template.
    r = srv.post("/tokenize", {"model": BASE, "messages": [{"role": "user", "content": "hi"}]})
    assert bytes(r.json()["tokens"]) == b"[user] hi\n[bot] "


def test_chat_template_flag_replaces_the_folders(start_server, llama_dir):
    srv = start_server(llama_dir, ["--chat-template", TEMPLATE])
    assert bytes(prompt_ids(srv)) == b"[user] hi\n[bot] "


def test_a_template_naming_developer_gets_the_role_as_sent(start_server, llama_dir):
    # vLLM 0.32 converts developer messages to system ones only for templates whose text does
    # not hold "developer" or 'developer'.
    named = "{% set roles = ['system', 'developer', 'user'] %}" + TEMPLATE
    srv = start_server(llama_dir, ["--chat-template", named])
    messages = [{"role": "system", "content": "A"}, {"role": "developer", "content": "B"},
                {"role": "user", "content": "hi"}]
    r = srv.post("/tokenize", {"model": BASE, "messages": messages})
    assert bytes(r.json()["tokens"]) == b"[system] A\n[developer] B\n[user] hi\n[bot] ", r.text


@pytest.mark.parametrize("value,needle", [
    ("/nonexistent/template.jinja", "no such file"),
    ("{% for %}", "--chat-template"),
])
def test_bad_chat_template_flag_stops_the_server(llama_dir, value, needle):
    p = subprocess.run([str(loom_bin()), "serve", "--model", str(llama_dir), "--port", "0",
                        "--chat-template", value], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and needle in p.stderr, (p.returncode, p.stderr[-400:])
