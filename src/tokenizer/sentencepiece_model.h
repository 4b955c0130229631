// SentencePiece's tokenizer.model (a protobuf ModelProto) read with a bounded wire-format
// reader: the pieces and the trainer / normalizer settings the fast-tokenizer conversion uses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::tokenizer {

// SentencePiece.Type of a piece.
enum SpPieceType : int32_t {
  kSpNormal = 1,
  kSpUnknown = 2,
  kSpControl = 3,
  kSpUserDefined = 4,
  kSpUnused = 5,
  kSpByte = 6,
};

struct SpPiece {
  std::string piece;
  float score = 0.0f;
  int32_t type = kSpNormal;
};

// The fields of ModelProto loom reads, with the proto's defaults.
struct SpModel {
  std::vector<SpPiece> pieces;
  // trainer_spec
  int32_t model_type = 1;  // 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  // normalizer_spec
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Most pieces a tokenizer.model may hold (the largest real vocab is ~256k).
inline constexpr size_t kMaxSpPieces = size_t{1} << 22;

// Parses a serialized ModelProto. Every length is checked against the buffer, nesting is two
// levels, unknown fields are skipped; errors name `what` (the file) and the field.
StatusOr<SpModel> ParseSentencePieceModel(std::string_view bytes, const std::string& what);

}  // namespace loom::tokenizer
