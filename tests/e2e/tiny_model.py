"""Builds a servable copy of a tiny fixture model: the fixture's weights plus a byte-level BPE
tokenizer.json (256 byte tokens = the model's vocabulary, no merges) and a chat template, so
the server's text paths (tokenize, chat template, detokenize, stop strings) run end to end."""
import json
import shutil
from pathlib import Path


def bytes_to_unicode():
    # GPT-2's byte → printable character table (what ByteLevel pre-tokenizers use).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def tokenizer_json():
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }


def make(fixture_model: Path, out: Path) -> Path:
    """Copies `fixture_model` to `out` and adds tokenizer.json and tokenizer_config.json."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(fixture_model, out)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json()))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
        "eos_token": None, "bos_token": None}))
    return out


if __name__ == "__main__":
    import sys
    make(Path(sys.argv[1]), Path(sys.argv[2]))
