// Post-processors: the single-sequence form of each HF tokenizers processor (ids only; offsets,
// type ids and pairs are not needed by loom).
#include "tokenizer/json_limits.h"
#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>
#include <string>

namespace loom::tokenizer {

namespace {

using nlohmann::json;

// One template: -1 stands for the sequence, any other value is a token id.
class TemplatePostProcessor final : public PostProcessor {
 public:
  explicit TemplatePostProcessor(std::vector<std::vector<int32_t>> items)
      : items_(std::move(items)) {}
  void AddSpecialTokens(std::vector<int32_t>* ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids->size() + 8);
    for (const auto& item : items_) {
      if (item.empty()) {
        out.insert(out.end(), ids->begin(), ids->end());
      } else {
        out.insert(out.end(), item.begin(), item.end());
      }
    }
    *ids = std::move(out);
  }

 private:
  std::vector<std::vector<int32_t>> items_;  // empty = the sequence
};

// ByteLevel only trims offsets; ids are unchanged.
class NoOpPostProcessor final : public PostProcessor {
 public:
  void AddSpecialTokens(std::vector<int32_t>*) const override {}
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void AddSpecialTokens(std::vector<int32_t>* ids) const override {
    for (const auto& p : parts_) p->AddSpecialTokens(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// Ids a post-processor may add: non-negative and inside the id range a vocab may use.
constexpr int64_t kMaxPostProcessorId = (int64_t{1} << 24) - 1;

// Special ids one template adds around the sequence (real ones add 1-3); with at most 256
// templates in a Sequence, a prompt grows by at most 64 Ki ids.
constexpr size_t kMaxTemplateIds = 256;

bool IsTokenId(const json& v) {
  return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxPostProcessorId;
}

StatusOr<int32_t> TokenPairId(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 ||
      !IsTokenId(j[key][1])) {
    return InvalidArgument(where + ": \"" + key + "\" must be [token, id] with an id in [0, " +
                           std::to_string(kMaxPostProcessorId) + "]");
  }
  return j[key][1].get<int32_t>();
}

StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const json& j) {
  const std::string where = "post_processor TemplateProcessing";
  if (!j.contains("single") || !j["single"].is_array()) {
    return InvalidArgument(where + ": missing array \"single\"");
  }
  const json specials = j.value("special_tokens", json::object());
  std::vector<std::vector<int32_t>> items;
  int sequences = 0;
  size_t added = 0;
  for (const auto& piece : j["single"]) {
    if (piece.contains("Sequence")) {
      // A second copy of the sequence would double the ids at every stage of a Sequence of
      // templates (2^stages times the prompt from one request); no real template repeats it.
      if (++sequences > 1) {
        return InvalidArgument(where + ": \"single\" holds the sequence more than once");
      }
      items.emplace_back();
    } else if (piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
               piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string()) {
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (!specials.is_object() || !specials.contains(name) || !specials[name].is_object() ||
          !specials[name].contains("ids") || !specials[name]["ids"].is_array() ||
          specials[name]["ids"].empty()) {
        return InvalidArgument(where + ": special token '" + name +
                               "' has no entry in \"special_tokens\"");
      }
      std::vector<int32_t> ids;
      for (const json& id : specials[name]["ids"]) {
        if (!IsTokenId(id)) {
          return InvalidArgument(where + ": special token '" + name + "' has an invalid id " +
                                 id.dump() + " (ids are integers in [0, " +
                                 std::to_string(kMaxPostProcessorId) + "])");
        }
        ids.push_back(id.get<int32_t>());
      }
      added += ids.size();
      if (added > kMaxTemplateIds) {
        return InvalidArgument(where + ": the template adds more than " +
                               std::to_string(kMaxTemplateIds) + " special token ids");
      }
      items.push_back(std::move(ids));
    } else {
      return InvalidArgument(where + ": unknown template piece " + piece.dump());
    }
  }
  return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(items)));
}

}  // namespace

std::unique_ptr<PostProcessor> MakeBosEosPostProcessor(int32_t bos_id, int32_t eos_id) {
  std::vector<std::vector<int32_t>> items;
  if (bos_id >= 0) items.push_back({bos_id});
  items.emplace_back();
  if (eos_id >= 0) items.push_back({eos_id});
  return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(items)));
}

StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const json& j) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument("post_processor: expected an object with a \"type\", got " + j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "TemplateProcessing") return ParseTemplate(j);
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new NoOpPostProcessor());
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const std::string where = "post_processor " + type;
    ASSIGN_OR_RETURN(int32_t cls, TokenPairId(j, "cls", where));
    ASSIGN_OR_RETURN(int32_t sep, TokenPairId(j, "sep", where));
    return MakeBosEosPostProcessor(cls, sep);
  }
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return InvalidArgument("post_processor Sequence: missing array \"processors\"");
    }
    RETURN_IF_ERROR(CheckSequenceSize(j, "post_processor"));
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& item : j["processors"]) {
      ASSIGN_OR_RETURN(auto part, ParsePostProcessor(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PostProcessor>(new SequencePostProcessor(std::move(parts)));
  }
  return InvalidArgument("post_processor type '" + type +
                         "' is not supported by loom (supported: TemplateProcessing, ByteLevel, "
                         "RobertaProcessing, BertProcessing, Sequence)");
}

}  // namespace loom::tokenizer
