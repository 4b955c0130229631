"""The model's recommended sampling (generation_config.json) as vLLM applies it: to requests that
leave a field unset, never over one they set; --generation-config vllm turns it off;
--override-generation-config lays values over it and its max_new_tokens caps every request."""
import json
import shutil
import subprocess

import pytest

from conftest import BASE, loom_bin


def model_with(tmp_path, llama_dir, gen):
    d = tmp_path / BASE  # the served name is the folder's
    shutil.copytree(llama_dir, d)
    cfg = json.loads((d / "generation_config.json").read_text())
    cfg.update(gen)
    (d / "generation_config.json").write_text(json.dumps(cfg))
    return d


def chat(srv, **kw):
    r = srv.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "tell me a story"}],
        extra_body={"ignore_eos": True, "return_token_ids": True, **kw.pop("extra_body", {})}, **kw)
    return r.choices[0]


def completion(srv, **kw):
    r = srv.client().completions.create(
        model=BASE, prompt="Once upon a time",
        extra_body={"ignore_eos": True, "return_token_ids": True, **kw.pop("extra_body", {})}, **kw)
    return r.choices[0]


def test_recommended_sampling_fills_unset_fields(start_server, llama_dir, tmp_path):
    # temperature 0 differs from transformers' default 1.0, so vLLM applies it: requests that set
    # no temperature are greedy. top_k 50 is transformers' default: a no-op. max_new_tokens is
    # chat's default length (completions keep their 16).
    d = model_with(tmp_path, llama_dir, {"temperature": 0.0, "top_k": 50, "max_new_tokens": 5})
    srv = start_server(d)
    greedy = completion(srv, max_tokens=12, temperature=0)
    for seed in (1, 2):
        assert completion(srv, max_tokens=12, seed=seed).token_ids == greedy.token_ids
    # A temperature the request sets wins: a hot sample differs from the greedy tokens.
    hot = [completion(srv, max_tokens=12, temperature=5.0, seed=s).token_ids for s in (1, 2)]
    assert any(h != greedy.token_ids for h in hot)
    assert len(chat(srv).token_ids) == 5
    assert len(chat(srv, max_tokens=9).token_ids) == 9  # the request's max_tokens wins
    assert len(completion(srv).token_ids) == 16


def test_generation_config_vllm_and_the_override(start_server, llama_dir, tmp_path):
    d = model_with(tmp_path, llama_dir, {"temperature": 0.0, "max_new_tokens": 5})
    # Off: temperature 1 (seeded draws differ), chat fills the context.
    srv = start_server(d, ["--generation-config", "vllm", "--max-model-len", "64"])
    a, b = (completion(srv, max_tokens=12, seed=s).token_ids for s in (1, 2))
    assert a != b
    c = chat(srv)
    assert c.finish_reason == "length" and len(c.token_ids) > 5
    srv.kill()
    # The override's max_new_tokens caps a request's own max_tokens too. (--enable-lora: vLLM's
    # flag, accepted so its command lines run.)
    srv = start_server(d, ["--enable-lora", "--override-generation-config",
                           '{"max_new_tokens": 3}'])
    assert len(completion(srv, max_tokens=10).token_ids) == 3
    assert len(chat(srv).token_ids) == 3


@pytest.mark.parametrize("args,needle", [
    (["--override-generation-config", '{"temprature": 0.5}'], "temprature"),
    (["--override-generation-config", '{"top_p": 2}'], "top_p"),
    (["--generation-config", "/nonexistent"], "generation_config.json"),
])
def test_bad_generation_config_flags_stop_the_server(llama_dir, args, needle):
    p = subprocess.run([str(loom_bin()), "serve", "--model", str(llama_dir), "--port", "0", *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and needle in p.stderr, (p.returncode, p.stderr[-400:])


def test_only_the_tokenizers_eos_is_eos_proper(start_server, llama_dir, tmp_path):
    # vLLM: the tokenizer's eos_token is EOS (stop_reason null); the model's other EOS ids
    # (generation_config.json / config.json) stop as stop token ids, reported in stop_reason —
    # Llama 3.1 ending a tool turn on <|eom_id|> gives stop_reason 128008. Both end with "stop";
    # ignore_eos ignores both.
    d = model_with(tmp_path, llama_dir, {"eos_token_id": [2, 66]})
    tok = json.loads((d / "tokenizer.json").read_text())
    eos_piece = next(p for p, i in tok["model"]["vocab"].items() if i == 2)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["eos_token"] = eos_piece
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    srv = start_server(d)

    def run(allowed, ignore_eos=False):
        r = srv.client().completions.create(
            model=BASE, prompt="Once", max_tokens=3, temperature=0,
            extra_body={"allowed_token_ids": [allowed], "ignore_eos": ignore_eos})
        return r.choices[0]

    c = run(66)
    assert (c.finish_reason, c.stop_reason, c.text) == ("stop", 66, ""), c
    c = run(2)
    assert (c.finish_reason, c.stop_reason) == ("stop", None), c
    assert run(66, ignore_eos=True).finish_reason == "length"
