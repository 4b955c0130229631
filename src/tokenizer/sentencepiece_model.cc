// Bounded protobuf wire-format reader for SentencePiece's ModelProto (tokenizer.model).
#include "tokenizer/sentencepiece_model.h"

#include <cstring>

#include "tokenizer/bpe_model.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

// Wire types of the protobuf encoding.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type and value (an integer or a byte range).
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;     // varint / fixed
  std::string_view data;  // length-delimited
};

// Reads the fields of one message in order; every read is checked against the buffer. `what`
// (which must outlive the reader) and, for a repeated message, its `index` name it in errors: the
// name is built only for an error (one per piece cost 4M string builds in a model at the limit).
class Reader {
 public:
  static constexpr size_t kNoIndex = static_cast<size_t>(-1);
  Reader(std::string_view buf, std::string_view what, size_t index = kNoIndex)
      : buf_(buf), what_(what), index_(index) {}
  bool done() const { return pos_ >= buf_.size(); }

  StatusOr<Field> Next() {
    Field f;
    ASSIGN_OR_RETURN(const uint64_t key, Varint());
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.number == 0 || (key >> 3) > 0x1FFFFFFF) return Error("a field number out of range");
    switch (f.wire) {
      case kVarint: {
        ASSIGN_OR_RETURN(f.value, Varint());
        return f;
      }
      case kFixed64:
      case kFixed32: {
        const size_t n = f.wire == kFixed64 ? 8 : 4;
        if (buf_.size() - pos_ < n) return Error("a fixed-width field past the end");
        for (size_t i = 0; i < n; ++i) {
          f.value |= static_cast<uint64_t>(static_cast<uint8_t>(buf_[pos_ + i])) << (8 * i);
        }
        pos_ += n;
        return f;
      }
      case kLengthDelimited: {
        ASSIGN_OR_RETURN(const uint64_t len, Varint());
        if (len > buf_.size() - pos_) {
          return Error("field " + std::to_string(f.number) + " has length " + std::to_string(len) +
                       " past the end (" + std::to_string(buf_.size() - pos_) + " bytes left)");
        }
        f.data = buf_.substr(pos_, static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return f;
      }
      default:
        return Error("field " + std::to_string(f.number) + " has unsupported wire type " +
                     std::to_string(f.wire));
    }
  }

  Status Error(const std::string& msg) const {
    std::string where(what_);
    if (index_ != kNoIndex) where.append("[").append(std::to_string(index_)).append("]");
    return InvalidArgument(where + ": " + msg + " at byte " + std::to_string(pos_) +
                           " (not a SentencePiece model, or truncated)");
  }

 private:
  StatusOr<uint64_t> Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= buf_.size()) return Error("a varint past the end");
      const auto b = static_cast<uint8_t>(buf_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return Error("a varint longer than 10 bytes");
  }

  std::string_view buf_;
  std::string_view what_;
  size_t index_;
  size_t pos_ = 0;
};

// The field must have `wire` type; names the message and field otherwise.
Status Expect(const Reader& r, const Field& f, uint32_t wire, const char* name) {
  if (f.wire == wire) return OkStatus();
  return r.Error(std::string(name) + " (field " + std::to_string(f.number) + ") has wire type " +
                 std::to_string(f.wire) + ", expected " + std::to_string(wire));
}

int32_t AsInt32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

float AsFloat(uint64_t v) {
  const auto bits = static_cast<uint32_t>(v);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

Status ParsePiece(std::string_view data, const std::string& what, size_t index, SpPiece* p) {
  Reader r(data, what, index);
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    if (f.number == 1) {
      RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, "piece"));
      if (!IsValidUtf8(f.data)) return r.Error("piece is not valid UTF-8");
      if (f.data.size() > kMaxPieceBytes) {
        return r.Error("piece of " + std::to_string(f.data.size()) + " bytes, above the limit of " +
                       std::to_string(kMaxPieceBytes));
      }
      p->piece.assign(f.data);
    } else if (f.number == 2) {
      RETURN_IF_ERROR(Expect(r, f, kFixed32, "score"));
      p->score = AsFloat(f.value);
    } else if (f.number == 3) {
      RETURN_IF_ERROR(Expect(r, f, kVarint, "type"));
      p->type = AsInt32(f.value);
      if (p->type < kSpNormal || p->type > kSpByte) {
        return r.Error("piece type " + std::to_string(p->type) + " is not a SentencePiece type");
      }
    }
  }
  return OkStatus();
}

Status ParseTrainerSpec(std::string_view data, const std::string& what, SpModel* m) {
  Reader r(data, what);
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    auto int_field = [&](const char* name, int32_t* out) -> Status {
      RETURN_IF_ERROR(Expect(r, f, kVarint, name));
      *out = AsInt32(f.value);
      return OkStatus();
    };
    auto bool_field = [&](const char* name, bool* out) -> Status {
      RETURN_IF_ERROR(Expect(r, f, kVarint, name));
      *out = f.value != 0;
      return OkStatus();
    };
    auto string_field = [&](const char* name, std::string* out) -> Status {
      RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, name));
      if (!IsValidUtf8(f.data)) return r.Error(std::string(name) + " is not valid UTF-8");
      out->assign(f.data);
      return OkStatus();
    };
    switch (f.number) {
      case 3:
        RETURN_IF_ERROR(int_field("model_type", &m->model_type));
        break;
      case 24:
        RETURN_IF_ERROR(bool_field("treat_whitespace_as_suffix", &m->treat_whitespace_as_suffix));
        break;
      case 35:
        RETURN_IF_ERROR(bool_field("byte_fallback", &m->byte_fallback));
        break;
      case 40:
        RETURN_IF_ERROR(int_field("unk_id", &m->unk_id));
        break;
      case 41:
        RETURN_IF_ERROR(int_field("bos_id", &m->bos_id));
        break;
      case 42:
        RETURN_IF_ERROR(int_field("eos_id", &m->eos_id));
        break;
      case 43:
        RETURN_IF_ERROR(int_field("pad_id", &m->pad_id));
        break;
      case 45:
        RETURN_IF_ERROR(string_field("unk_piece", &m->unk_piece));
        break;
      case 46:
        RETURN_IF_ERROR(string_field("bos_piece", &m->bos_piece));
        break;
      case 47:
        RETURN_IF_ERROR(string_field("eos_piece", &m->eos_piece));
        break;
      case 48:
        RETURN_IF_ERROR(string_field("pad_piece", &m->pad_piece));
        break;
      default:
        break;
    }
  }
  return OkStatus();
}

Status ParseNormalizerSpec(std::string_view data, const std::string& what, SpModel* m) {
  Reader r(data, what);
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    switch (f.number) {
      case 1:
        RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, "name"));
        m->normalizer_name.assign(f.data);
        break;
      case 2:
        RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, "precompiled_charsmap"));
        m->precompiled_charsmap.assign(f.data);
        break;
      case 3:
        RETURN_IF_ERROR(Expect(r, f, kVarint, "add_dummy_prefix"));
        m->add_dummy_prefix = f.value != 0;
        break;
      case 4:
        RETURN_IF_ERROR(Expect(r, f, kVarint, "remove_extra_whitespaces"));
        m->remove_extra_whitespaces = f.value != 0;
        break;
      case 5:
        RETURN_IF_ERROR(Expect(r, f, kVarint, "escape_whitespaces"));
        m->escape_whitespaces = f.value != 0;
        break;
      default:
        break;
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<SpModel> ParseSentencePieceModel(std::string_view bytes, const std::string& what) {
  SpModel m;
  Reader r(bytes, what);
  const std::string pieces_what = what + " pieces";
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    if (f.number == 1) {
      RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, "pieces"));
      if (m.pieces.size() >= kMaxSpPieces) {
        return r.Error("more than " + std::to_string(kMaxSpPieces) + " pieces");
      }
      SpPiece p;
      RETURN_IF_ERROR(ParsePiece(f.data, pieces_what, m.pieces.size(), &p));
      m.pieces.push_back(std::move(p));
    } else if (f.number == 2) {
      RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, "trainer_spec"));
      RETURN_IF_ERROR(ParseTrainerSpec(f.data, what + " trainer_spec", &m));
    } else if (f.number == 3) {
      RETURN_IF_ERROR(Expect(r, f, kLengthDelimited, "normalizer_spec"));
      RETURN_IF_ERROR(ParseNormalizerSpec(f.data, what + " normalizer_spec", &m));
    }
  }
  if (m.pieces.empty()) {
    return InvalidArgument(what + ": no pieces (not a SentencePiece model, or truncated)");
  }
  return m;
}

}  // namespace loom::tokenizer
