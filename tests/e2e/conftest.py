"""Fixtures for the end-to-end tests: start the real `loom serve` binary on loopback, wait for
/health, hand out OpenAI clients and raw-HTTP helpers, and always stop the servers (also when a
test fails). The binary is $LOOM_BIN (default: build/loom at the repository root)."""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tiny_model  # noqa: E402

REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures"
DEMO = REPO / "models" / "demo"  # the bundled demo model (tools/demo)
ADAPTER_FIXTURES = FIXTURES / "adapters"

# Adapter names used by the tests → fixture folders (all for the base llama_f32).
ADAPTERS = {
    "qv": "llama_qv_r8_f32",
    "mlp": "llama_mlp_r6",
    "all": "llama_all_r4_f16",
    "embed": "llama_embed",
}
BASE = "llama"  # the served name of the base model (its folder's name)
MAX_MODEL_LEN = 512  # the fixture's max_position_embeddings
EOS = 2


def loom_bin() -> Path:
    p = Path(os.environ.get("LOOM_BIN", "build/loom"))
    if not p.is_absolute():
        p = (Path.cwd() / p) if (Path.cwd() / p).exists() else (REPO / p)
    return p


def _wait_for_binary(path: Path, timeout: float = 120.0) -> None:
    # The binary may be briefly missing while it is being rebuilt.
    deadline = time.monotonic() + timeout
    while not (path.exists() and os.access(path, os.X_OK)):
        if time.monotonic() > deadline:
            pytest.fail(f"loom binary {path} not found (set LOOM_BIN)")
        time.sleep(1.0)


def _die_with_parent():
    # Linux: the server gets SIGKILL if the pytest process dies, so no server outlives a run.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class LoomServer:
    """One `loom serve` process on 127.0.0.1 with --port 0; the port is read from its log."""

    LISTEN_RE = re.compile(r"loom: listening on http://([^:\s]+):(\d+)")

    def __init__(self, model_dir, args=(), api_key=None, env=None, preexec=None):
        # model_dir None: no --model (loom serves the bundled demo model, models/demo).
        self.model_dir = None if model_dir is None else Path(model_dir)
        self.args = list(args)
        self.api_key = api_key
        self.log_lines = []
        self._port_found = threading.Event()
        self.port = None
        self.proc = None
        self.env = env
        self.preexec = preexec  # also run in the child before exec (a resource limit, say)

    # ---- life cycle -------------------------------------------------------------------------
    def _preexec(self):
        _die_with_parent()
        if self.preexec:
            self.preexec()

    def start(self, ready_timeout: float = 60.0):
        binary = loom_bin()
        _wait_for_binary(binary)
        cmd = [str(binary), "serve"]
        if self.model_dir is not None:
            cmd += ["--model", str(self.model_dir)]
        cmd += ["--host", "127.0.0.1", "--port", "0"] + self.args
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        self.cmd = cmd
        env = dict(os.environ)
        env.pop("LOOM_API_KEY", None)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, preexec_fn=self._preexec, env=env)
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + ready_timeout
        while not self._port_found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(1)
                self.kill()
                pytest.fail(f"loom did not start: {' '.join(cmd)}\n{self.log()}")
        while True:
            try:
                r = requests.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    break
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"loom never became healthy: {' '.join(cmd)}\n{self.log()}")
            time.sleep(0.05)
        return self

    def _read_log(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log_lines.append(line)
            m = self.LISTEN_RE.search(line)
            if m and self.port is None:
                self.port = int(m.group(2))
                self._port_found.set()

    def log(self) -> str:
        return "\n".join(self.log_lines[-60:])

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code (kills on timeout and fails)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"loom did not exit within {timeout}s of SIGTERM\n{self.log()}")

    def kill(self):
        """Teardown: SIGKILL (graceful exits are tested explicitly with terminate())."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ---- clients ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, api_key=None, timeout: float = 60.0) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key or self.api_key or "EMPTY",
                             max_retries=0, timeout=timeout)

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def post(self, path, body, timeout=60, **kw):
        return requests.post(self.url + path, data=json.dumps(body), headers=self.headers(),
                             timeout=timeout, **kw)

    def get(self, path, timeout=30, **kw):
        return requests.get(self.url + path, headers=self.headers(), timeout=timeout, **kw)

    def metrics(self) -> dict:
        """Parsed /metrics: family name → prometheus_client Metric."""
        r = requests.get(self.url + "/metrics", timeout=10)
        assert r.status_code == 200, r.text
        return {f.name: f for f in text_string_to_metric_families(r.text)}

    def metric(self, sample: str, **labels) -> float:
        """The value of the one sample named `sample` (e.g. 'vllm:prompt_tokens_total') whose
        labels include `labels`, whatever family the parser put it in (the family/TYPE checks
        are test_metrics.py's job)."""
        r = requests.get(self.url + "/metrics", timeout=10)
        assert r.status_code == 200, r.text
        vals = [s.value for f in text_string_to_metric_families(r.text) for s in f.samples
                if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(vals) == 1, f"/metrics: {sample} {labels}: {vals}"
        return vals[0]


@pytest.fixture(scope="session")
def model_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def llama_dir(model_root) -> Path:
    """The tiny llama_f32 fixture with a byte-level tokenizer and a chat template, named 'llama'."""
    return tiny_model.make(FIXTURES / "models" / "llama_f32", model_root / BASE)


@pytest.fixture(scope="session")
def long_dir(model_root) -> Path:
    """The same weights with max_position_embeddings 16384 (RoPE works at any position), for
    requests that must run for seconds (disconnect, shutdown, traffic during other tests)."""
    d = tiny_model.make(FIXTURES / "models" / "llama_f32", model_root / "llama_long")
    cfg = json.loads((d / "config.json").read_text())
    cfg["max_position_embeddings"] = 16384
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def adapter_args(names=ADAPTERS):
    args = []
    for name in names:
        args += ["--lora", f"{name}={ADAPTER_FIXTURES / ADAPTERS[name]}"]
    return args


@pytest.fixture
def start_server():
    """Factory: start_server(model_dir, args=[...], api_key=None) → a ready LoomServer; every
    server it started is stopped when the test ends, pass or fail."""
    servers = []

    def start(model_dir, args=(), api_key=None, **kw):
        s = LoomServer(model_dir, args, api_key)
        servers.append(s)
        return s.start(**kw)

    yield start
    for s in servers:
        s.kill()


@pytest.fixture(scope="module")
def demo():
    """The real server started with no --model: the bundled demo model (DEMO) and its adapters."""
    s = LoomServer(None, [])
    try:
        s.start(ready_timeout=120)
        yield s
    finally:
        s.kill()


@pytest.fixture(scope="session")
def server(llama_dir):
    """The shared server: base 'llama' + adapters qv, mlp, all, embed."""
    s = LoomServer(llama_dir, adapter_args())
    try:
        s.start()
        yield s
    finally:
        s.kill()


# ---- request helpers ----------------------------------------------------------------------------

PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time, in a land", "0123456789 abc"]


def chat_prompt_bytes(content: str) -> bytes:
    """tiny_model's chat template with add_generation_prompt."""
    return f"<|user|>{content}\n<|assistant|>".encode()


def printable(tok: int) -> bool:
    return 0x20 <= tok <= 0x7E


def complete(srv, model, prompt, max_tokens=16, **kw):
    """Greedy (unless told) non-streaming completion through the openai client; returns the
    first choice plus the response."""
    extra = {"return_token_ids": True}
    extra.update(kw.pop("extra_body", {}))
    kw.setdefault("temperature", 0)
    r = srv.client().completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                        extra_body=extra, **kw)
    return r


def greedy_long(srv, prompt, n=48):
    """The base model's greedy choice of n tokens for `prompt`, EOS ignored."""
    return complete(srv, BASE, prompt, max_tokens=n, extra_body={"ignore_eos": True}).choices[0]


def tokens_in(srv, model, seconds, lo, hi):
    """How many greedy tokens one request of `model` generates in about `seconds` here, within
    [lo, hi]: measured on a 256-token request alone. Sizes requests that must still be running
    at some later point whatever the machine's speed (later tokens cost more, attending to more
    positions, so the estimate errs long)."""
    t = time.monotonic()
    r = requests.post(srv.url + "/v1/completions", headers=srv.headers(), timeout=120,
                      json={"model": model, "prompt": "Rate", "max_tokens": 256,
                            "ignore_eos": True, "temperature": 0})
    assert r.status_code == 200, r.text
    rate = 256 / max(time.monotonic() - t, 1e-3)
    return int(min(hi, max(lo, seconds * rate)))


class Blocker:
    """A long greedy stream (15000 tokens: seconds on the long-context copy) that holds an engine
    slot until closed. Its chunks are read on a daemon thread: a client that stops reading is
    dropped by the server's write timeout (10 s) once the socket buffers fill."""

    def __init__(self, srv, model, prompt="block"):
        self.response = requests.post(
            srv.url + "/v1/completions", stream=True, timeout=60, headers=srv.headers(),
            json={"model": model, "prompt": prompt, "max_tokens": 15000, "ignore_eos": True,
                  "stream": True})
        assert self.response.status_code == 200, self.response.text
        self.lines = self.response.iter_lines()
        next(self.lines)  # running
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        try:
            for _ in self.lines:
                pass
        except Exception:  # noqa: BLE001 — closed by the test
            pass

    def close(self):
        self.response.close()
        self.thread.join(10)


def step_buckets(srv, family):
    """The cumulative bucket counts of a loom_step_* histogram: {upper bound: steps}."""
    text = requests.get(srv.url + "/metrics", timeout=10).text
    return {float(s.labels["le"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == family + "_bucket"}


def steps_above(buckets, bound, before=None):
    """Steps whose value was above `bound` (a bucket's upper bound), since `before` if given."""
    n = buckets[float("inf")] - buckets[float(bound)]
    return n - (steps_above(before, bound) if before else 0)


def running_requests(srv):
    return srv.metric("vllm:num_requests_running")


def wait_until(pred, timeout=10.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def greedy(srv, model, prompt, max_tokens=24, stream=False, timeout=60):
    """Greedy tokens of a completion (ignore_eos), streaming or not, via the openai client:
    (token ids, text, finish_reason)."""
    kw = dict(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
              extra_body={"return_token_ids": True, "ignore_eos": True})
    client = srv.client(timeout=timeout)
    if not stream:
        c = client.completions.create(**kw).choices[0]
        return c.token_ids, c.text, c.finish_reason
    ids, text, finish = [], "", None
    for ch in client.completions.create(stream=True, **kw):
        for c in ch.choices:
            ids += c.token_ids or []
            text += c.text
            if c.finish_reason:
                finish = c.finish_reason
    return ids, text, finish


@pytest.fixture(scope="session")
def reference(server):
    """reference(adapter_name, prompt, max_tokens) → greedy (ids, text, finish) of the shared
    server, where the adapter was given with --lora at start-up; cached."""
    cache = {}

    def ref(model, prompt, max_tokens=24):
        key = (model, prompt, max_tokens)
        if key not in cache:
            cache[key] = greedy(server, model, prompt, max_tokens)
        return cache[key]

    return ref


@pytest.fixture
def lora_dir(tmp_path):
    """A --lora-dir with the test adapters as sub-folders (copies), plus traps: 'evil', a symlink
    to an adapter outside the root, 'junk', a folder that is not an adapter, 'broken' (a bad
    config) and 'noweights' (a config without its tensors)."""
    import shutil
    root = tmp_path / "loras"
    root.mkdir()
    for name, fixture in ADAPTERS.items():
        shutil.copytree(ADAPTER_FIXTURES / fixture, root / name)
    outside = tmp_path / "outside"
    shutil.copytree(ADAPTER_FIXTURES / ADAPTERS["qv"], outside / "qv_copy")
    (root / "evil").symlink_to(outside / "qv_copy")
    (root / "junk").mkdir()
    (root / "junk" / "readme.txt").write_text("not an adapter")
    shutil.copytree(ADAPTER_FIXTURES / ADAPTERS["qv"], root / "broken")
    (root / "broken" / "adapter_config.json").write_text('{"r": 8, "lora_alpha": ')
    shutil.copytree(ADAPTER_FIXTURES / ADAPTERS["qv"], root / "noweights")  # config, no tensors
    (root / "noweights" / "adapter_model.safetensors").unlink()
    return root
