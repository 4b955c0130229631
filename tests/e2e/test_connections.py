"""Connection handling: a burst of new connections must not hit a tiny listen backlog (the
kernel drops SYNs beyond it and the client retries after 1 s, 3 s, ...)."""
import select
import signal
import socket
import time

from conftest import BASE


def test_listen_backlog_holds_a_burst(server):
    # Stop the server so it accepts nothing: the kernel completes handshakes only up to the
    # listen backlog. 64 simultaneous new connections (a gateway's burst) must fit.
    wanted = 64
    socks = []
    server.proc.send_signal(signal.SIGSTOP)
    try:
        for _ in range(wanted):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", server.port))
            socks.append(s)
        pending, connected = set(socks), 0
        deadline = time.monotonic() + 0.7  # well under the 1 s SYN retransmission
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(pending), [], 0.05)
            for s in writable:
                pending.discard(s)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connected += 1
    finally:
        server.proc.send_signal(signal.SIGCONT)
        for s in socks:
            s.close()
    assert connected == wanted, (f"only {connected} of {wanted} connections were queued while "
                                 f"the server was busy: the listen backlog is too small")
    r = server.client().completions.create(model=BASE, prompt="x", max_tokens=2)
    assert r.usage.completion_tokens >= 1


LONG_STREAM = {"model": "llama_long", "prompt": "long", "max_tokens": 15000, "ignore_eos": True,
               "stream": True}


def one_running_one_waiting(srv, streams):
    """With --max-num-seqs 1: opens two endless streams into `streams` (the caller closes them)
    and waits until the second is queued. Returns the first's line iterator: keep it, as
    collecting it closes that stream."""
    import requests
    for i in range(2):
        streams.append(requests.post(srv.url + "/v1/completions", json=LONG_STREAM, stream=True,
                                     timeout=60))
        assert streams[i].status_code == 200
        if i == 0:
            lines = streams[0].iter_lines()
            next(lines)  # the first is running
    deadline = time.monotonic() + 10
    while srv.metric("vllm:num_requests_waiting") != 1:
        assert time.monotonic() < deadline, "the second stream never queued"
        time.sleep(0.05)
    return lines


def served_again(srv, body):
    """Once the streams are gone: posts `body` until it is served (10 s); returns the response."""
    import requests
    deadline = time.monotonic() + 10
    while True:
        r = requests.post(srv.url + "/v1/completions", timeout=60, json=body)
        if r.status_code == 200 or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_overload_is_503_with_retry_after(start_server, long_dir):
    # --max-num-seqs 1 --max-waiting 1: one stream runs, one is queued; a third request finds
    # the queue full.
    import requests
    srv = start_server(long_dir, ["--max-num-seqs", "1", "--max-waiting", "1"])
    streams = []
    try:
        lines = one_running_one_waiting(srv, streams)  # noqa: F841 (kept alive)
        r = requests.post(srv.url + "/v1/completions", timeout=30,
                          json={"model": "llama_long", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 503, r.text
        assert r.headers.get("Retry-After")
        assert r.json()["error"]["code"] == 503
        # A prompt that can never fit is its 400 even now: a 503 would have it retried.
        r = requests.post(srv.url + "/v1/completions", timeout=30,
                          json={"model": "llama_long", "prompt": [5] * 16384, "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
    finally:
        for s in streams:
            s.close()
    # Once the streams are gone, requests are served again.
    r = served_again(srv, {"model": "llama_long", "prompt": "x", "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_overload_is_refused_before_loading_an_adapter(start_server, long_dir, lora_dir):
    # A full queue is a 503 before the request's adapter is loaded from --lora-dir: the load
    # (serialized, on the CPU the engine needs) and the eviction of a warm adapter were spent on
    # a request refused anyway, once per client retry.
    import requests
    srv = start_server(long_dir, ["--max-num-seqs", "1", "--max-waiting", "1",
                                  "--lora-dir", str(lora_dir)])
    streams = []
    try:
        lines = one_running_one_waiting(srv, streams)  # noqa: F841 (kept alive)
        loads0 = srv.metric("loom_adapter_loads_total")
        r = requests.post(srv.url + "/v1/completions", timeout=30,
                          json={"model": "mlp", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 503, r.text
        assert r.headers.get("Retry-After")
        assert srv.metric("loom_adapter_loads_total") == loads0, "loaded for a refused request"
    finally:
        for s in streams:
            s.close()
    r = served_again(srv, {"model": "mlp", "prompt": "x", "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert srv.metric("loom_adapter_loads_total") == loads0 + 1


def test_queue_limit_counts_each_requests_sequences(start_server, long_dir):
    # --max-num-seqs 1 --max-waiting 4: one stream runs, one waits; a request of n = 4 would
    # make 5 waiting sequences: 503 (before, only the queue's length was checked, so one
    # request of 64 prompts × n = 16 went far past the limit). Alone in an empty queue, a
    # request that fits what runs and waits at once (1 + 4) is served; a larger one is a 400
    # naming n (it was admitted, and everyone else got 503 until most of it had run).
    import requests
    srv = start_server(long_dir, ["--max-num-seqs", "1", "--max-waiting", "4"])
    streams = []
    try:
        lines = one_running_one_waiting(srv, streams)  # noqa: F841 (kept alive)
        r = requests.post(srv.url + "/v1/completions", timeout=30,
                          json={"model": "llama_long", "prompt": "x", "max_tokens": 2, "n": 4})
        assert r.status_code == 503, r.text
        assert r.headers.get("Retry-After")
        assert "this request adds 4" in r.json()["error"]["message"]
    finally:
        for s in streams:
            s.close()
    r = served_again(srv, {"model": "llama_long", "prompt": "x", "max_tokens": 2, "n": 5})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 5
    r = requests.post(srv.url + "/v1/completions", timeout=30,
                      json={"model": "llama_long", "prompt": ["x", "y"], "max_tokens": 2, "n": 3})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "n" and "6 sequences" in err["message"] and "--max-waiting" in err["message"]


def test_a_reply_held_whole_is_bounded(start_server, long_dir):
    # A reply without stream is held whole until its last sequence ends: 8 prompts × n 16 ×
    # 16,000 tokens × (1 + 5 log-probs) is 12 M entries, past the 4 Mi a reply may hold: a 400
    # naming max_tokens (chat without max_tokens fills the 16 K context: naming n), and the same
    # as a stream is admitted (a stream keeps a few tokens). Nothing of either runs long: the
    # stream is closed at its first bytes.
    import requests
    srv = start_server(long_dir, [])
    body = {"model": "llama_long", "prompt": ["x"] * 8, "n": 16, "max_tokens": 16000, "logprobs": 5}
    r = requests.post(srv.url + "/v1/completions", timeout=30, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "max_tokens" and "set stream" in err["message"], err
    chat = {"model": "llama_long", "messages": [{"role": "user", "content": "hi"}], "n": 16,
            "logprobs": True, "top_logprobs": 20}
    r = requests.post(srv.url + "/v1/chat/completions", timeout=30, json=chat)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "n", r.text
    with requests.post(srv.url + "/v1/completions", timeout=30, stream=True,
                       json=dict(body, stream=True)) as s:
        assert s.status_code == 200, s.text
        next(s.iter_lines())
    # echo: each choice carries its prompt too (64 prompts of 9,000 ids × n 8 echoed: 4.6 M).
    r = requests.post(srv.url + "/v1/completions", timeout=30,
                      json={"model": "llama_long", "prompt": [[5] * 9000] * 64, "n": 8, "echo": True,
                            "max_tokens": 0})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "echo" and "echoed" in err["message"], err
    # A modest one is served as before.
    r = requests.post(srv.url + "/v1/completions", timeout=60,
                      json={"model": "llama_long", "prompt": "x", "n": 2, "max_tokens": 3, "logprobs": 5})
    assert r.status_code == 200, r.text
