// Chat templates: every real template × conversation renders byte-identical to jinja2 as
// transformers runs it (tests/fixtures/chat_templates/cases.json, tools/ref/make_chat_vectors.py),
// plus template selection from tokenizer_config.json and model folders.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "unit/fixed_now.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(LOOM_FIXTURES) / "chat_templates";

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The reference's strftime_now is pinned to 2024-07-26 13:45:00.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  want: " +
         nlohmann::json(want.substr(from, 120)).dump() + "\n  got:  " +
         nlohmann::json(got.substr(from, 120)).dump();
}

TEST(ChatTemplateParityTest, EveryFixtureCaseMatchesJinja2) {
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(ReadAll(kDir / "cases.json"));
  ASSERT_GT(doc["cases"].size(), 0u);
  int identical = 0, same_error = 0, failures = 0;
  std::set<std::string> templates;
  for (const auto& c : doc["cases"]) {
    const std::string file = c["template"].get<std::string>();
    const std::string where = file + " / " + c["conversation"].get<std::string>() +
                              (c["add_generation_prompt"].get<bool>() ? " +gen" : "");
    templates.insert(file);
    ChatTemplateOptions opts;
    opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    for (const char* name : {"bos_token", "eos_token"}) {
      if (c[name].is_string()) opts.special_tokens.emplace_back(name, c[name].get<std::string>());
    }
    if (c["tools"].get<bool>()) opts.tools = doc["tools"];
    opts.now = FixedNow();
    StatusOr<std::string> got = RenderChatTemplate(
        ReadAll(kDir / file), doc["conversations"][c["conversation"].get<std::string>()], opts);
    if (c.contains("expected")) {
      const std::string want = c["expected"].get<std::string>();
      if (!got.ok()) {
        ADD_FAILURE() << where << ": jinja2 renders it, loom fails: " << got.status().ToString();
        ++failures;
      } else if (*got != want) {
        ADD_FAILURE() << where << ": " << FirstDifference(want, *got);
        ++failures;
      } else {
        ++identical;
      }
      continue;
    }
    const auto& err = c["error"];
    const std::string message = err["message"].get<std::string>();
    if (got.ok()) {
      ADD_FAILURE() << where << ": jinja2 fails (" << err["type"].get<std::string>() << ": "
                    << message << "), loom renders";
      ++failures;
    } else if (err["raised"].get<bool>() &&
               (got.status().code() != StatusCode::kFailedPrecondition ||
                got.status().message() != message)) {
      ADD_FAILURE() << where << ": raise_exception message differs\n  want: " << message
                    << "\n  got:  " << got.status().ToString();
      ++failures;
    } else if (!err["raised"].get<bool>() &&
               got.status().message().find(message) == std::string::npos) {
      ADD_FAILURE() << where << ": error differs\n  want: " << message
                    << "\n  got:  " << got.status().ToString();
      ++failures;
    } else {
      ++same_error;
    }
  }
  std::printf("chat templates: %zu templates, %d cases byte-identical, %d cases with the same "
              "error, %d failures\n",
              templates.size(), identical, same_error, failures);
}

TEST(ChatTemplateSelectTest, StringTemplate) {
  nlohmann::json config = {{"chat_template", "{{ 'x' }}"}};
  StatusOr<std::string> t = SelectChatTemplate(config, "", false);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "{{ 'x' }}");
  EXPECT_EQ(SelectChatTemplate(config, "rag", false).status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplateSelectTest, NamedListPicksDefaultToolUseOrName) {
  nlohmann::json config = {{"chat_template",
                            {{{"name", "default"}, {"template", "D"}},
                             {{"name", "tool_use"}, {"template", "T"}},
                             {{"name", "rag"}, {"template", "R"}}}}};
  EXPECT_EQ(*SelectChatTemplate(config, "", false), "D");
  EXPECT_EQ(*SelectChatTemplate(config, "", true), "T");
  EXPECT_EQ(*SelectChatTemplate(config, "rag", true), "R");
  StatusOr<std::string> missing = SelectChatTemplate(config, "nope", false);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("default, tool_use, rag"), std::string::npos);
}

TEST(ChatTemplateSelectTest, ListWithoutDefaultIsAnError) {
  nlohmann::json config = {{"chat_template", {{{"name", "rag"}, {"template", "R"}}}}};
  EXPECT_FALSE(SelectChatTemplate(config, "", false).ok());
  EXPECT_FALSE(SelectChatTemplate(nlohmann::json::object(), "", false).ok());
  EXPECT_FALSE(SelectChatTemplate({{"chat_template", 3}}, "", false).ok());
}

TEST(ChatTemplateSelectTest, RealCommandRConfigHasNamedTemplates) {
  // The real model folders: a .jinja file wins over tokenizer_config.json (transformers v5).
  const fs::path shared = fs::path(LOOM_SHARED) / "fixtures" / "tokenizers";
  if (!fs::exists(shared)) GTEST_SKIP() << "no ../shared fixtures";
  StatusOr<std::string> tiny = LoadChatTemplate((shared / "TinyLlama-1.1B-Chat-v1.0").string(),
                                                "", false);
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(*tiny, ReadAll(shared / "TinyLlama-1.1B-Chat-v1.0" / "chat_template.jinja"));
  StatusOr<std::string> smol = LoadChatTemplate((shared / "SmolLM-135M-Instruct").string(), "",
                                                false);
  ASSERT_TRUE(smol.ok()) << smol.status().ToString();
  EXPECT_NE(smol->find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(LoadChatTemplate((shared / "gpt2").string(), "", false).status().code(),
            StatusCode::kNotFound);
}

TEST(ChatTemplateSelectTest, FolderWithAdditionalTemplates) {
  const fs::path dir = fs::temp_directory_path() / "loom_chat_template_folder_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "additional_chat_templates");
  std::ofstream(dir / "chat_template.jinja") << "D";
  std::ofstream(dir / "additional_chat_templates" / "tool_use.jinja") << "T";
  EXPECT_EQ(*LoadChatTemplate(dir.string(), "", false), "D");
  EXPECT_EQ(*LoadChatTemplate(dir.string(), "", true), "T");
  EXPECT_EQ(*LoadChatTemplate(dir.string(), "tool_use", false), "T");
  fs::remove_all(dir);
}

TEST(ChatTemplateRenderTest, DropsNullKeysAndAliasesReasoning) {
  // Same preprocessing as transformers' apply_chat_template.
  const std::string tmpl =
      "{% for m in messages %}{{ m | tojson }}{{ m.content is defined }}\n{% endfor %}";
  nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": null}, {"role": "assistant", "content": "a",
          "reasoning": "r"}])");
  StatusOr<std::string> out = RenderChatTemplate(tmpl, msgs, {});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out,
            "{\"role\": \"user\"}False\n"
            "{\"thinking\": \"r\", \"role\": \"assistant\", \"content\": \"a\", \"reasoning\": "
            "\"r\", \"reasoning_content\": \"r\"}True\n");
}

// The template sees transformers' special_tokens_map: every special token the tokenizer config
// sets (bos, eos as an AddedToken object, unk, pad, sep), and none it leaves unset or null (only
// bos and eos were passed: unk_token, which the Llama 2 and Mistral templates read, rendered "").
// Expected: transformers 5.25.0, AutoTokenizer.from_pretrained on this tokenizer_config.json and
// tests/fixtures/tokenizers/tiny-single-word/tokenizer.json, apply_chat_template(tokenize=False).
TEST(ChatTemplateRenderTest, TheSpecialTokensMapIsVisible) {
  const std::string config = R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "a",
      "eos_token": {"content": "b", "lstrip": false, "normalized": false, "rstrip": false,
                    "single_word": false, "special": true, "__type": "AddedToken"},
      "unk_token": "c", "pad_token": "d", "mask_token": null, "sep_token": "e"})";
  auto tok = tokenizer::Tokenizer::FromJsonTexts(
      ReadAll(fs::path(LOOM_FIXTURES) / "tokenizers" / "tiny-single-word" / "tokenizer.json"), config);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ChatTemplateOptions opts;
  opts.special_tokens = (*tok)->config().special_tokens;
  StatusOr<std::string> out = RenderChatTemplate(
      "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ sep_token }}|"
      "{{ cls_token is defined }}|{{ mask_token is defined }}|"
      "{{ additional_special_tokens is defined }}|{{ extra_special_tokens is defined }}|"
      "{% for m in messages %}{{ m.content }}{% endfor %}",
      nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), opts);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "a|b|c|d|e|False|False|False|False|hi");
}

TEST(ChatTemplateRenderTest, ErrorsAreStatuses) {
  ChatTemplateOptions opts;
  StatusOr<std::string> bad = RenderChatTemplate("{{ messages }}", nlohmann::ordered_json(3), opts);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::string> raised = RenderChatTemplate(
      "{{ raise_exception('Conversation roles must alternate') }}",
      nlohmann::ordered_json::array(), opts);
  EXPECT_EQ(raised.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(raised.status().message(), "Conversation roles must alternate");
  StatusOr<std::string> syntax = RenderChatTemplate("a\n{% if %}", nlohmann::ordered_json::array(),
                                                    opts);
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(syntax.status().message().rfind("chat template: line 2: syntax error", 0), 0u)
      << syntax.status().message();
}

}  // namespace
}  // namespace loom
