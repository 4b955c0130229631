"""A client that disconnects cancels its sequence and frees its cache blocks (SPEC-api.md)."""
import json
import socket
import time

import pytest

from conftest import wait_until

LONG = "llama_long"
MAX_TOKENS = 15000  # minutes of work if it were not cancelled


def raw_request(port, path, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_events(s, n, limit_s=30):
    """Reads from the socket until `n` 'data:' events arrived; returns what was read."""
    buf = b""
    deadline = time.monotonic() + limit_s
    while buf.count(b"data: ") < n:
        assert time.monotonic() < deadline, f"only {buf.count(b'data: ')} events: {buf[:300]!r}"
        chunk = s.recv(65536)
        assert chunk, f"the server closed the stream early: {buf[:300]!r}"
        buf += chunk
    return buf


@pytest.fixture
def lsrv(start_server, long_dir):
    return start_server(long_dir, [])


def _idle(srv):
    return (srv.metric("vllm:num_requests_running") == 0 and
            srv.metric("vllm:num_requests_waiting") == 0 and
            srv.metric("vllm:kv_cache_usage_perc") == 0)


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_stream_disconnect_aborts(lsrv, endpoint):
    aborts0 = lsrv.metric("vllm:request_success_total", finished_reason="abort")
    gen0 = lsrv.metric("vllm:generation_tokens_total")
    body = {"model": LONG, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}
    if endpoint.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "Tell me everything"}]
    else:
        body["prompt"] = "Tell me everything"
    s = raw_request(lsrv.port, endpoint, body)
    head = read_events(s, 3)
    assert head.startswith(b"HTTP/1.1 200"), head[:100]
    assert lsrv.metric("vllm:num_requests_running") == 1
    s.close()
    wait_until(lambda: _idle(lsrv), timeout=30,
               what="num_requests_running 0 and kv_cache_usage_perc 0 after the disconnect")
    assert lsrv.metric("vllm:request_success_total", finished_reason="abort") == aborts0 + 1
    generated = lsrv.metric("vllm:generation_tokens_total") - gen0
    assert generated < MAX_TOKENS, "the sequence ran to the end instead of being cancelled"
    # The server still serves.
    r = lsrv.client().completions.create(model=LONG, prompt="x", max_tokens=3)
    assert r.usage.completion_tokens >= 1


def test_stream_disconnect_with_n2_aborts_both(lsrv):
    aborts0 = lsrv.metric("vllm:request_success_total", finished_reason="abort")
    s = raw_request(lsrv.port, "/v1/completions",
                    {"model": LONG, "prompt": "Two of them", "max_tokens": MAX_TOKENS, "n": 2,
                     "ignore_eos": True, "stream": True, "temperature": 1.0, "seed": 1})
    read_events(s, 4)
    s.close()
    wait_until(lambda: _idle(lsrv), timeout=30, what="idle after the disconnect")
    assert lsrv.metric("vllm:request_success_total", finished_reason="abort") == aborts0 + 2


def test_non_stream_disconnect_aborts(lsrv):
    # SPEC-api.md: "A client that disconnects cancels its sequence" -- also without streaming
    # (vLLM cancels a non-streaming request whose client went away).
    aborts0 = lsrv.metric("vllm:request_success_total", finished_reason="abort")
    s = raw_request(lsrv.port, "/v1/completions",
                    {"model": LONG, "prompt": "Tell me everything", "max_tokens": MAX_TOKENS,
                     "ignore_eos": True})
    wait_until(lambda: lsrv.metric("vllm:num_requests_running") == 1, timeout=10,
               what="the request running")
    time.sleep(0.2)
    s.close()
    wait_until(lambda: _idle(lsrv), timeout=30,
               what="num_requests_running 0 after a non-streaming client disconnected")
    assert lsrv.metric("vllm:request_success_total", finished_reason="abort") == aborts0 + 1
