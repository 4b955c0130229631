"""Malformed HTTP on raw sockets: truncated bodies, wrong content type, huge headers, invalid
UTF-8, absurdly nested JSON, oversized bodies. Each gets a clean 4xx (or a closed connection for
the truncated body), the server keeps serving, and streams running meanwhile are unaffected."""
import json
import socket
import threading
import time

import pytest
import requests

from conftest import LoomServer, greedy, wait_until

LONG = "llama_long"
STREAM_PROMPT = "A stream that runs while the garbage arrives"
STREAM_TOKENS = 200


@pytest.fixture(scope="module")
def hsrv(long_dir):
    s = LoomServer(long_dir, ["--max-body", "1MiB"])
    try:
        yield s.start()
    finally:
        s.kill()


@pytest.fixture(scope="module")
def background(hsrv):
    """Streaming requests running back to back for the whole module; each must equal the solo
    run. Yields the shared state; `streaming` checks a stream is under way around each test,
    test_zz_background_streams_unaffected checks every run."""
    solo = greedy(hsrv, LONG, STREAM_PROMPT, STREAM_TOKENS)[0]
    stop = threading.Event()
    state = {"runs": 0, "chunks": 0, "live": False, "bad": []}
    client = hsrv.client(timeout=60)

    def loop():
        while not stop.is_set():
            ids = []
            try:
                for ch in client.completions.create(
                        model=LONG, prompt=STREAM_PROMPT, max_tokens=STREAM_TOKENS, temperature=0,
                        stream=True, extra_body={"return_token_ids": True, "ignore_eos": True}):
                    for c in ch.choices:
                        ids += c.token_ids or []
                    state["live"] = bool(ids)
                    state["chunks"] += 1
                if ids != solo:
                    state["bad"].append("output differs from the solo run")
            except Exception as e:  # noqa: BLE001 — reported by the tests
                state["bad"].append(f"{type(e).__name__}: {e}")
            state["live"] = False
            state["runs"] += 1

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield state
    stop.set()
    t.join(60)


@pytest.fixture
def streaming(background):
    """Each test starts while a background stream is under way and ends once the streams have
    moved on: the malformed requests arrive while tokens are being streamed, not beside an idle
    server."""
    wait_until(lambda: background["live"], 30, 0.002, "a background stream under way")
    chunks = background["chunks"]
    yield
    wait_until(lambda: background["chunks"] > chunks, 30, 0.01, "the background stream to go on")
    assert not background["bad"], background["bad"][:5]


def exchange(port, data: bytes, shut_wr=False, timeout=15.0) -> bytes:
    """Sends raw bytes, returns everything the server answers until it closes or goes quiet."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
            if shut_wr:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                m = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
                if m and len(rest) >= int(m[0].split(b":")[1]):
                    break
        return out
    finally:
        s.close()


def status_of(resp: bytes) -> int:
    assert resp.startswith(b"HTTP/1.1 "), f"no HTTP answer: {resp[:200]!r}"
    return int(resp.split(b" ")[1])


def json_error(resp: bytes) -> dict:
    body = resp.partition(b"\r\n\r\n")[2]
    return json.loads(body)["error"]


def post_bytes(body: bytes, content_type="application/json", path="/v1/completions",
               extra_headers=b""):
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n").encode() + extra_headers + \
        b"\r\n" + body


def still_serving(srv):
    r = srv.client().completions.create(model=LONG, prompt="ok?", max_tokens=3)
    assert r.usage.completion_tokens >= 1
    assert requests.get(srv.url + "/health", timeout=10).status_code == 200


def test_truncated_body_then_close(hsrv, streaming):
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", hsrv.port), timeout=10)
    s.sendall(head + b'{"model": "llama_long", "prom')
    s.close()
    # Half-closed: the server sees the end of the body early, and closes without an answer
    # (there is no request to answer).
    resp = exchange(hsrv.port, head + b'{"model": "llama_long", "prom', shut_wr=True)
    assert resp == b"", resp[:200]
    still_serving(hsrv)


def test_wrong_content_type(hsrv, streaming):
    body = json.dumps({"model": LONG, "prompt": "x", "max_tokens": 2}).encode()
    for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        resp = exchange(hsrv.port, post_bytes(body, ct))
        assert status_of(resp) == 415, resp[:200]
        assert json_error(resp)["code"] == 415
    still_serving(hsrv)


def test_media_type_is_case_insensitive_and_plus_json(hsrv, streaming):
    # As FastAPI (vLLM): application/json in any case, parameters ignored, application/*+json.
    body = json.dumps({"model": LONG, "prompt": "x", "max_tokens": 2}).encode()
    for ct in ("Application/JSON", "application/json; charset=UTF-8", "application/vnd.api+json"):
        resp = exchange(hsrv.port, post_bytes(body, ct))
        assert status_of(resp) == 200, (ct, resp[:300])
    for ct in ("application/jsonx", "text/json"):
        assert status_of(exchange(hsrv.port, post_bytes(body, ct))) == 415, ct


SMUGGLED = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("head", [
    # cpp-httplib read a repeated or malformed Content-Length as 0 and a GET's body not at all:
    # the body's bytes were then served as the next request on the connection (a proxy reusing
    # it would send one client's reply to another).
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED),
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: abc\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: +%d\r\n\r\n" % len(SMUGGLED),
    b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED),
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED),
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
], ids=["two-content-lengths", "content-length-abc", "content-length-plus", "get-health-body",
        "get-models-body", "chunked"])
def test_unread_body_is_refused_with_connection_close(hsrv, streaming, head):
    # The refusal tells the client (and any proxy) to drop the connection, so the unread bytes
    # are never taken as another request on a reused connection.
    s = socket.create_connection(("127.0.0.1", hsrv.port), timeout=10)
    try:
        s.sendall(head)
        time.sleep(0.2)
        s.sendall(SMUGGLED)
        out = b""
        while b"\r\n\r\n" not in out:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        # And the server closes it: nothing after the refusal is read as a request.
        s.settimeout(5)
        try:
            while chunk := s.recv(65536):
                out += chunk
            closed = True
        except ConnectionResetError:
            closed = True
        except socket.timeout:
            closed = False
    finally:
        s.close()
    first_head = out.partition(b"\r\n\r\n")[0].lower()
    assert status_of(out) == 400, out[:300]
    assert b"connection: close" in first_head, out[:300]
    assert closed, "the connection stayed open after the refusal"
    assert out.count(b"HTTP/1.1 ") == 1, f"the smuggled request was answered: {out[:600]!r}"
    still_serving(hsrv)


def test_huge_header(hsrv, streaming):
    big = b"X-Big: " + b"a" * 100_000 + b"\r\n"
    body = json.dumps({"model": LONG, "prompt": "x", "max_tokens": 2}).encode()
    resp = exchange(hsrv.port, post_bytes(body, extra_headers=big))
    assert resp, "the server closed the connection without an answer (expected 431)"
    assert status_of(resp) == 431, resp[:200]
    # The same 100+ KB as many short headers: the total must be bounded too.
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(10000))
    resp = exchange(hsrv.port, post_bytes(body, extra_headers=many))
    assert resp, "no answer to 10000 headers"
    assert status_of(resp) == 431, \
        f"{len(many)} bytes of headers (10000 headers) accepted: {resp[:40]!r}"
    still_serving(hsrv)


def test_garbage_request_line(hsrv, streaming):
    for junk in (b"GARBAGE\r\n\r\n", b"POST /v1/completions HTTP/9.9\r\n\r\n",
                 b"\x00\xff\xfe\r\n\r\n"):
        resp = exchange(hsrv.port, junk)
        assert status_of(resp) == 400, (junk, resp[:200])
    still_serving(hsrv)


def test_invalid_utf8_in_json_string(hsrv, streaming):
    for body in (b'{"model": "llama_long", "prompt": "bad \xff\xfe bytes", "max_tokens": 2}',
                 b'{"model": "llama_\xc3", "prompt": "x", "max_tokens": 2}',
                 b'{"model": "llama_long", "prompt": "x", "stop": ["\xed\xa0\x80"]}'):
        resp = exchange(hsrv.port, post_bytes(body))
        assert status_of(resp) == 400, (body, resp[:300])
        json_error(resp)
    # Through the chat endpoint as well.
    resp = exchange(hsrv.port, post_bytes(
        b'{"model": "llama_long", "messages": [{"role": "user", "content": "\xc0\xaf"}]}',
        path="/v1/chat/completions"))
    assert status_of(resp) == 400, resp[:300]
    still_serving(hsrv)


def test_deeply_nested_json(hsrv, streaming):
    depth = 200_000
    for body in (b"[" * depth + b"]" * depth,
                 b'{"model": "llama_long", "prompt": ' + b"[" * depth + b"]" * depth + b"}",
                 b'{"a":' * (depth // 2) + b"1" + b"}" * (depth // 2),
                 b"[" * depth):  # unbalanced too
        resp = exchange(hsrv.port, post_bytes(body))
        assert status_of(resp) == 400, resp[:300]
        json_error(resp)
        resp = exchange(hsrv.port, post_bytes(body, path="/v1/chat/completions"))
        assert status_of(resp) == 400, resp[:300]
    still_serving(hsrv)


def test_body_over_max_body_is_413(hsrv, streaming):
    big = b'{"model": "llama_long", "prompt": "' + b"a" * (10 << 20) + b'"}'
    resp = exchange(hsrv.port, post_bytes(big), timeout=30)
    assert resp, "no answer to a 10 MB body"
    assert status_of(resp) == 413, resp[:300]
    assert json_error(resp)["code"] == 413
    # Chunked transfer encoding, no Content-Length: refused once --max-body is passed while
    # reading it; the answer survives the upload still under way (the server discards the rest
    # before closing, rather than resetting the connection).
    def chunks():
        for _ in range(40):
            yield b"a" * (256 << 10)
    try:
        r = requests.post(hsrv.url + "/v1/completions", data=chunks(),
                          headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 413, (r.status_code, r.text[:200])
    except requests.ConnectionError:
        pytest.fail("the server reset a chunked 10 MB upload instead of answering 413")
    # Just under the limit is fine (a long prompt is a 400 for the context, not a 413).
    ok = json.dumps({"model": LONG, "prompt": "b" * 1000, "max_tokens": 2}).encode()
    assert status_of(exchange(hsrv.port, post_bytes(ok))) == 200
    still_serving(hsrv)


def test_bodies_of_many_json_values_are_refused_before_they_cost_memory(hsrv, streaming):
    # 2.8 M empty arrays under one message key (an 8 MiB body) cost ~730 MB once parsed, copied
    # and made template values; a body may hold 65,536 arrays and objects, messages 131,072
    # values (this server's --max-body is 1 MiB).
    arrays = b'{"model": "llama_long", "messages": [{"role": "user", "content": "hi", "x": [' + \
        b",".join([b"[]"] * 300_000) + b']}], "max_tokens": 1}'
    resp = exchange(hsrv.port, post_bytes(arrays, path="/v1/chat/completions"), timeout=30)
    assert status_of(resp) == 400, resp[:300]
    assert "more than 65536 JSON arrays and objects" in json_error(resp)["message"]
    scalars = b'{"model": "llama_long", "messages": [{"role": "user", "content": "hi", "x": [' + \
        b",".join([b"0"] * 200_000) + b']}], "max_tokens": 1}'
    resp = exchange(hsrv.port, post_bytes(scalars, path="/v1/chat/completions"), timeout=30)
    assert status_of(resp) == 400, resp[:300]
    err = json_error(resp)
    assert err["param"] == "messages" and "more than 131072 JSON values" in err["message"], err
    kwargs = b'{"model": "llama_long", "messages": [{"role": "user", "content": "hi"}], ' + \
        b'"chat_template_kwargs": {"x": [' + b",".join([b"0"] * 200_000) + b']}, "max_tokens": 1}'
    resp = exchange(hsrv.port, post_bytes(kwargs, path="/v1/chat/completions"), timeout=30)
    assert status_of(resp) == 400, resp[:300]
    assert json_error(resp)["param"] == "chat_template_kwargs"
    # A prompt of many token ids is one array: still taken (a 400 for the context length only).
    ids = json.dumps({"model": LONG, "prompt": [1] * 300_000, "max_tokens": 1}).encode()
    resp = exchange(hsrv.port, post_bytes(ids), timeout=30)
    assert status_of(resp) == 400, resp[:300]
    assert json_error(resp)["param"] != "" and "JSON" not in json_error(resp)["message"]
    still_serving(hsrv)


def read_until_close(port, data: bytes, timeout=15.0) -> bytes:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def test_chunked_trailer_fields_are_not_headers(hsrv, streaming):
    # RFC 9110 §6.5.1: trailer fields must not be merged into the header. A Content-Type (or an
    # Authorization) missing from the header and sent as a trailer was read as the header's.
    body = json.dumps({"model": LONG, "prompt": "trailers", "max_tokens": 2}).encode()
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n"
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
    for header, trailer in ((b"", b"Content-Type: text/plain\r\n"),  # no type: JSON, as FastAPI
                            (b"Content-Type: application/json\r\n", b"Content-Type: text/plain\r\n"),
                            (b"Content-Type: application/json\r\n", b"X-A: 1\r\nContent-Type: text/plain\r\n")):
        resp = exchange(hsrv.port, head + header + b"\r\n" + chunked + trailer + b"\r\n")
        assert status_of(resp) == 200, (header, trailer, resp[:300])
    still_serving(hsrv)


def test_a_refusal_after_a_head_request_has_its_body(hsrv, streaming):
    # The refused request's own method decides: after a HEAD on the same connection its 501 was
    # sent with a Content-Length and no body.
    resp = read_until_close(hsrv.port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
                            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Transfer-Encoding: gzip\r\n\r\n")
    second = resp[resp.index(b"HTTP/1.1 501"):]
    head, _, rest = second.partition(b"\r\n\r\n")
    length = [int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
    assert length and len(rest) == length[0], second[:400]
    assert "gzip" in json.loads(rest)["error"]["message"]
    still_serving(hsrv)


def test_many_idle_connections_do_not_block(hsrv, streaming):
    # Slowloris-lite: 50 connections that send half a request and wait; others still get served.
    socks = []
    try:
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", hsrv.port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        still_serving(hsrv)
    finally:
        for s in socks:
            s.close()
    still_serving(hsrv)


def test_zz_background_streams_unaffected(hsrv, background):
    # Runs last in this module (alphabetical order within the file is definition order).
    deadline = time.monotonic() + 30
    while background["runs"] < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert background["runs"] >= 3, "the background streams did not run"
    assert not background["bad"], background["bad"][:5]
