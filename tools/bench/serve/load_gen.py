# Asyncio load generator for OpenAI-compatible servers (loom, vLLM, llama-server): streaming /v1/completions with token-id prompts, TTFT/ITL/throughput, server RSS, adapter churn; one JSON report.
"""Closed-loop load generator for an OpenAI-compatible completion server, on loopback.

    python tools/bench/serve/load_gen.py --base-url http://127.0.0.1:8000 --model base,a0,a1 \
        --concurrency 8 --num-requests 16 --prompt-len 128 --max-tokens 64 --vocab-size 151936 \
        --server-pid 12345 --output result.json

`--concurrency` clients each send one request at a time (a new one as soon as the last one ends).
Request i uses model `models[i % len(models)]` (round-robin) and a prompt of random token ids drawn
from a generator seeded with (--seed, i), so two runs (or two servers) get the same requests.
Each request is a streaming POST /v1/completions on a connection of its own (no keep-alive), with
`temperature 0`, `ignore_eos true`, `max_tokens`, `stream_options.include_usage` and (default, for
loom and vLLM) `return_token_ids`, which makes the server send one chunk per token even when a
token's text is empty.

Bounded: stops issuing requests after --num-requests or --duration (whichever comes first; one of
them is required), and cancels whatever is still running --drain-timeout seconds later.

The report (one JSON object, on stdout and in --output) has requests/s, output tokens/s, TTFT,
inter-token latency (ITL), time per output token (TPOT) and end-to-end latency percentiles, errors
by HTTP status, the server's peak RSS (VmHWM from /proc/PID/status with --server-pid), server and
client CPU time, an RSS time series (--rss-interval) with a flatness verdict, and adapter
load/unload churn results (--churn-interval).
"""
import argparse
import asyncio
import json
import os
import random
import resource
import sys
import time

try:
    import aiohttp
except ImportError:  # pragma: no cover
    sys.exit("load_gen.py needs aiohttp (pip install aiohttp); see tools/bench/serve/README.md")


# --------------------------------------------------------------------------------------------
# statistics


def percentile(values, p):
    """Linear-interpolated percentile (numpy's default), None for an empty list."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary_ms(values):
    if not values:
        return {"n": 0}
    return {"n": len(values), "mean": 1e3 * sum(values) / len(values),
            "p50": 1e3 * percentile(values, 50), "p90": 1e3 * percentile(values, 90),
            "p99": 1e3 * percentile(values, 99), "max": 1e3 * max(values)}


# --------------------------------------------------------------------------------------------
# /proc readers (the server must run on this machine)


def descendants(pid):
    """Child processes of `pid`, recursively (from /proc/*/stat)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def proc_status_kib(pid, key):
    """A /proc/PID/status field in KiB; for a list of pids, the sum (None if none is readable)."""
    if isinstance(pid, (list, tuple)):
        vals = [v for v in (proc_status_kib(p, key) for p in pid) if v is not None]
        return sum(vals) if vals else None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def proc_cpu_s(pid):
    """utime + stime of a process (all its threads), seconds; summed over a list of pids."""
    if isinstance(pid, (list, tuple)):
        vals = [v for v in (proc_cpu_s(p) for p in pid) if v is not None]
        return sum(vals) if vals else None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def listen_overflows():
    """TcpExtListenOverflows (system-wide): SYNs dropped because a listen queue was full; each
    costs the client a 1 s retransmission, which shows up as TTFT."""
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            if head.startswith("TcpExt:"):
                return int(dict(zip(head.split()[1:], vals.split()[1:]))["ListenOverflows"])
    except (OSError, KeyError, ValueError):
        return None
    return None


def machine_busy_s():
    """CPU-seconds all CPUs spent busy (not idle/iowait), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def self_cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# --------------------------------------------------------------------------------------------
# requests


class Workload:
    """Deterministic request i: model, prompt ids, max_tokens."""

    def __init__(self, args):
        self.args = args
        self.models = [m for m in args.model.split(",") if m]
        self.lora_ids = {}
        for item in (args.lora_ids or "").split(","):
            if item:
                name, _, n = item.partition("=")
                self.lora_ids[name] = int(n)
        lo = args.min_token_id
        hi = args.vocab_size if args.max_token_id is None else args.max_token_id + 1
        if hi <= lo:
            raise SystemExit("empty token-id range: check --vocab-size / --min-token-id")
        self.id_range = (lo, hi)

    def lengths(self, rng):
        a = self.args
        if not a.random_lengths:
            return a.prompt_len, a.max_tokens
        r = a.range_ratio

        def pick(n):
            return max(1, rng.randint(max(1, int(round(n * (1 - r)))), max(1, int(round(n * (1 + r))))))
        return pick(a.prompt_len), pick(a.max_tokens)

    def request(self, i, model=None, prompt_len=None, max_tokens=None):
        rng = random.Random(self.args.seed * 1_000_003 + i)
        p, m = self.lengths(rng)
        p = prompt_len or p
        m = max_tokens or m
        lo, hi = self.id_range
        prompt = [rng.randrange(lo, hi) for _ in range(p)]
        model = model or self.models[i % len(self.models)]
        return model, self.body(model, prompt, m)

    def body(self, model, prompt, max_tokens):
        a = self.args
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "stream": True}
        if a.peer == "llama-server":
            # llama-server: the request names its adapters by id; a "lora" list sets every adapter
            # not listed to scale 0, so [] is the base model.
            body["lora"] = ([{"id": self.lora_ids[model], "scale": 1.0}]
                            if model in self.lora_ids else [])
            body["stream_options"] = {"include_usage": True}
            body["cache_prompt"] = not a.no_prefix_cache_hint
        else:
            body["stream_options"] = {"include_usage": True}
            if a.return_token_ids:
                body["return_token_ids"] = True
        if a.sampled_fraction > 0 and random.Random(a.seed * 7919 + len(prompt) * 31 + prompt[0]).random() < a.sampled_fraction:
            # seeded sampling: the same request gives the same tokens alone or in any batch
            body.update({"temperature": 0.8, "top_p": 0.95, "seed": prompt[0] + 1})
        if a.verify_solo > 0 and a.peer != "llama-server":
            body["logprobs"] = 1
        if a.extra_body:
            body.update(json.loads(a.extra_body))
        return body


class Result:
    __slots__ = ("index", "model", "ok", "status", "error", "start", "end", "ttft", "itls",
                 "out_tokens", "prompt_tokens", "chunks", "ids", "logprobs")

    def __init__(self, index, model):
        self.index, self.model = index, model
        self.ok, self.status, self.error = False, None, None
        self.start = self.end = self.ttft = None
        self.itls = []
        self.out_tokens = 0
        self.prompt_tokens = None
        self.chunks = 0
        self.ids = []       # generated token ids, as streamed (return_token_ids)
        self.logprobs = []  # their log-probs, as streamed (logprobs=1)


def error_key(exc):
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    return "exception:" + type(exc).__name__


async def stream_completion(session, url, headers, body, result, timeout_s, empty_text_is_token=False):
    """POST one streaming completion; fills `result` (times from time.perf_counter())."""
    result.start = time.perf_counter()
    last = None
    usage_tokens = None
    id_tokens = 0
    done = False
    try:
        async with session.post(url, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=10)) as resp:
            result.status = resp.status
            if resp.status != 200:
                text = await resp.text()
                result.error = text[:300]
                return result
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                try:
                    obj = json.loads(data)
                except ValueError:
                    result.status, result.error = "bad-sse", data[:300].decode("utf-8", "replace")
                    return result
                if "error" in obj:
                    result.status = "stream-error"
                    result.error = json.dumps(obj["error"])[:300]
                    return result
                usage = obj.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    usage_tokens = usage["completion_tokens"]
                    if usage.get("prompt_tokens") is not None:
                        result.prompt_tokens = usage["prompt_tokens"]
                choices = obj.get("choices") or []
                if not choices:
                    continue
                c = choices[0]
                ids = c.get("token_ids")
                text = c.get("text")
                if text is None and isinstance(c.get("delta"), dict):
                    text = c["delta"].get("content")
                if ids:
                    id_tokens += len(ids)
                    result.ids.extend(ids)
                lp = c.get("logprobs")
                if isinstance(lp, dict) and lp.get("token_logprobs"):
                    result.logprobs.extend(lp["token_logprobs"])
                elif not text and not (empty_text_is_token and c.get("finish_reason") is None):
                    continue  # no token in this chunk (e.g. a bare finish_reason)
                result.chunks += 1
                if last is None:
                    result.ttft = now - result.start
                else:
                    result.itls.append(now - last)
                last = now
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        result.status = error_key(exc)
        result.error = repr(exc)[:300]
        return result
    except asyncio.CancelledError:
        result.status, result.error = "cancelled", "still running at the drain timeout"
        raise
    except Exception as exc:  # noqa: BLE001  (e.g. an over-long SSE line): count it, keep going
        result.status = error_key(exc)
        result.error = repr(exc)[:300]
        return result
    result.end = time.perf_counter()
    result.out_tokens = usage_tokens if usage_tokens is not None else (id_tokens or result.chunks)
    result.ok = result.ttft is not None and done
    if result.ttft is None:
        result.status, result.error = "no-tokens", "stream ended without a token chunk"
    elif not done:
        result.status, result.error = "truncated-stream", "stream ended without data: [DONE]"
    return result


async def post_json(session, url, headers, body, timeout_s=120):
    t0 = time.perf_counter()
    try:
        async with session.post(url, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            return resp.status, time.perf_counter() - t0, text[:300]
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return error_key(exc), time.perf_counter() - t0, repr(exc)[:300]


# --------------------------------------------------------------------------------------------
# the run


class Runner:
    def __init__(self, args):
        self.args = args
        self.work = Workload(args)
        base = args.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        self.base = base
        self.url = base + "/v1/completions"
        self.headers = {"Connection": "close"}
        if args.api_key:
            self.headers["Authorization"] = "Bearer " + args.api_key
        self.results = []
        self.next_index = 0
        self.stop_issuing = False
        self.rss_samples = []  # (t since start, VmRSS MiB)
        self.churn = {"cycles": 0, "load": {}, "request": {}, "unload": {}, "errors": [],
                      "load_s": [], "unload_s": []}
        self.churn_loaded = None
        # llama-server sends one chunk per token, with empty text for tokens that have none (its
        # bench GGUF has no tokenizer), and no token ids: count those chunks as tokens.
        self.empty_text_is_token = args.peer == "llama-server"

    def connector(self):
        # force_close: one TCP connection per request, closed after it (llama-server drops reused
        # keep-alive connections now and then; vLLM's benchmark does the same).
        return aiohttp.TCPConnector(force_close=True, limit=0)

    async def worker(self, session, t_end, delay=0.0):
        a = self.args
        if delay > 0:
            await asyncio.sleep(delay)
        while not self.stop_issuing:
            if a.num_requests is not None and self.next_index >= a.num_requests:
                return
            if time.perf_counter() >= t_end:
                return
            i = self.next_index
            self.next_index += 1
            model, body = self.work.request(i)
            r = Result(i, model)
            self.results.append(r)
            await stream_completion(session, self.url, self.headers, body, r, a.request_timeout,
                                    self.empty_text_is_token)
            if not r.ok and r.status == 503 and a.retry_after_503 > 0:
                await asyncio.sleep(a.retry_after_503)

    async def rss_sampler(self, t0):
        a = self.args
        while True:
            kib = proc_status_kib(a.pids, "VmRSS")
            if kib is not None:
                self.rss_samples.append((round(time.perf_counter() - t0, 2), round(kib / 1024, 1)))
            await asyncio.sleep(a.rss_interval)

    async def churner(self, session):
        """Load an adapter under a fresh name, run one short request on it, unload it; repeat."""
        a = self.args
        paths = a.churn_path
        k = 0
        while not self.stop_issuing:
            name = f"{a.churn_prefix}{k}"
            path = paths[k % len(paths)]
            k += 1
            st, dt, text = await post_json(session, self.base + "/v1/load_lora_adapter", self.headers,
                                           {"lora_name": name, "lora_path": path})
            self.churn["load"][str(st)] = self.churn["load"].get(str(st), 0) + 1
            self.churn["load_s"].append(dt)
            if st != 200:
                self.churn["errors"].append({"op": "load", "name": name, "status": st, "body": text})
            else:
                self.churn_loaded = name
                _, body = self.work.request(10_000_000 + k, model=name, prompt_len=32, max_tokens=8)
                r = Result(-k, name)
                await stream_completion(session, self.url, self.headers, body, r, a.request_timeout,
                                    self.empty_text_is_token)
                key = str(r.status)
                self.churn["request"][key] = self.churn["request"].get(key, 0) + 1
                if not r.ok:
                    self.churn["errors"].append({"op": "request", "name": name, "status": r.status,
                                                 "body": r.error})
                st, dt, text = await post_json(session, self.base + "/v1/unload_lora_adapter",
                                               self.headers, {"lora_name": name})
                self.churn_loaded = None
                self.churn["unload"][str(st)] = self.churn["unload"].get(str(st), 0) + 1
                self.churn["unload_s"].append(dt)
                if st != 200:
                    self.churn["errors"].append({"op": "unload", "name": name, "status": st,
                                                 "body": text})
            self.churn["cycles"] += 1
            await asyncio.sleep(a.churn_interval)

    async def warmup(self, session):
        a = self.args
        if a.warmup <= 0:
            return
        tasks = []
        for j in range(a.warmup):
            model, body = self.work.request(20_000_000 + j, model=self.work.models[j % len(self.work.models)],
                                            max_tokens=min(4, a.max_tokens))
            r = Result(-1, model)
            tasks.append(stream_completion(session, self.url, self.headers, body, r, a.request_timeout,
                                           self.empty_text_is_token))
        done = await asyncio.gather(*tasks)
        bad = [f"{r.model}: {r.status} {r.error}" for r in done if not r.ok]
        if bad:
            print("[load_gen] warm-up errors: " + "; ".join(bad[:4]), file=sys.stderr)

    async def run(self):
        a = self.args
        async with aiohttp.ClientSession(connector=self.connector()) as session:
            await self.warmup(session)
            server_cpu0 = proc_cpu_s(a.pids) if a.pids else None
            rss0 = proc_status_kib(a.pids, "VmRSS") if a.pids else None
            client_cpu0 = self_cpu_s()
            self.overflows0 = listen_overflows()
            self.busy0 = machine_busy_s()
            t0 = time.perf_counter()
            issue_s = min(a.duration if a.duration is not None else a.max_time, a.max_time)
            t_end = t0 + issue_s
            side = []
            if a.pids and a.rss_interval > 0:
                side.append(asyncio.ensure_future(self.rss_sampler(t0)))
            if a.churn_interval > 0:
                side.append(asyncio.ensure_future(self.churner(session)))
            workers = [asyncio.ensure_future(self.worker(session, t_end, k * a.ramp_up / a.concurrency))
                       for k in range(a.concurrency)]
            # Issue until the count or duration bound, then let running requests finish (bounded).
            all_workers = asyncio.gather(*workers)
            try:
                await asyncio.wait_for(asyncio.shield(all_workers), timeout=issue_s + a.drain_timeout)
            except asyncio.TimeoutError:
                self.stop_issuing = True
                for w in workers:
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
            self.stop_issuing = True
            t1 = time.perf_counter()
            for s in side:
                s.cancel()
            await asyncio.gather(*side, return_exceptions=True)
            if self.churn_loaded:  # cancelled between load and unload: leave the server clean
                await post_json(session, self.base + "/v1/unload_lora_adapter", self.headers,
                                {"lora_name": self.churn_loaded})
            client_cpu1 = self_cpu_s()
            self.busy1 = machine_busy_s()
            server_cpu1 = proc_cpu_s(a.pids) if a.pids else None
            verify = await self.verify_solo(session) if a.verify_solo > 0 else None
        self.issue_s = issue_s
        rep = self.report(t0, t1, server_cpu0, server_cpu1, client_cpu0, client_cpu1, rss0)
        if verify is not None:
            rep["verify_solo"] = verify
        return rep

    async def verify_solo(self, session):
        """Re-run a sample of the finished requests one at a time, on the idle server, and compare
        token ids and log-probs with what they got under load (bitwise: the JSON numbers)."""
        a = self.args
        ok = sorted((r for r in self.results if r.ok and r.ids), key=lambda r: r.index)
        if not ok:
            return {"checked": 0, "equal": 0, "note": "no finished request carried token ids"}
        step = max(1, len(ok) // a.verify_solo)
        picked = ok[::step][:a.verify_solo]
        equal, mismatches, sampled = 0, [], 0
        for r in picked:
            model, body = self.work.request(r.index)
            if "seed" in body:
                sampled += 1
            solo = Result(r.index, model)
            await stream_completion(session, self.url, self.headers, body, solo, a.request_timeout)
            same = solo.ok and solo.ids == r.ids and solo.logprobs == r.logprobs
            if same:
                equal += 1
            else:
                first = next((k for k, (x, y) in enumerate(zip(solo.ids, r.ids)) if x != y), None)
                mismatches.append({"index": r.index, "model": model, "solo_ok": solo.ok,
                                   "first_token_diff": first, "len_load": len(r.ids),
                                   "len_solo": len(solo.ids),
                                   "logprobs_equal": solo.logprobs == r.logprobs})
        return {"checked": len(picked), "equal": equal, "sampled_requests": sampled,
                "mismatches": mismatches[:10]}

    def rss_verdict(self, duration_s):
        a = self.args
        s = self.rss_samples
        if len(s) < 4:
            return None
        warm = a.rss_warmup if a.rss_warmup is not None else max(5.0, duration_s / 3.0)
        after = [x for x in s if x[0] >= warm]
        if len(after) < 4:
            return {"warmup_s": warm, "note": "too few samples after warm-up"}
        k = max(1, min(5, len(after) // 4))
        start = sorted(v for _, v in after[:k])[k // 2]
        end = sorted(v for _, v in after[-k:])[k // 2]
        n = len(after)
        mt = sum(t for t, _ in after) / n
        mv = sum(v for _, v in after) / n
        den = sum((t - mt) ** 2 for t, _ in after) or 1.0
        slope = sum((t - mt) * (v - mv) for t, v in after) / den * 60.0  # MiB per minute
        growth = end - start
        tol = max(a.rss_flat_mib, 0.02 * start)
        return {"warmup_s": warm, "after_warmup_start_mib": start, "end_mib": end,
                "growth_mib": round(growth, 1), "slope_mib_per_min": round(slope, 1),
                "max_after_warmup_mib": max(v for _, v in after),
                "tolerance_mib": round(tol, 1), "flat": abs(growth) <= tol}

    def report(self, t0, t1, scpu0, scpu1, ccpu0, ccpu1, rss0):
        a = self.args
        rs = self.results
        ok = [r for r in rs if r.ok]
        errors = {}
        samples = []
        for r in rs:
            if not r.ok:
                k = str(r.status)
                errors[k] = errors.get(k, 0) + 1
                if len(samples) < 5:
                    samples.append({"model": r.model, "status": r.status, "body": r.error})
        # Throughput over the measured window: first request sent to the last one finished.
        ends = [r.end for r in ok]
        wall = (max(ends) if ends else t1) - t0
        wall = max(wall, 1e-9)
        out_tokens = sum(r.out_tokens for r in ok)
        prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
        ttft = [r.ttft for r in ok]
        itl = [x for r in ok for x in r.itls]
        tpot = [(r.end - r.start - r.ttft) / (r.out_tokens - 1) for r in ok if r.out_tokens > 1]
        e2e = [r.end - r.start for r in ok]
        per_model = {}
        for r in ok:
            m = per_model.setdefault(r.model, {"requests": 0, "output_tokens": 0})
            m["requests"] += 1
            m["output_tokens"] += r.out_tokens
        non503 = sum(v for k, v in errors.items() if k != "503")
        rep = {
            "tool": "load_gen.py",
            "base_url": a.base_url,
            "peer": a.peer,
            "models": self.work.models,
            "concurrency": a.concurrency,
            "num_requests_limit": a.num_requests,
            "duration_limit_s": a.duration,
            "prompt_len": a.prompt_len,
            "max_tokens": a.max_tokens,
            "ramp_up_s": a.ramp_up,
            "random_lengths": a.random_lengths,
            "range_ratio": a.range_ratio if a.random_lengths else None,
            "seed": a.seed,
            "requests_sent": len(rs),
            "requests_ok": len(ok),
            "wall_s": round(wall, 3),
            "requests_per_s": len(ok) / wall,
            "output_tokens": out_tokens,
            "output_tokens_per_s": out_tokens / wall,
            "prompt_tokens": prompt_tokens,
            "prompt_tokens_per_s": prompt_tokens / wall,
            "ttft_ms": summary_ms(ttft),
            "itl_ms": summary_ms(itl),
            "tpot_ms": summary_ms(tpot),
            "e2e_ms": summary_ms(e2e),
            "tokens_per_chunk": (out_tokens / max(1, sum(r.chunks for r in ok))) if ok else None,
            "errors": errors,
            "errors_non_503": non503,
            "error_samples": samples,
            "per_model": per_model,
            "tcp_listen_overflows": (None if self.overflows0 is None or listen_overflows() is None
                                     else listen_overflows() - self.overflows0),
            "client_cpu_s": round(ccpu1 - ccpu0, 2),
            "client_cpu_frac_of_wall": round((ccpu1 - ccpu0) / wall, 3),
        }
        if a.pids:
            hwm = proc_status_kib(a.pids, "VmHWM")
            rss = proc_status_kib(a.pids, "VmRSS")
            rep["server_pids"] = a.pids
            rep["server_peak_rss_mib"] = round(hwm / 1024, 1) if hwm is not None else None
            rep["server_rss_start_mib"] = round(rss0 / 1024, 1) if rss0 is not None else None
            rep["server_rss_end_mib"] = round(rss / 1024, 1) if rss is not None else None
            if scpu0 is not None and scpu1 is not None:
                rep["server_cpu_s"] = round(scpu1 - scpu0, 2)
                rep["server_cores_busy"] = round((scpu1 - scpu0) / max(t1 - t0, 1e-9), 2)
                if self.busy0 is not None and self.busy1 is not None:
                    # CPU taken by processes other than the server and this client, as a fraction
                    # of all CPUs over the run: anything above a few % distorts the figures.
                    others = (self.busy1 - self.busy0) - (scpu1 - scpu0) - (ccpu1 - ccpu0)
                    rep["others_cpu_frac"] = round(max(0.0, others) / (max(t1 - t0, 1e-9) * os.cpu_count()), 3)
            if self.rss_samples:
                rep["rss_samples"] = self.rss_samples
                rep["rss_verdict"] = self.rss_verdict(min(self.issue_s, t1 - t0))
        if a.churn_interval > 0:
            c = self.churn
            rep["churn"] = {"cycles": c["cycles"], "load_status": c["load"],
                            "request_status": c["request"], "unload_status": c["unload"],
                            "load_ms": summary_ms(c["load_s"]), "unload_ms": summary_ms(c["unload_s"]),
                            "errors": c["errors"][:10], "num_errors": len(c["errors"])}
        return rep


def human(rep):
    def f(x, fmt="{:.1f}"):
        return "—" if x is None else fmt.format(x)
    t, i = rep["ttft_ms"], rep["itl_ms"]
    lines = [
        f"[load_gen] {rep['requests_ok']}/{rep['requests_sent']} ok in {rep['wall_s']:.1f} s, "
        f"c={rep['concurrency']}, models={','.join(rep['models'])}",
        f"[load_gen] {rep['requests_per_s']:.3f} req/s, {rep['output_tokens_per_s']:.1f} output tok/s, "
        f"{rep['prompt_tokens_per_s']:.1f} prompt tok/s; TCP listen-queue overflows "
        f"{rep['tcp_listen_overflows']}",
        f"[load_gen] TTFT p50 {f(t.get('p50'))} ms p99 {f(t.get('p99'))} ms; "
        f"ITL p50 {f(i.get('p50'))} ms p99 {f(i.get('p99'))} ms; errors {rep['errors'] or 'none'}",
    ]
    if "server_peak_rss_mib" in rep:
        lines.append(f"[load_gen] server peak RSS {rep['server_peak_rss_mib']} MiB, "
                     f"cores busy {rep.get('server_cores_busy')}; client CPU {rep['client_cpu_frac_of_wall']}")
    if rep.get("rss_verdict"):
        lines.append(f"[load_gen] RSS after warm-up: {json.dumps(rep['rss_verdict'])}")
    if "verify_solo" in rep:
        v = rep["verify_solo"]
        lines.append(f"[load_gen] solo re-runs: {v['equal']}/{v['checked']} equal (token ids and "
                     f"log-probs), {v.get('sampled_requests', 0)} of them sampled")
    if "churn" in rep:
        c = rep["churn"]
        lines.append(f"[load_gen] churn: {c['cycles']} cycles, load {c['load_status']}, "
                     f"request {c['request_status']}, unload {c['unload_status']}")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000",
                    help="server root (a trailing /v1 is accepted)")
    ap.add_argument("--model", required=True,
                    help="comma-separated model names, used round-robin (base and/or adapters)")
    ap.add_argument("--peer", choices=["openai", "loom", "vllm", "llama-server"], default="openai",
                    help="request dialect: openai/loom/vllm send the vLLM body; llama-server picks "
                         "adapters with a 'lora' list (see --lora-ids)")
    ap.add_argument("--lora-ids", default="",
                    help="llama-server: NAME=ID,... mapping model names to --lora-scaled positions; "
                         "other names run on the base model")
    ap.add_argument("--concurrency", type=int, default=8, help="clients, each with one request in flight")
    ap.add_argument("--num-requests", type=int, default=None, help="requests to send in all")
    ap.add_argument("--ramp-up", type=float, default=0.0,
                    help="spread the clients' first requests evenly over this many seconds (0: all "
                         "connect at once)")
    ap.add_argument("--duration", type=float, default=None, help="seconds to keep issuing requests")
    ap.add_argument("--max-time", type=float, default=1800.0,
                    help="hard bound on the issuing phase when only --num-requests is given")
    ap.add_argument("--drain-timeout", type=float, default=300.0,
                    help="seconds to wait for running requests after issuing stops; then cancelled")
    ap.add_argument("--request-timeout", type=float, default=600.0, help="per request, seconds")
    ap.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (token ids)")
    ap.add_argument("--max-tokens", type=int, default=64, help="output tokens (ignore_eos)")
    ap.add_argument("--random-lengths", action="store_true",
                    help="draw prompt and output lengths uniformly in [n(1-r), n(1+r)]")
    ap.add_argument("--range-ratio", type=float, default=0.5, help="r for --random-lengths")
    ap.add_argument("--vocab-size", type=int, default=151936,
                    help="prompt ids are drawn from [--min-token-id, vocab-size)")
    ap.add_argument("--min-token-id", type=int, default=0)
    ap.add_argument("--max-token-id", type=int, default=None, help="overrides --vocab-size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=0,
                    help="requests (4 output tokens, sent together) before measuring")
    ap.add_argument("--return-token-ids", dest="return_token_ids", action="store_true", default=None,
                    help="send return_token_ids (vLLM extension): one chunk per token even when its "
                         "text is empty; default on except for --peer llama-server")
    ap.add_argument("--no-return-token-ids", dest="return_token_ids", action="store_false")
    ap.add_argument("--no-prefix-cache-hint", action="store_true",
                    help="llama-server: send cache_prompt false")
    ap.add_argument("--extra-body", default=None, help="JSON object merged into every request body")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    ap.add_argument("--retry-after-503", type=float, default=0.5,
                    help="a client that got 503 waits this long before its next request")
    ap.add_argument("--server-pid", default=None,
                    help="server process id(s), comma-separated, for peak RSS (VmHWM), RSS samples and "
                         "CPU time; several pids are summed (the peak then is an upper bound)")
    ap.add_argument("--server-children", action="store_true",
                    help="also count the server pids' descendant processes (vLLM's engine core runs "
                         "in a child process)")
    ap.add_argument("--rss-interval", type=float, default=0.0,
                    help="sample the server's VmRSS every this many seconds (0 = off)")
    ap.add_argument("--rss-warmup", type=float, default=None,
                    help="seconds of warm-up excluded from the RSS flatness check (default: a third "
                         "of the run, at least 5 s)")
    ap.add_argument("--rss-flat-mib", type=float, default=32.0,
                    help="RSS counts as flat when it grew by at most max(this, 2 %%) after warm-up")
    ap.add_argument("--churn-interval", type=float, default=0.0,
                    help="seconds between adapter load/request/unload cycles (0 = off)")
    ap.add_argument("--churn-path", action="append", default=[],
                    help="lora_path for churn loads (repeatable; as the server resolves it, e.g. a "
                         "sub-folder of loom's --lora-dir)")
    ap.add_argument("--churn-prefix", default="churn-", help="names of churned adapters")
    ap.add_argument("--verify-solo", type=int, default=0,
                    help="after the run, re-run this many finished requests one at a time and "
                         "compare their token ids and log-probs with the loaded run (asks for "
                         "logprobs=1)")
    ap.add_argument("--sampled-fraction", type=float, default=0.0,
                    help="this fraction of requests samples (temperature 0.8, top_p 0.95, a seed) "
                         "instead of greedy")
    ap.add_argument("--output", default=None, help="also write the JSON report here")
    ap.add_argument("--quiet", action="store_true", help="no human summary on stderr")
    ap.add_argument("--print-requests", type=int, default=0,
                    help="print the first N request bodies (prompt shortened) and exit")
    a = ap.parse_args(argv)
    if a.num_requests is None and a.duration is None:
        ap.error("give --num-requests and/or --duration (the run must be bounded)")
    if a.concurrency < 1:
        ap.error("--concurrency must be ≥ 1")
    if a.churn_interval > 0 and not a.churn_path:
        ap.error("--churn-interval needs at least one --churn-path")
    if a.churn_interval > 0 and a.peer == "llama-server":
        ap.error("llama-server has no load/unload endpoints: no --churn-interval")
    if a.rss_interval > 0 and not a.server_pid:
        ap.error("--rss-interval needs --server-pid")
    a.pids = [int(p) for p in (a.server_pid or "").split(",") if p]
    if a.server_children:
        a.pids += [c for p in list(a.pids) for c in descendants(p)]
    if a.return_token_ids is None:
        a.return_token_ids = a.peer != "llama-server"
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.print_requests:
        work = Workload(args)
        for i in range(args.print_requests):
            model, body = work.request(i)
            n = len(body["prompt"])
            body["prompt"] = body["prompt"][:8] + [f"... {n} ids in all"]
            print(json.dumps(body))
        return 0
    rep = asyncio.run(Runner(args).run())
    text = json.dumps(rep)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(rep, f, indent=1)
    if not args.quiet:
        print(human(rep), file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
