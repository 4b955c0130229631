// tokenizer.json decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder,
// Sequence. Any other type is rejected by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// Rewrites the list of token strings (HF decode_chain); the decoded text is their concatenation.
// Immutable; thread-safe.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // `max_bytes` bounds what a growing decoder (Replace) may make of all tokens together: a
  // replacement that would pass it leaves that token as it is (decoding cannot fail).
  virtual void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const = 0;
};

// `j` is the "decoder" value of tokenizer.json; null gives a null pointer.
StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j);

}  // namespace loom::tokenizer
