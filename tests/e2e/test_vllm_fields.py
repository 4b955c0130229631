"""vLLM 0.32's own request fields: bodies that vLLM's request models serialise (every field, most
null or at their default) are served; a value asking for what loom does not do is a 400 naming the
field (docs/API.md, "vLLM's request fields")."""
import pytest

from conftest import BASE

# vLLM 0.32.0: CompletionRequest(model=..., prompt="Hello world").model_dump(mode="json").
COMPLETION_DUMP = {
    "model": BASE, "prompt": "Hello world", "echo": False, "frequency_penalty": None,
    "logit_bias": None, "logprobs": None, "max_tokens": 16, "n": 1, "presence_penalty": None,
    "seed": None, "stop": [], "stream": False, "stream_options": None, "suffix": None,
    "temperature": None, "top_p": None, "user": None, "use_beam_search": False, "top_k": None,
    "min_p": None, "repetition_penalty": None, "watermarking": None, "length_penalty": 1.0,
    "stop_token_ids": [], "include_stop_str_in_output": False, "ignore_eos": False,
    "min_tokens": 0, "skip_special_tokens": True, "spaces_between_special_tokens": True,
    "truncate_prompt_tokens": None, "truncation_side": None, "allowed_token_ids": None,
    "prompt_logprobs": None, "logprob_token_ids": None, "bad_words": [], "prompt_embeds": None,
    "add_special_tokens": True, "response_format": None, "structured_outputs": None,
    "priority": 0, "request_id": "b2d5ca41359e1c46", "session_id": None,
    "return_tokens_as_token_ids": None, "return_token_ids": None,
    "routed_experts_prompt_start": 0, "return_token_offsets": False, "mm_payload": "tensors",
    "return_mm_kwargs": None, "cache_salt": None, "kv_transfer_params": None,
    "ec_transfer_params": None, "vllm_xargs": None, "repetition_detection": None,
    "thinking_token_budget": None, "stream_interval": None,
}

# vLLM 0.32.0: ChatCompletionRequest(model=..., messages=[...]).model_dump(mode="json"), with
# max_completion_tokens set (else the answer fills the context).
CHAT_DUMP = {
    "messages": [{"content": "hi", "role": "user"}], "model": BASE, "frequency_penalty": None,
    "logit_bias": None, "logprobs": False, "top_logprobs": 0, "max_tokens": None,
    "max_completion_tokens": 4, "n": 1, "presence_penalty": None, "response_format": None,
    "seed": None, "stop": [], "stream": False, "stream_options": None, "temperature": None,
    "top_p": None, "tools": None, "tool_choice": "none", "reasoning_effort": None,
    "thinking_token_budget": None, "include_reasoning": True, "parallel_tool_calls": True,
    "user": None, "use_beam_search": False, "top_k": None, "min_p": None,
    "repetition_penalty": None, "watermarking": None, "length_penalty": 1.0, "stop_token_ids": [],
    "include_stop_str_in_output": False, "ignore_eos": False, "min_tokens": 0,
    "skip_special_tokens": True, "spaces_between_special_tokens": True,
    "truncate_prompt_tokens": None, "truncation_side": None, "prompt_logprobs": None,
    "logprob_token_ids": None, "allowed_token_ids": None, "bad_words": [], "echo": False,
    "add_generation_prompt": True, "continue_final_message": False, "add_special_tokens": False,
    "documents": None, "chat_template": None, "chat_template_kwargs": None,
    "media_io_kwargs": None, "mm_processor_kwargs": None, "structured_outputs": None,
    "priority": 0, "request_id": "9bbcdd33b6c21f51", "session_id": None,
    "return_tokens_as_token_ids": None, "return_token_ids": None,
    "routed_experts_prompt_start": 0, "return_token_offsets": False, "return_prompt_text": None,
    "mm_payload": "tensors", "return_mm_kwargs": None, "cache_salt": None,
    "kv_transfer_params": None, "ec_transfer_params": None, "vllm_xargs": None,
    "repetition_detection": None, "stream_interval": None,
}

def dump(d, **changes):
    return {**d, **changes}


def test_vllms_own_serialised_requests_are_served(server):
    r = server.post("/v1/completions", dump(COMPLETION_DUMP))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    r = server.post("/v1/chat/completions", dump(CHAT_DUMP))
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 4
    # The same with the openai client, as vLLM's docs pass its extensions (extra_body).
    extra = {k: v for k, v in dump(COMPLETION_DUMP).items()
             if k not in ("model", "prompt", "max_tokens", "echo", "stream", "stop", "n",
                          "user", "suffix", "seed", "temperature", "top_p", "logprobs",
                          "logit_bias", "frequency_penalty", "presence_penalty",
                          "stream_options")}
    c = server.client().completions.create(model=BASE, prompt="Hello", max_tokens=3,
                                           extra_body=extra)
    assert c.usage.completion_tokens <= 3


@pytest.mark.parametrize("field,value", [
    ("use_beam_search", True), ("length_penalty", 0.5), ("watermarking", True),
    ("logprob_token_ids", [5]),
    ("structured_outputs", {"choice": ["a", "b"]}), ("kv_transfer_params", {"x": 1}),
    ("vllm_xargs", {"k": 1}), ("stream_interval", 3), ("logits_processors", ["p"]),
    ("guided_json", {"type": "object"}), ("thinking_token_budget", 10),
])
def test_a_value_loom_cannot_honour_is_a_400_naming_it(server, field, value):
    for path, d in (("/v1/completions", COMPLETION_DUMP), ("/v1/chat/completions", CHAT_DUMP)):
        r = server.post(path, dump(d, **{field: value}))
        assert r.status_code == 400, (path, field, r.text)
        e = r.json()["error"]
        assert e["param"] == field, e
        assert "loom does not support" in e["message"], e


def test_endpoint_only_fields(server):
    r = server.post("/v1/completions", dump(COMPLETION_DUMP, prompt_embeds=["AAAA"]))
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_embeds", r.text
    for field, value in (("include_reasoning", False), ("documents", [{"text": "x"}]),
                         ("chat_template", "{{ messages }}"), ("return_prompt_text", True),
                         ("mm_processor_kwargs", {"a": 1})):
        r = server.post("/v1/chat/completions", dump(CHAT_DUMP, **{field: value}))
        assert r.status_code == 400, (field, r.text)
        assert r.json()["error"]["param"] == field, r.text
    # vLLM ignores these on the generation routes, and so does loom.
    r = server.post("/v1/chat/completions",
                    dump(CHAT_DUMP, session_id="s-1", return_token_offsets=True,
                         mm_payload="none", routed_experts_prompt_start=2))
    assert r.status_code == 200, r.text


def test_completions_take_chats_storage_fields_and_text_response_format(server):
    fields = {"response_format": {"type": "text"}, "metadata": {"user": "u1"}, "store": False,
              "service_tier": "default"}
    r = server.post("/v1/completions", {"model": BASE, "prompt": "Hello", "max_tokens": 3,
                                        **fields})
    assert r.status_code == 200, r.text
    for field, value in (("response_format", {"type": "json_object"}), ("metadata", {"k": 5}),
                         ("store", "yes"), ("service_tier", "fastest")):
        r = server.post("/v1/completions", {"model": BASE, "prompt": "Hello", "max_tokens": 3,
                                            field: value})
        assert r.status_code == 400, (field, r.text)
        assert r.json()["error"]["param"] == field, r.text


def test_priority_is_accepted_and_ignored_as_by_vllms_default_scheduler(server):
    # vLLM 0.32's default scheduling policy (fcfs) takes any priority and ignores it.
    base = {"model": BASE, "prompt": "Hello", "max_tokens": 4, "temperature": 0}
    plain = server.post("/v1/completions", base).json()["choices"][0]["text"]
    for priority in (0, 7, -100, 2**63 - 1):
        r = server.post("/v1/completions", {**base, "priority": priority})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == plain
    r = server.post("/v1/chat/completions", dump(CHAT_DUMP, priority=3))
    assert r.status_code == 200, r.text
    for bad in ("high", 1.5, 2**63):
        r = server.post("/v1/completions", {**base, "priority": bad})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "priority", r.text


def test_cache_salt_separates_cached_prefixes(start_server, llama_dir):
    # vLLM's cache_salt: prompts share cached KV blocks only under the same salt (or both none).
    srv = start_server(llama_dir)
    prompt = "A prefix long enough to fill two KV blocks of sixteen tokens each."  # > 32 tokens

    def run(salt, chat=False):
        before = srv.metric("vllm:prefix_cache_hits_total")
        extra = {} if salt is None else {"cache_salt": salt}
        if chat:
            r = srv.post("/v1/chat/completions",
                         {"model": BASE, "messages": [{"role": "user", "content": prompt}],
                          "max_tokens": 4, "temperature": 0, **extra})
        else:
            r = srv.post("/v1/completions", {"model": BASE, "prompt": prompt, "max_tokens": 4,
                                             "temperature": 0, **extra})
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        return srv.metric("vllm:prefix_cache_hits_total") - before, c.get("text", c.get("message"))

    hits, plain = run(None)
    assert hits == 0
    full, again = run(None)  # unsalted prompts share their full blocks, as before
    assert full >= 32 and full % 16 == 0 and again == plain
    assert run("tenant-a") == (0, plain)  # a salt never reuses unsalted blocks
    assert run("tenant-a") == (full, plain)  # the same salt does
    assert run("tenant-b") == (0, plain)
    assert run("tenant-b")[0] == full
    assert run("tenant-a", chat=True)[0] == 0  # another prompt (the chat template's)
    assert run("tenant-a", chat=True)[0] >= 32
    assert run("tenant-b", chat=True)[0] == 0
    for bad in ("", "a/b", "x" * 129, 5):
        r = srv.post("/v1/completions", {"model": BASE, "prompt": "x", "cache_salt": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt", r.text
