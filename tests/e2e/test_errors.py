"""Error answers: unknown adapters, every invalid field value, auth, context length."""
import json
import openai
import pytest
import requests

from conftest import BASE, MAX_MODEL_LEN, adapter_args


def error_of(r):
    body = r.json()
    assert set(body) == {"error"}, body
    e = body["error"]
    assert {"message", "type", "param", "code"} <= set(e), e
    assert e["code"] == r.status_code, e
    assert isinstance(e["message"], str) and e["message"], e
    return e


def test_unknown_adapter_is_404_naming_model(server):
    with pytest.raises(openai.NotFoundError) as exc:
        server.client().completions.create(model="no-such-adapter", prompt="hi", max_tokens=2)
    assert exc.value.status_code == 404
    assert exc.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError) as exc:
        server.client().chat.completions.create(model="no-such-adapter",
                                                messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["param"] == "model"


GOOD_COMPLETION = {"model": BASE, "prompt": "hi", "max_tokens": 2}
GOOD_CHAT = {"model": BASE, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

# (field, bad value, the param the error must name)
COMPLETION_CASES = [
    ("max_tokens", -1, "max_tokens"),
    ("max_tokens", 0, "max_tokens"),
    ("max_tokens", "x", "max_tokens"),
    ("max_tokens", 1.5, "max_tokens"),
    ("temperature", 101, "temperature"),
    ("temperature", "hot", "temperature"),
    ("top_p", 2, "top_p"),
    ("top_p", 0, "top_p"),
    ("top_k", -2, "top_k"),
    ("min_p", 1.5, "min_p"),
    ("presence_penalty", 3, "presence_penalty"),
    ("frequency_penalty", -3, "frequency_penalty"),
    ("repetition_penalty", 0, "repetition_penalty"),
    ("n", 0, "n"),
    ("n", "two", "n"),
    ("logprobs", 21, "logprobs"),
    ("logprobs", -1, "logprobs"),
    ("stop", 123, "stop"),
    ("stop", [1, 2], "stop"),
    ("stop", "", "stop"),
    ("stop_token_ids", [300], "stop_token_ids"),
    ("stop_token_ids", "x", "stop_token_ids"),
    ("prompt", [], "prompt"),
    ("prompt", 5, "prompt"),
    ("prompt", [[]], "prompt"),
    ("prompt", [1000], "prompt"),  # outside the 256-token vocabulary
    ("stream", "yes", "stream"),
    ("stream_options", {"include_usage": True}, "stream_options"),  # without stream
    ("seed", "s", "seed"),
    ("ignore_eos", "no", "ignore_eos"),
    ("model", 3, "model"),  # ("" is the base, as vLLM: test_models.py)
    ("bogus_field", 1, "bogus_field"),
    ("logit_bias", {"300": 10}, "logit_bias"),  # outside the 256-token vocabulary
    ("logit_bias", {"x": 10}, "logit_bias"),
    ("logit_bias", {"5": "up"}, "logit_bias"),
    ("logit_bias", [5], "logit_bias"),
    ("min_tokens", 3, "min_tokens"),  # above max_tokens 2
    ("prompt_logprobs", 21, "prompt_logprobs"),
    ("prompt_logprobs", "all", "prompt_logprobs"),
    ("min_tokens", -1, "min_tokens"),
    ("suffix", "x", "suffix"),
    # Each count and size limit of docs/API.md, one past it.
    ("n", 17, "n"),
    ("best_of", 17, "best_of"),
    ("stop", [f"s{i}" for i in range(17)], "stop"),
    ("stop", "s" * 257, "stop"),
    ("stop_token_ids", [5] * 257, "stop_token_ids"),
    ("prompt", ["hi"] * 65, "prompt"),
    ("bad_words", [f"w{i}" for i in range(65)], "bad_words"),
    ("bad_words", ["w" * 257], "bad_words"),
    ("max_tokens", (1 << 24) + 1, "max_tokens"),
    ("spaces_between_special_tokens", "no", "spaces_between_special_tokens"),
]
CHAT_CASES = [
    ("messages", [], "messages"),
    ("messages", "hi", "messages"),
    ("max_tokens", -1, "max_tokens"),
    ("max_completion_tokens", 0, "max_completion_tokens"),
    ("temperature", 250, "temperature"),
    ("top_p", 2, "top_p"),
    ("n", 0, "n"),
    ("logprobs", "yes", "logprobs"),
    ("top_logprobs", 21, "top_logprobs"),
    ("stop", 123, "stop"),
    ("stream", "yes", "stream"),
    ("tools", [{"type": "function", "function": {"name": "f"}}], "tools"),
    ("response_format", {"type": "json_object"}, "response_format"),
    ("unknown_thing", True, "unknown_thing"),
    ("logit_bias", {"256": 1}, "logit_bias"),
    ("min_tokens", 3, "min_tokens"),
    # OpenAI capabilities loom lacks: anything but null (or the value asking for nothing) is 400.
    ("functions", [{"name": "f", "parameters": {}}], "functions"),
    ("function_call", "auto", "function_call"),
    ("modalities", ["text", "audio"], "modalities"),
    ("audio", {"voice": "alloy", "format": "wav"}, "audio"),
    ("prediction", {"type": "content", "content": "x"}, "prediction"),
    ("web_search_options", {}, "web_search_options"),
    ("reasoning_effort", "extreme", "reasoning_effort"),
    ("verbosity", "loud", "verbosity"),
    ("store", "yes", "store"),
    ("metadata", {"k": 1}, "metadata"),
    ("metadata", {"k": "v" * 513}, "metadata"),
    ("metadata", {f"k{i}": "v" for i in range(17)}, "metadata"),
    ("service_tier", 3, "service_tier"),
    ("service_tier", "bogus", "service_tier"),
    ("echo", "yes", "echo"),
    ("spaces_between_special_tokens", 1, "spaces_between_special_tokens"),
]


def _id(case):
    return f"{case[0]}={case[1]!r}"[:40]


@pytest.mark.parametrize("case", COMPLETION_CASES, ids=_id)
def test_completion_invalid_field_is_400(server, case):
    field, value, param = case
    body = dict(GOOD_COMPLETION, **{field: value})
    r = server.post("/v1/completions", body)
    assert r.status_code == 400, (field, value, r.status_code, r.text)
    e = error_of(r)
    assert e["param"] == param, e
    assert e["type"] == "BadRequestError"


@pytest.mark.parametrize("case", CHAT_CASES, ids=_id)
def test_chat_invalid_field_is_400(server, case):
    field, value, param = case
    body = dict(GOOD_CHAT, **{field: value})
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 400, (field, value, r.status_code, r.text)
    assert error_of(r)["param"] == param


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_huge_unknown_field_name_is_quoted_short(server, route):
    # A 100,000-byte key (and one under stream_options) is named by its first 40 bytes, so
    # the error stays small; non-ASCII bytes are escaped as \xNN.
    good = GOOD_COMPLETION if route == "/v1/completions" else GOOD_CHAT
    key = "é" + "k" * 100_000
    for body, prefix in (
        (dict(good, **{key: 1}), ""),
        (dict(good, stream=True, stream_options={key: True}), "stream_options."),
    ):
        r = server.post(route, body)
        assert r.status_code == 400, r.text
        e = error_of(r)
        want = prefix + "\\xc3\\xa9" + "k" * 38 + "..."
        assert e["param"] == want, e["param"][:100]
        assert len(r.text) < 1000, len(r.text)


def test_missing_required_fields(server):
    r = server.post("/v1/completions", {"model": BASE})
    assert r.status_code == 400 and error_of(r)["param"] == "prompt"
    # No model (absent, null or "") is the base (vLLM's model is optional: test_models.py);
    # a model that is not a string is refused.
    r = server.post("/v1/completions", {"prompt": "x", "model": 7})
    assert r.status_code == 400 and error_of(r)["param"] == "model"
    r = server.post("/v1/chat/completions", {"model": BASE})
    assert r.status_code == 400 and error_of(r)["param"] == "messages"


def test_invalid_value_through_openai_client(server):
    with pytest.raises(openai.BadRequestError) as exc:
        server.client().completions.create(model=BASE, prompt="hi", max_tokens=-1)
    assert exc.value.status_code == 400
    assert exc.value.body["param"] == "max_tokens"


def test_good_request_after_bad_ones(server):
    # The bad requests above must not disturb the server.
    r = server.post("/v1/completions", GOOD_COMPLETION)
    assert r.status_code == 200, r.text


def test_prompt_longer_than_context_is_400(server):
    prompt = "x" * (MAX_MODEL_LEN + 50)
    problems = []
    for path, body, param in [
            ("/v1/completions", {"model": BASE, "prompt": prompt, "max_tokens": 1}, "prompt"),
            ("/v1/completions", {"model": BASE, "prompt": prompt}, "prompt"),
            ("/v1/chat/completions",
             {"model": BASE, "messages": [{"role": "user", "content": prompt}]}, "messages")]:
        r = server.post(path, body)
        assert r.status_code == 400, r.text
        e = error_of(r)
        assert f"This model's maximum context length is {MAX_MODEL_LEN} tokens" in e["message"], e
        if e["param"] != param:
            problems.append(f"{path} {sorted(body)}: the prompt alone is over the context, param "
                            f"should be {param!r}, got {e['param']!r} ({e['message']})")
    assert not problems, "\n".join(problems)


def test_max_tokens_over_the_room_left_runs_to_the_context_end(server):
    # vLLM 0.32 (get_max_tokens): max_tokens is capped at the room the prompt leaves; the choice
    # ends at the context's end with finish_reason "length". Only max_tokens above the whole
    # context is refused.
    def ran_to_the_end(r, n=1):
        assert r.status_code == 200, r.text
        b = r.json()
        assert len(b["choices"]) == n, b["choices"]
        for c in b["choices"]:
            assert c["finish_reason"] == "length", c
            assert len(c["token_ids"]) == MAX_MODEL_LEN - len(c["prompt_token_ids"]), c
        return b

    base = {"model": BASE, "ignore_eos": True, "return_token_ids": True, "temperature": 0}
    b = ran_to_the_end(server.post("/v1/completions", dict(base, prompt="x" * 500,
                                                           max_tokens=100)))
    assert b["usage"]["completion_tokens"] == MAX_MODEL_LEN - b["usage"]["prompt_tokens"]
    # A completion without max_tokens (16) whose prompt leaves fewer than 16.
    b = ran_to_the_end(server.post("/v1/completions", dict(base, prompt=[65] * 505)))
    assert b["usage"]["completion_tokens"] == 7, b["usage"]
    # max_tokens equal to the context is not over it; n > 1 (sampled: greedy takes n = 1 only)
    # and several prompts: each prompt gets its own room, each of its choices the same.
    b = ran_to_the_end(server.post("/v1/completions", dict(
        base, prompt=[[65] * 500, [66] * 490], n=2, max_tokens=MAX_MODEL_LEN, temperature=1.0,
        seed=1)), n=4)
    assert [len(c["token_ids"]) for c in b["choices"]] == [12, 12, 22, 22], b["choices"]
    # Chat: max_tokens and max_completion_tokens alike.
    msgs = [{"role": "user", "content": "y" * 480}]
    for key in ("max_tokens", "max_completion_tokens"):
        b = ran_to_the_end(server.post("/v1/chat/completions",
                                       dict(base, messages=msgs, **{key: MAX_MODEL_LEN})))
        assert b["usage"]["total_tokens"] == MAX_MODEL_LEN, b["usage"]
    # Streamed: the last chunk finishes with "length", the usage says the context is full.
    r = server.post("/v1/completions", dict(base, prompt="x" * 500, max_tokens=100, stream=True,
                                            stream_options={"include_usage": True}))
    assert r.status_code == 200, r.text
    chunks = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {")]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"]["total_tokens"] == MAX_MODEL_LEN, chunks[-1]

    # Above the context: 400 in vLLM's words, naming the field the request sent.
    for path, body, param in [
            ("/v1/completions", {"prompt": "x", "max_tokens": MAX_MODEL_LEN + 1}, "max_tokens"),
            ("/v1/chat/completions", {"messages": msgs, "max_tokens": 100000}, "max_tokens"),
            ("/v1/chat/completions", {"messages": msgs, "max_tokens": 5,
                                      "max_completion_tokens": MAX_MODEL_LEN + 1},
             "max_completion_tokens")]:
        r = server.post(path, dict(body, model=BASE))
        assert r.status_code == 400, r.text
        e = error_of(r)
        assert e["param"] == param, e
        value = body.get("max_completion_tokens", body["max_tokens"])
        assert e["message"] == (f"{param}={value} cannot be greater than max_model_len="
                                f"{MAX_MODEL_LEN}. Please request fewer output tokens."), e

    # min_tokens above the room left (vLLM: min_tokens must be ≤ the capped max_tokens).
    r = server.post("/v1/completions", dict(base, prompt="x" * 500, max_tokens=100,
                                            min_tokens=50))
    assert r.status_code == 400, r.text
    e = error_of(r)
    assert e["param"] == "min_tokens" and "min_tokens must be at most max_tokens" in e["message"], e
    r = server.post("/v1/completions", dict(base, prompt="x" * 500, max_tokens=100,
                                            min_tokens=5))
    assert r.status_code == 200, r.text


def test_chat_default_max_tokens_fills_context(server):
    # Without max_tokens a chat request may run to the end of the context (vLLM), and it must
    # not be rejected for prompt + default max_tokens.
    r = server.post("/v1/chat/completions",
                    {"model": BASE, "messages": [{"role": "user", "content": "y" * 400}],
                     "ignore_eos": True})
    assert r.status_code == 200, r.text
    u = r.json()["usage"]
    assert u["prompt_tokens"] + u["completion_tokens"] == MAX_MODEL_LEN


def test_wrong_content_type_is_415(server):
    r = requests.post(server.url + "/v1/completions", data='{"model": "llama", "prompt": "x"}',
                      headers={"Content-Type": "text/plain"}, timeout=10)
    assert r.status_code == 415, r.text
    error_of(r)


def test_unknown_route_is_404_json(server):
    r = requests.get(server.url + "/v1/nothing", timeout=10)
    assert r.status_code == 404
    error_of(r)


def test_runtime_lora_endpoints_off_by_default(server):
    r = server.post("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/tmp"})
    assert r.status_code == 404, r.text
    r = server.post("/v1/unload_lora_adapter", {"lora_name": "qv"})
    assert r.status_code == 404, r.text
    # ... and did not unload anything.
    assert server.post("/v1/completions", dict(GOOD_COMPLETION, model="qv")).status_code == 200


# ---- auth ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def auth_server(llama_dir):
    from conftest import LoomServer
    s = LoomServer(llama_dir, adapter_args(["qv"]), api_key="sekrit-key")
    try:
        yield s.start()
    finally:
        s.kill()


def test_auth(auth_server):
    url = auth_server.url
    body = '{"model": "llama", "prompt": "hi", "max_tokens": 2}'
    ct = {"Content-Type": "application/json"}
    for path in ("/v1/completions", "/v1/chat/completions", "/v1/load_lora_adapter",
                 "/v1/unload_lora_adapter", "/v1/no-such-route"):
        r = requests.post(url + path, data=body, headers=ct, timeout=10)
        assert r.status_code == 401, (path, r.status_code)
        error_of(r)
    # Nor does a wrong method or an unknown path under /v1 say which routes exist (vLLM: 401).
    for method, path in (("GET", "/v1/completions"), ("DELETE", "/v1/models"),
                         ("GET", "/v1/no-such-route")):
        r = requests.request(method, url + path, timeout=10)
        assert r.status_code == 401, (method, path, r.status_code)
    key = {"Authorization": "Bearer " + auth_server.api_key}
    assert requests.get(url + "/v1/no-such-route", headers=key, timeout=10).status_code == 404
    assert requests.get(url + "/v1/completions", headers=key, timeout=10).status_code == 405
    r = requests.get(url + "/v1/models", timeout=10)
    assert r.status_code == 401
    # A body on the GET skipped the pre-routing check (meant for POSTs, checked in their
    # handlers) and /v1/models listed the adapters without the key.
    for method in ("GET", "HEAD"):  # refused as framing, before auth, and the connection closed
        r = requests.request(method, url + "/v1/models", data="x", timeout=10)
        assert r.status_code == 400, (method, r.status_code, r.text[:200])
        assert r.headers.get("Connection", "").lower() == "close", (method, r.headers)
    # vLLM's middleware: the scheme before the first space, in any case (RFC 9110 §11.1), then
    # the key: exactly the rest (a second space is part of it).
    for bad in ("Bearer wrong-key!", "Bearer sekrit-ke", "Bearer sekrit-key2", "sekrit-key",
                "Basic c2Vrcml0LWtleQ==", "Bearer ", "Bearer  sekrit-key", "Bearer\tsekrit-key",
                "Bearersekrit-key", "Bearer: sekrit-key", "bearer sekrit-ke"):
        r = requests.post(url + "/v1/completions", data=body,
                          headers=dict(ct, Authorization=bad), timeout=10)
        assert r.status_code == 401, (bad, r.status_code)
    for good in ("bearer", "BEARER", "bEaReR", "Bearer"):
        r = requests.get(url + "/v1/models", headers={"Authorization": f"{good} sekrit-key"},
                         timeout=10)
        assert r.status_code == 200, (good, r.status_code)
    with pytest.raises(openai.AuthenticationError):
        auth_server.client(api_key="wrong").completions.create(model=BASE, prompt="hi",
                                                               max_tokens=2)
    # The right key works (openai client and raw).
    r = auth_server.client().completions.create(model="qv", prompt="hi", max_tokens=2)
    assert r.usage.completion_tokens >= 1
    assert auth_server.client().models.list().data[0].id == BASE
    # /health and /metrics stay open.
    assert requests.get(url + "/health", timeout=10).status_code == 200
    assert requests.get(url + "/metrics", timeout=10).status_code == 200


def test_refused_request_leaves_its_connection_usable(auth_server):
    # A request refused before its handler (wrong key: 401, wrong content type: 415) still has its
    # body read, so the next request on the same kept-alive connection is served. Before, the
    # unread body was parsed as the next request: the good request after it got a 400.
    import http.client
    from urllib.parse import urlparse
    u = urlparse(auth_server.url)
    big = json.dumps({"model": BASE, "prompt": "x" * 9000, "max_tokens": 2})
    good = json.dumps({"model": BASE, "prompt": "hi", "max_tokens": 2})
    for headers, status in (({"Authorization": "Bearer wrong", "Content-Type": "application/json"}, 401),
                            ({"Authorization": "Bearer sekrit-key", "Content-Type": "text/plain"}, 415)):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
        try:
            for _ in range(2):
                conn.request("POST", "/v1/completions", body=big, headers=headers)
                r = conn.getresponse()
                assert r.status == status
                assert r.getheader("Connection") != "close"  # the same connection goes on
                assert json.loads(r.read())["error"]["code"] == status
                conn.request("POST", "/v1/completions", body=good,
                             headers={"Authorization": "Bearer sekrit-key",
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                body = r.read()
                assert r.status == 200, body
                assert json.loads(body)["usage"]["completion_tokens"] >= 1
        finally:
            conn.close()


def read_until_closed(sock) -> bytes:
    got = b""
    while part := sock.recv(65536):
        got += part
    return got


def test_a_request_without_the_key_is_refused_before_its_body(auth_server):
    # curl waits for 100 Continue before a large body: without the key the 401 comes instead
    # (the body is never asked for) and the connection closes, as vLLM's middleware answers
    # before reading. Before, loom sent 100 Continue and read up to --max-body first.
    import socket
    s = socket.create_connection(("127.0.0.1", auth_server.port), timeout=10)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer wrong\r\nExpect: 100-continue\r\nContent-Length: 4000000\r\n\r\n")
        got = read_until_closed(s)
    finally:
        s.close()
    assert got.startswith(b"HTTP/1.1 401"), got[:200]
    assert b"100 Continue" not in got
    assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["code"] == 401
    # With the key the interim answer comes and the request is served.
    s = socket.create_connection(("127.0.0.1", auth_server.port), timeout=30)
    body = json.dumps({"model": BASE, "prompt": "hi", "max_tokens": 2}).encode()
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer sekrit-key\r\nExpect: 100-continue\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        got = read_until_closed(s)
    finally:
        s.close()
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    assert json.loads(got.split(b"\r\n\r\n", 1)[1])["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_several_greedy_choices_are_refused_as_vllm(server, path):
    # vLLM 0.32 (SamplingParams._verify_greedy_sampling): n > 1 with a temperature below 1e-5 is
    # refused whatever the seed, streamed or not; loom names n.
    body = dict(GOOD_COMPLETION if "chat" not in path else GOOD_CHAT)
    for temperature, extra in ((0, {}), (1e-6, {"seed": 3}), (-1, {"stream": True}), (0, {"n": 16})):
        r = server.post(path, {**body, "n": 2, "temperature": temperature, **extra})
        assert r.status_code == 400, r.text
        e = error_of(r)
        assert e["param"] == "n", e
        n = extra.get("n", 2)
        assert e["message"] == f"n must be 1 when using greedy sampling, got {n}.", e
    for temperature in (None, 0.5, 1e-5):
        r = server.post(path, {**body, "n": 2, "temperature": temperature})
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"]) == 2
    r = server.post(path, {**body, "n": 1, "temperature": 0})
    assert r.status_code == 200, r.text
