"""/v1/models (base with parent null, adapters with parent = base id, root, max_model_len),
--served-model-name, --max-model-len, --merge, /version and /health."""
import openai
import pytest
import requests

from conftest import ADAPTER_FIXTURES, ADAPTERS, BASE, MAX_MODEL_LEN, adapter_args, greedy


def check_entry(m):
    assert m["object"] == "model"
    assert isinstance(m["created"], int) and m["created"] > 1_600_000_000
    assert isinstance(m["owned_by"], str) and m["owned_by"]


def test_models_lists_base_and_adapters(server, llama_dir):
    body = server.get("/v1/models").json()
    assert body["object"] == "list"
    data = body["data"]
    assert data[0]["id"] == BASE, "the base model comes first"
    base = data[0]
    check_entry(base)
    assert base["parent"] is None
    assert base["root"] == str(llama_dir)
    assert base["max_model_len"] == MAX_MODEL_LEN
    # vLLM's ModelCard carries one default ModelPermission.
    (perm,) = base["permission"]
    assert perm["object"] == "model_permission" and perm["id"].startswith("modelperm-")
    assert (perm["allow_sampling"], perm["allow_logprobs"], perm["organization"]) == (True, True, "*")
    adapters = {m["id"]: m for m in data[1:]}
    assert set(adapters) == set(ADAPTERS)
    for name, m in adapters.items():
        check_entry(m)
        assert m["parent"] == BASE
        assert m["root"] == str(ADAPTER_FIXTURES / ADAPTERS[name])
        assert m["max_model_len"] == MAX_MODEL_LEN
    # Through the openai client; every listed id can be used as `model`.
    listed = [m.id for m in server.client().models.list().data]
    assert listed == [m["id"] for m in data]
    for mid in listed:
        r = server.client().completions.create(model=mid, prompt="x", max_tokens=1)
        assert r.model == mid


def test_served_model_name_and_max_model_len(start_server, llama_dir, reference):
    srv = start_server(llama_dir, ["--served-model-name", "my-base", "--max-model-len", "256"]
                       + adapter_args(["qv"]))
    data = srv.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["my-base", "qv"]
    assert data[1]["parent"] == "my-base"
    assert all(m["max_model_len"] == 256 for m in data)
    assert greedy(srv, "my-base", "Hello")[:2] == reference(BASE, "Hello")[:2]
    with pytest.raises(openai.NotFoundError):
        srv.client().completions.create(model=BASE, prompt="x", max_tokens=1)
    r = srv.post("/v1/completions", {"model": "my-base", "prompt": "z" * 300, "max_tokens": 1})
    assert r.status_code == 400 and "256" in r.json()["error"]["message"]
    r = srv.post("/v1/completions", {"model": "my-base", "prompt": "z" * 200, "max_tokens": 56,
                                     "ignore_eos": True})
    assert r.status_code == 200, r.text
    # The metrics carry the served name.
    assert srv.metric("vllm:num_requests_running", model_name="my-base") == 0


def test_several_served_model_names(start_server, llama_dir, reference):
    # vLLM's `--served-model-name a b`: every name serves the base and is listed; a response
    # echoes the name asked for; the first is the adapters' parent and the metrics' label.
    srv = start_server(llama_dir, ["--served-model-name", "base-a", "base-b"]
                       + adapter_args(["qv"]))
    data = srv.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["base-a", "base-b", "qv"]
    assert data[0]["parent"] is None and data[1]["parent"] is None
    assert data[2]["parent"] == "base-a"
    want = reference(BASE, "Hello")[0]
    for name in ("base-a", "base-b"):
        r = srv.client().completions.create(model=name, prompt="Hello", max_tokens=24,
                                            temperature=0, extra_body={"return_token_ids": True,
                                                                       "ignore_eos": True})
        assert r.model == name and r.choices[0].token_ids == want
    assert srv.post("/tokenize", {"model": "base-b", "prompt": "x"}).status_code == 200
    with pytest.raises(openai.NotFoundError):
        srv.client().completions.create(model=BASE, prompt="x", max_tokens=1)
    assert srv.metric("vllm:num_requests_running", model_name="base-a") == 0


GREEDY = {"temperature": 0, "ignore_eos": True, "return_token_ids": True}


def test_merged_adapter(start_server, llama_dir, reference):
    srv = start_server(llama_dir, adapter_args(["qv"]) + ["--merge", "qv"])
    ids = [m["id"] for m in srv.get("/v1/models").json()["data"]]
    assert ids == ["qv"]
    # Merged weights give the unmerged adapter's greedy tokens.
    for prompt in ("Hello", "The quick brown fox jumps"):
        assert greedy(srv, "qv", prompt)[0] == reference("qv", prompt)[0], prompt
    # The base model is not served any more (its weights hold the adapter): naming it must not
    # silently answer with the adapter's output.
    r = srv.post("/v1/completions", {"model": BASE, "prompt": "Hello", "max_tokens": 4})
    assert r.status_code == 404, (
        f"model={BASE!r} is not in /v1/models {ids} but got {r.status_code}: {r.text[:200]}")
    # A request without a model gets what is served, under its name (vLLM's first served name).
    r = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 4, **GREEDY})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "qv"
    assert r.json()["choices"][0]["token_ids"] == greedy(srv, "qv", "Hello", max_tokens=4)[0]
    # The metrics carry the name requests and /v1/models use (a gateway joins on it), not the
    # folder's.
    metrics = srv.get("/metrics").text
    assert 'vllm:num_requests_running{model_name="qv"}' in metrics, metrics[:2000]
    assert f'model_name="{BASE}"' not in metrics


def test_request_without_model_is_the_base(server):
    # vLLM's `model` is optional: absent, null or "" names the base (its _is_model_supported
    # takes any falsy name). OpenAI's client always sends it, so this is the raw HTTP form
    # gateways and curl users send.
    want = greedy(server, BASE, "Hello", max_tokens=6)[0]
    tokens = server.post("/tokenize", {"model": BASE, "prompt": "Hello"}).json()["tokens"]
    for extra in ({}, {"model": None}, {"model": ""}):
        r = server.post("/v1/completions", {"prompt": "Hello", **extra, "max_tokens": 6, **GREEDY})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == BASE and r.json()["choices"][0]["token_ids"] == want
        r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                 "max_tokens": 2, **extra})
        assert r.status_code == 200 and r.json()["model"] == BASE, r.text
        r = server.post("/tokenize", {"prompt": "Hello", **extra})
        assert r.status_code == 200 and r.json()["tokens"] == tokens, r.text


def test_version_and_health(server):
    r = requests.get(server.url + "/version", timeout=10)
    assert r.status_code == 200 and isinstance(r.json()["version"], str)
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_a_long_model_list_is_answered_whole(start_server, llama_dir):
    # Past 128 adapter names /v1/models is built on a handler thread (the I/O thread stalled
    # every stream while it built thousands of cards): the same list, every name in order.
    names = [f"a{i:03d}" for i in range(200)]
    args = []
    for n in names:
        args += ["--lora", f"{n}={ADAPTER_FIXTURES / ADAPTERS['qv']}"]
    srv = start_server(llama_dir, args + ["--max-cpu-loras", "4"])
    for _ in range(3):
        data = srv.get("/v1/models").json()["data"]
        assert [m["id"] for m in data] == [BASE] + names
        assert all(m["parent"] == BASE for m in data[1:])
    r = requests.head(srv.url + "/v1/models", timeout=10)
    assert r.status_code == 200
