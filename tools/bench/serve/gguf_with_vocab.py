# Copies a bench-model GGUF (tokenizer "none") adding a placeholder SentencePiece vocabulary, so llama-server can turn generated ids into text.
"""llama-server detokenizes every token it generates; with the bench model's "none" tokenizer
(dummy tokens) it aborts in llama_vocab::token_get_attr at the first one. This writes a copy of
the GGUF with tokenizer.ggml.model = "llama" and one placeholder piece per id: <unk>, <s>, </s>
at their ids, the 256 byte tokens <0x00>..<0xFF>, and "t<id>" for every other id. The tensors
and all other metadata are copied unchanged, so the weights and the work per token are the same.
The load generator sends token-id prompts, so the pieces never need to mean anything.

    .venv-bench/bin/python tools/bench/serve/gguf_with_vocab.py IN.gguf OUT.gguf
"""
import os
import sys

import gguf


def main():
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    vocab = int(reader.fields[f"{arch}.vocab_size"].contents())
    bos = int(reader.fields[gguf.Keys.Tokenizer.BOS_ID].contents())
    eos = int(reader.fields[gguf.Keys.Tokenizer.EOS_ID].contents())
    tokens, types = [], []
    byte_base = 3
    for i in range(vocab):
        if i == 0:
            tokens.append("<unk>"); types.append(gguf.TokenType.UNKNOWN)
        elif i == bos:
            tokens.append("<s>"); types.append(gguf.TokenType.CONTROL)
        elif i == eos:
            tokens.append("</s>"); types.append(gguf.TokenType.CONTROL)
        elif byte_base <= i < byte_base + 256 and i not in (bos, eos):
            tokens.append(f"<0x{i - byte_base:02X}>"); types.append(gguf.TokenType.BYTE)
        else:
            tokens.append(f"t{i}"); types.append(gguf.TokenType.NORMAL)
    tmp = dst + ".tmp"
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name.startswith("tokenizer.ggml.") and field.name not in (
                gguf.Keys.Tokenizer.BOS_ID, gguf.Keys.Tokenizer.EOS_ID):
            continue
        vt = field.types[0]
        sub = field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vt, sub_type=sub)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    os.replace(tmp, dst)
    print(f"[gguf_with_vocab] wrote {dst}: {vocab} placeholder tokens (bos {bos}, eos {eos})")


if __name__ == "__main__":
    main()
