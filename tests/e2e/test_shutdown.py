"""SIGTERM under load: running streams drain (or end with "abort" at --shutdown-timeout), new
requests get 503 or a refused connection, and the process exits 0."""
import json
import signal
import threading
import time

import requests

LONG = "llama_long"


class Stream(threading.Thread):
    def __init__(self, srv, prompt, max_tokens):
        super().__init__(daemon=True)
        self.url = srv.url + "/v1/completions"
        self.body = {"model": LONG, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                     "ignore_eos": True, "temperature": 0, "return_token_ids": True}
        self.started = threading.Event()
        self.tokens = 0
        self.finish = None
        self.done = False
        self.error = None
        self.status = None

    def run(self):
        try:
            with requests.post(self.url, json=self.body, stream=True, timeout=120) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    if not line:
                        continue
                    data = line[len(b"data: "):]
                    if data == b"[DONE]":
                        self.done = True
                        break
                    chunk = json.loads(data)
                    for c in chunk.get("choices", []):
                        self.tokens += len(c.get("token_ids") or [])
                        if c.get("finish_reason"):
                            self.finish = c["finish_reason"]
                    self.started.set()
        except Exception as e:  # noqa: BLE001 — reported by the test
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.started.set()

    @property
    def finished(self):
        return self.finish is not None


def sigterm(srv):
    """Sends SIGTERM and waits until the server says it is draining (signal delivery is
    asynchronous: a request sent in the same instant may still be served)."""
    srv.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not any("draining" in line for line in srv.log_lines):
        if srv.proc.poll() is not None:
            break
        assert time.monotonic() < deadline, f"no 'draining' log line after SIGTERM:\n{srv.log()}"
        time.sleep(0.01)
    time.sleep(0.05)


def new_request_outcomes(srv, until_exit_s):
    """Keeps sending new requests until the process exits; returns their outcomes."""
    outcomes = []
    deadline = time.monotonic() + until_exit_s
    while srv.proc.poll() is None and time.monotonic() < deadline:
        try:
            r = requests.post(srv.url + "/v1/completions", timeout=10,
                              json={"model": LONG, "prompt": "new", "max_tokens": 2})
            outcomes.append(r.status_code)
            if r.status_code == 503:
                assert r.headers.get("Retry-After"), "503 without Retry-After"
        except requests.ConnectionError:
            outcomes.append("refused")
        time.sleep(0.05)
    return outcomes


def test_sigterm_drains_running_streams(start_server, long_dir):
    srv = start_server(long_dir, ["--shutdown-timeout", "120"])
    streams = [Stream(srv, f"Stream number {i} says", 1000) for i in range(3)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(30), "a stream never started"
    unfinished_at_term = sum(not s.finished for s in streams)
    sigterm(srv)
    # /tokenize and /detokenize are refused too, as /health (review finding: they were served)
    for path, body in (("/tokenize", {"prompt": "x"}), ("/detokenize", {"tokens": [1]})):
        r = requests.post(srv.url + path, json=body, timeout=10)
        assert r.status_code == 503, (path, r.status_code, r.text)
    outcomes = new_request_outcomes(srv, 120)
    code = srv.terminate(timeout=30)
    for s in streams:
        s.join(30)
    assert unfinished_at_term > 0, "every stream had finished before SIGTERM: nothing drained"
    assert 200 not in outcomes, f"a new request was served during the drain: {outcomes}"
    assert 503 in outcomes, f"no 503 while draining (outcomes: {outcomes[:10]})"
    for s in streams:
        assert s.error is None, s.error
        assert s.finish == "length" and s.tokens == 1000 and s.done, \
            (s.finish, s.tokens, s.done)
    assert code == 0, srv.log()


def test_sigterm_aborts_at_shutdown_timeout(start_server, long_dir):
    srv = start_server(long_dir, ["--shutdown-timeout", "1"])
    streams = [Stream(srv, f"Endless {i}", 15000) for i in range(3)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(30), "a stream never started"
    t0 = time.monotonic()
    sigterm(srv)
    outcomes = new_request_outcomes(srv, 60)
    code = srv.terminate(timeout=30)
    elapsed = time.monotonic() - t0
    for s in streams:
        s.join(30)
    assert 200 not in outcomes, outcomes
    for s in streams:
        assert s.error is None, f"stream broke instead of ending with abort: {s.error}"
        assert s.finish == "abort" and s.done, (s.finish, s.done, s.tokens)
        assert 0 < s.tokens < 15000
    assert code == 0, srv.log()
    assert elapsed < 30, f"exit took {elapsed:.1f}s with --shutdown-timeout 1"


def test_sigterm_idle_exits_zero(start_server, long_dir):
    srv = start_server(long_dir, [])
    assert srv.terminate(timeout=15) == 0


def test_sigterm_with_idle_keepalive_connection_exits_promptly(start_server, long_dir):
    # Nothing runs; a client (a gateway, the openai client's pool) holds an idle keep-alive
    # connection. There is nothing to drain, so the exit must not wait for that connection's
    # keep-alive timeout.
    srv = start_server(long_dir, [])
    session = requests.Session()
    assert session.get(srv.url + "/health", timeout=10).status_code == 200
    t0 = time.monotonic()
    code = srv.terminate(timeout=30)
    elapsed = time.monotonic() - t0
    session.close()
    assert code == 0
    assert elapsed < 3, f"an idle server took {elapsed:.1f}s to exit after SIGTERM (an idle " \
        f"keep-alive connection held it)"
