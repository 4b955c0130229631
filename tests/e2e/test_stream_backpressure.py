"""Large streams and the clients that read them: a stream is built as fast as its client takes it
(backpressure), not cut because the engine ran ahead of a client that reads it all."""
import json
import socket
import time

from conftest import BASE

# 32 prompts × n 16 = 512 sequences of 120 tokens, each with 20 alternatives: ~29 MB of SSE, far
# more than the 8 MiB a connection buffers, produced faster than a Python client takes it.
LARGE = {"model": BASE, "prompt": ["hello"] * 32, "n": 16, "max_tokens": 120, "stream": True,
         "logprobs": 20, "stream_options": {"include_usage": True}}
CHOICES = 32 * 16


def open_stream(port, body) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
              + data)
    return s


def read_until_closed(s, got: bytearray) -> bytearray:
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            return got
        got += chunk


def dechunk(raw: bytes) -> bytes:
    """The body of a chunked response; fails on a body cut before its last chunk."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 200"), raw[:300]
    body, at = bytearray(), 0
    while True:
        eol = rest.find(b"\r\n", at)
        assert eol >= 0, f"cut in a chunk's size line after {len(body)} bytes: {rest[at:at + 80]!r}"
        size = int(rest[at:eol], 16)
        if size == 0:
            return bytes(body)
        assert eol + 2 + size + 2 <= len(rest), (
            f"cut inside a chunk after {len(body)} bytes of the body (the chunk has "
            f"{len(rest) - eol - 2} of its {size})")
        body += rest[eol + 2:eol + 2 + size]
        at = eol + 2 + size + 2


def check_complete(body: bytes):
    """Every choice's every token arrived, then the usage chunk and [DONE]."""
    events = [e[len(b"data: "):] for e in body.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]", events[-1][:300]
    tokens, finish = {}, {}
    usage = None
    for e in events[:-1]:
        j = json.loads(e)
        assert "error" not in j, j
        if not j["choices"]:
            usage = j["usage"]
            continue
        c = j["choices"][0]
        i = c["index"]
        if c["logprobs"] is not None:
            tokens[i] = tokens.get(i, 0) + len(c["logprobs"]["tokens"])
            assert all(1 <= len(t) <= 21 for t in c["logprobs"]["top_logprobs"]), c["logprobs"]
        if c["finish_reason"] is not None:
            assert i not in finish, f"choice {i} finished twice"
            finish[i] = c["finish_reason"]
    assert sorted(finish) == list(range(CHOICES)), f"{len(finish)} of {CHOICES} choices finished"
    for i, reason in finish.items():
        assert reason == "stop" or tokens.get(i, 0) == LARGE["max_tokens"], (i, reason, tokens.get(i))
    assert usage is not None and usage["completion_tokens"] == sum(tokens.values()), usage


def test_a_fast_reader_of_a_large_logprob_stream_gets_every_chunk(server):
    # One Pull took every pending update, several engine steps of them, and the connection was
    # closed when that passed the 8 MiB bound: cut mid-chunk, without [DONE], at 1-15 MB.
    s = open_stream(server.port, LARGE)
    raw = read_until_closed(s, bytearray())
    s.close()
    check_complete(dechunk(bytes(raw)))


def test_a_reader_that_pauses_gets_every_chunk_and_others_are_served_meanwhile(server):
    # A client that stops reading for a while (its own work, a slow consumer behind it) holds
    # the stream back (the server builds no more than it buffers) and gets all of it once it
    # reads again, as long as it pauses for less than the write timeout (10 s). The I/O thread
    # serves other requests meanwhile.
    s = open_stream(server.port, LARGE)
    got = bytearray()
    while len(got) < 1 << 20:
        chunk = s.recv(1 << 16)
        assert chunk, f"closed after {len(got)} bytes"
        got += chunk
    time.sleep(1.5)  # the socket buffers and the server's 8 MiB fill meanwhile
    assert server.get("/health").status_code == 200
    r = server.post("/v1/completions", {"model": BASE, "prompt": "hi", "max_tokens": 4,
                                                "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text[:300]
    raw = read_until_closed(s, got)
    s.close()
    check_complete(dechunk(bytes(raw)))
