"""vLLM's /tokenize and /detokenize (and /ping) on the real server. The bundled demo model's
goldens (models/demo/goldens.json, made with transformers: apply_chat_template and the
tokenizer) are the reference for the chat form, the text form and decoding; token_strs are
checked against the vocabulary in the model's own tokenizer.json (what transformers'
convert_ids_to_tokens returns)."""
import json
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from conftest import BASE, DEMO, FIXTURES, adapter_args, wait_until

GOLDENS = json.loads((DEMO / "goldens.json").read_text())


def id_to_token(model_dir):
    """transformers' convert_ids_to_tokens table: the model's vocab plus the added tokens."""
    t = json.loads((model_dir / "tokenizer.json").read_text())
    table = {i: tok for tok, i in t["model"]["vocab"].items()}
    table.update({a["id"]: a["content"] for a in t["added_tokens"]})
    return table


def test_chat_form_equals_transformers(demo):
    max_len = {m["id"]: m["max_model_len"] for m in demo.get("/v1/models").json()["data"]}["demo"]
    for p in GOLDENS["prompts"]:
        r = demo.post("/tokenize", {"model": "demo", "messages": p["messages"]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body == {"count": len(p["prompt_token_ids"]), "max_model_len": max_len,
                        "tokens": p["prompt_token_ids"], "token_strs": None}, p["messages"]
        # An adapter's name tokenizes the same (adapters share the base's tokenizer), and
        # model may be left out (the base, as vLLM).
        for extra in ({"model": "shout"}, {}):
            r = demo.post("/tokenize", {"messages": p["messages"], **extra})
            assert r.status_code == 200 and r.json()["tokens"] == p["prompt_token_ids"], r.text


def test_chat_form_options(demo):
    msgs = [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Arr"}]
    full = demo.post("/tokenize", {"messages": msgs[:1]}).json()["tokens"]
    bare = demo.post("/tokenize", {"messages": msgs[:1], "add_generation_prompt": False}).json()["tokens"]
    assert full[:len(bare)] == bare and len(full) > len(bare)  # the assistant header is the rest
    # The top-level field (default true) wins over the kwargs, as on /v1/chat/completions
    # (vLLM 0.32's merge_kwargs).
    kw = demo.post("/tokenize", {"messages": msgs[:1], "chat_template_kwargs": {"add_generation_prompt": False}})
    assert kw.json()["tokens"] == full
    # continue_final_message: the open assistant turn ends with its content, not <|im_end|>.
    cont = demo.post("/tokenize", {"messages": msgs, "add_generation_prompt": False,
                                   "continue_final_message": True, "return_token_strs": True}).json()
    text = demo.post("/detokenize", {"tokens": cont["tokens"]}).json()["prompt"]
    assert text.endswith("<|im_start|>assistant\nArr"), text


def test_text_form_and_token_strs_equal_the_vocabulary(demo):
    table = id_to_token(DEMO)
    for p in GOLDENS["prompts"]:
        # The rendered chat as text (special tokens in it are matched as tokens): the same ids.
        r = demo.post("/tokenize", {"prompt": p["prompt_text"], "return_token_strs": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tokens"] == p["prompt_token_ids"]
        assert body["token_strs"] == [table[i] for i in body["tokens"]]
        assert body["count"] == len(body["tokens"])
        # This tokenizer's post-processor adds nothing: add_special_tokens changes nothing here.
        off = demo.post("/tokenize", {"prompt": p["prompt_text"], "add_special_tokens": False}).json()
        assert off["tokens"] == body["tokens"]
    assert demo.post("/tokenize", {"prompt": ""}).json() == {
        "count": 0, "max_model_len": body["max_model_len"], "tokens": [], "token_strs": None}


def test_detokenize_equals_transformers_decode(demo):
    for i, p in enumerate(GOLDENS["prompts"]):
        r = demo.post("/detokenize", {"model": "demo", "tokens": p["prompt_token_ids"]})
        assert r.status_code == 200, r.text
        assert r.json() == {"prompt": p["prompt_text"]}  # special tokens kept, as vLLM
        for model in GOLDENS["models"]:
            g = GOLDENS["results"][model][i]
            ids = g["output_token_ids"]
            if g["finish_reason"] == "stop":
                ids = ids[:-1]  # the golden text leaves out the EOS that ended it
            r = demo.post("/detokenize", {"tokens": ids})
            assert r.json()["prompt"] == g["text"], (model, p["messages"])
    assert demo.post("/detokenize", {"tokens": []}).json() == {"prompt": ""}


def test_refusals_name_the_field(server):
    cases = [
        ("/tokenize", {"model": "nope", "prompt": "a"}, 404, "model"),
        ("/tokenize", {"model": BASE}, 400, "prompt"),
        ("/tokenize", {"prompt": [1, 2]}, 400, "prompt"),
        ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "x"}]}, 400, "messages"),
        ("/tokenize", {"prompt": "a", "add_generation_prompt": True}, 400, "add_generation_prompt"),
        ("/tokenize", {"prompt": "a", "max_tokens": 4}, 400, "max_tokens"),
        ("/tokenize", {"prompt": "a", "return_token_strs": "yes"}, 400, "return_token_strs"),
        ("/tokenize", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
         400, "tools"),
        ("/tokenize", {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": True,
                       "continue_final_message": True}, 400, "continue_final_message"),
        ("/detokenize", {"model": BASE}, 400, "tokens"),
        ("/detokenize", {"tokens": [256]}, 400, "tokens"),  # the byte-level vocabulary is 0..255
        ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
        ("/detokenize", {"tokens": [1], "skip_special_tokens": True}, 400, "skip_special_tokens"),
        ("/detokenize", {"model": "nope", "tokens": [1]}, 404, "model"),
    ]
    for path, body, status, param in cases:
        r = server.post(path, body)
        assert r.status_code == status, (path, body, r.text)
        err = r.json()["error"]
        assert err["param"] == param and err["code"] == status, (path, body, err)
    # /detokenize takes at most the context's worth of ids (no sequence is longer).
    mml = server.post("/tokenize", {"prompt": "a"}).json()["max_model_len"]
    assert server.post("/detokenize", {"tokens": [97] * mml}).json() == {"prompt": "a" * mml}
    r = server.post("/detokenize", {"tokens": [97] * (mml + 1)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens", r.text
    assert "more than the model's context" in r.json()["error"]["message"]
    # On the byte-level tokenizer every byte is one token, and decoding gives them back.
    r = server.post("/tokenize", {"model": "qv", "prompt": "héllo"}).json()
    assert r["tokens"] == list("héllo".encode()) and r["count"] == 6
    assert server.post("/detokenize", {"tokens": r["tokens"]}).json() == {"prompt": "héllo"}
    # Methods, and /ping as vLLM's alias of /health.
    r = requests.get(server.url + "/tokenize", timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "POST"
    assert requests.get(server.url + "/ping", timeout=10).status_code == 200
    assert requests.post(server.url + "/ping", timeout=10).status_code == 200
    assert requests.delete(server.url + "/ping", timeout=10).status_code == 405


def test_api_key_and_a_folder_without_tokenizer(start_server):
    # The key guards /tokenize and /detokenize too (they render templates at the caller's cost;
    # vLLM leaves them open).
    s = start_server(FIXTURES / "models" / "llama_f32", adapter_args(["qv"]), api_key="k3y")
    for path, body in (("/tokenize", {"prompt": "a"}), ("/detokenize", {"tokens": [1]})):
        r = requests.post(s.url + path, json=body, timeout=10)
        assert r.status_code == 401, r.text
        # No tokenizer in the fixture folder: a 400 naming the field, never a crash.
        r = s.post(path, body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == ("prompt" if path == "/tokenize" else "tokens")
        assert "no tokenizer" in r.json()["error"]["message"]
    assert requests.get(s.url + "/ping", timeout=10).status_code == 200  # open, as /health
    # echo of a token-id prompt without a tokenizer: a 400 before any work (it answered an
    # empty echo before), while the same request without echo is served.
    body = {"model": "llama_f32", "prompt": [5, 6, 7], "max_tokens": 2}
    r = s.post("/v1/completions", dict(body, echo=True))
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo", r.text
    assert s.post("/v1/completions", body).status_code == 200


def test_adapter_names_are_checked_not_loaded(start_server, llama_dir, lora_dir):
    # Review finding: an adapter's name made /tokenize load it (and evict others): tokenizing
    # needs no weights. A name a completion could use (on demand in --lora-dir) is accepted
    # without loading; one it could not is 404.
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--max-cpu-loras", "1"])
    loads = srv.metric("loom_adapter_loads_total")
    for name in ("qv", "mlp", "all", "qv", "mlp"):
        r = srv.post("/tokenize", {"model": name, "prompt": "hi"})
        assert r.status_code == 200 and r.json()["tokens"] == [104, 105], r.text
        r = srv.post("/detokenize", {"model": name, "tokens": [104, 105]})
        assert r.status_code == 200 and r.json() == {"prompt": "hi"}, r.text
    assert srv.metric("loom_adapter_loads_total") == loads
    for name in ("junk", "missing", "../qv"):
        r = srv.post("/tokenize", {"model": name, "prompt": "hi"})
        assert r.status_code == 404 and r.json()["error"]["param"] == "model", (name, r.text)
    # null is as absent (vLLM: model and messages are Optional)
    r = srv.post("/tokenize", {"model": None, "prompt": "hi", "messages": None})
    assert r.status_code == 200 and r.json()["tokens"] == [104, 105], r.text
    r = srv.post("/detokenize", {"model": None, "tokens": [104]})
    assert r.status_code == 200 and r.json() == {"prompt": "h"}, r.text
    # A long prompt with its token strings: every byte one token, each string its vocabulary entry.
    text = "a\u00e9 " * 200000  # 800 KB
    r = srv.post("/tokenize", {"prompt": text, "return_token_strs": True})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert body["count"] == len(text.encode()) == len(body["tokens"]) == len(body["token_strs"])
    assert body["token_strs"][:4] == ["a", "\u00c3", "\u00a9", "\u0120"]  # GPT-2's byte table


def _gate(srv, name):
    return srv.metric(f"loom_large_prompts_{name}")


def _gate_server(start_server, seed):
    """The demo model's server with room for long prompts (--max-body 32MiB), a maker of
    random-letter words (one long BPE word each: the slowest text to tokenize) and a poster."""
    srv = start_server(DEMO, ["--max-body", "32MiB"])
    rng = random.Random(seed)
    letters = bytes(ord("a") + i % 26 for i in range(256))

    def word(size):
        return rng.randbytes(size).translate(letters).decode()

    def post(path, body):
        return requests.post(srv.url + path, json=body, timeout=120)

    return srv, word, post


def _long_size(word, post, seconds):
    """Bytes of long words this server takes about `seconds` to tokenize (1 to 24 MiB), from
    the speed of a 1 MiB word (~0.2 s on a Zen 1 core) sent as a completion, refused as too
    long for the context once tokenized."""
    t = time.monotonic()
    r = post("/v1/completions", {"prompt": word(1 << 20), "max_tokens": 1})
    rate = (1 << 20) / (time.monotonic() - t)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
    return int(min(24 << 20, max(1 << 20, seconds * rate)))


def test_large_prompts_are_tokenized_one_at_a_time(start_server):
    # Texts of 256 KiB and more (a request's prompts counted together) are tokenized one at a
    # time with at most 3 waiting (EncodeGate); beyond that a 503 with Retry-After. While long
    # words are being tokenized, three large requests wait, two more are refused, and a small
    # request is answered at once; then the same with lists of 210 KiB words, each under the
    # threshold (a list used to pass piece by piece). The states are read off /metrics, and the
    # long words are sized from this machine's speed, so no step depends on how fast it runs.
    srv, word, post = _gate_server(start_server, 7)
    size = _long_size(word, post, 2)
    words = max(1, size // (4 << 20))  # at most 4 MiB each: ~140 MB of working memory
    # Pieces each under the 256 KiB threshold, at most 64 of them (a request's prompt limit): on
    # a fast machine (~9 MB/s on an Emerald Rapids core) 210 KiB pieces would need 85.
    pieces = min(64, max(1, size // (210 << 10)))
    piece = min(255 << 10, max(210 << 10, size // pieces))
    variants = [  # (the long request, a large one, what the large ones answer)
        ({"prompt": [word(size // words) for _ in range(words)], "max_tokens": 1},
         ("/tokenize", lambda: {"prompt": word(300 << 10)}), 200),
        ({"prompt": [word(piece) for _ in range(pieces)], "max_tokens": 1},
         ("/v1/completions", lambda: {"prompt": [word(piece), word(piece)], "max_tokens": 1}), 400),
    ]
    for long_body, (path, large), good in variants:
        with ThreadPoolExecutor(4) as pool:
            first = pool.submit(post, "/v1/completions", long_body)
            wait_until(lambda: _gate(srv, "tokenizing") == 1, 60, 0.005, "the long one tokenized")
            waiting = []
            for k in range(3):
                waiting.append(pool.submit(post, path, large()))
                wait_until(lambda: _gate(srv, "waiting") == k + 1, 30, 0.005, f"{k + 1} waiting")
            refused = [post(path, large()) for _ in range(2)]
            small = post("/tokenize", {"prompt": "Hello there"})
            still = _gate(srv, "tokenizing") == 1 and _gate(srv, "waiting") == 3
            answers = [f.result() for f in waiting]
            long_answer = first.result()
        assert still, "the long prompt was tokenized before the checks ended: nothing was tested"
        for r in refused:
            assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
            assert "large prompts" in r.json()["error"]["message"]
        assert small.status_code == 200 and small.json()["tokens"], small.text
        # tokenized, then too long for the context: the 400 names the prompt
        assert long_answer.status_code == 400, long_answer.text[:300]
        assert long_answer.json()["error"]["param"] == "prompt"
        for r in answers:
            assert r.status_code == good, (path, r.status_code, r.text[:300])
            if good == 200:
                assert r.json()["count"] > (300 << 10) // 8
            else:
                assert r.json()["error"]["param"] == "prompt", r.text
        assert _gate(srv, "waiting") == 0 and _gate(srv, "tokenizing") == 0


def test_a_large_prompt_whose_client_leaves_stops_waiting(start_server):
    # A large prompt waiting for the gate holds a handler thread; once its client closes the
    # connection it gives up its place at once, not after the prompt before it is done (and is
    # never tokenized). A long request, sized from this machine's speed to take ~4 s, holds the
    # gate while a raw-socket client queues a large /tokenize and then leaves.
    srv, word, post = _gate_server(start_server, 11)
    size = _long_size(word, post, 4)
    words = max(1, size // (4 << 20))
    body = json.dumps({"prompt": word(300 << 10)}).encode()
    head = (f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, "/v1/completions",
                            {"prompt": [word(size // words) for _ in range(words)], "max_tokens": 1})
        wait_until(lambda: _gate(srv, "tokenizing") == 1, 60, 0.005, "the long one tokenized")
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(head + body)
        wait_until(lambda: _gate(srv, "waiting") == 1, 30, 0.005, "the large one waiting")
        s.close()
        wait_until(lambda: _gate(srv, "waiting") == 0, 30, 0.005, "the large one to give up")
        # Given up while the long one is still being tokenized (not let in after it).
        still = _gate(srv, "tokenizing") == 1 and not first.done()
        long_answer = first.result()
    assert still, "the waiting prompt left the line only when the gate was free"
    assert long_answer.status_code == 400, long_answer.text[:300]
    assert _gate(srv, "waiting") == 0 and _gate(srv, "tokenizing") == 0
    r = post("/tokenize", {"prompt": word(300 << 10)})  # the gate still works
    assert r.status_code == 200 and r.json()["count"] > (300 << 10) // 8, r.text[:300]
    assert _gate(srv, "abandoned_total") == 1


def test_a_large_prompt_whose_client_leaves_stops_being_tokenized(start_server):
    # Tokenizing a long text takes seconds of a core and holds the large-prompt gate; once its
    # client closes the connection the tokenizing stops (tokenizer::EncodeCancelScope) and the
    # request is counted as abandoned. Without the stop it would run to the end for nobody and
    # count nothing. Sized from this machine's speed to take ~4 s.
    srv, word, post = _gate_server(start_server, 13)
    size = _long_size(word, post, 4)
    words = max(1, size // (4 << 20))
    body = json.dumps({"prompt": [word(size // words) for _ in range(words)],
                       "max_tokens": 1}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(head + body)
    wait_until(lambda: _gate(srv, "tokenizing") == 1, 60, 0.005, "the long one tokenized")
    s.close()
    wait_until(lambda: _gate(srv, "tokenizing") == 0, 60, 0.005, "the tokenizing to end")
    assert _gate(srv, "abandoned_total") == 1, "it ran to the end"
    r = post("/tokenize", {"prompt": word(300 << 10)})  # the gate still works
    assert r.status_code == 200 and r.json()["count"] > (300 << 10) // 8, r.text[:300]
