#include "common/names.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(NamesTest, AcceptsTheNamesGpoolAndItsUsersUse) {
  for (const char* n : {"research", "default", "a", "7", "hollow-0000", "host0001", "j00000042",
                        "gpu01.example.com", "team_a.prod-2", "cli-0123456789abcdef", "A100"}) {
    EXPECT_TRUE(ValidateName("tenant", n).ok()) << n << ": " << ValidateName("tenant", n).ToString();
    EXPECT_TRUE(IsValidName(n)) << n;
  }
  EXPECT_TRUE(IsValidName(std::string(kMaxNameLength, 'x')));
}

// The injections of issue 29: a partition line for OpenSM and a metric line for Prometheus.
TEST(NamesTest, RefusesTheInjectionsNamingFieldCharacterAndPosition) {
  Status s = ValidateName("tenant", "evil\nDefault=0x7fff : ALL=full ;");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tenant: 'evil\\nDefault=0x7fff : ALL=full ;'"));
  EXPECT_THAT(s.message(), HasSubstr("character '\\n' at position 4"));
  EXPECT_THAT(s.message(), Not(HasSubstr("\n")));  // the message itself is one line
  s = ValidateName("tenant", "x\"} 1\ngpool_leader 1\n#");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("character '\"' at position 1"));
}

TEST(NamesTest, RefusesEveryByteOutsideTheSyntax) {
  for (int c = 0; c < 256; ++c) {
    char ch = static_cast<char>(c);
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    bool inner = alnum || ch == '.' || ch == '_' || ch == '-';
    std::string middle = std::string("a") + ch + "b";
    std::string first = std::string(1, ch) + "ab";
    EXPECT_EQ(IsValidName(middle), inner) << "byte " << c;
    EXPECT_EQ(IsValidName(first), alnum) << "byte " << c;
    if (!inner) {
      EXPECT_THAT(ValidateName("node.name", middle).message(), HasSubstr("at position 1")) << c;
    }
  }
}

TEST(NamesTest, EmptyAndTooLongNameTheLimit) {
  EXPECT_THAT(ValidateName("tenant", "").message(), HasSubstr("tenant: empty"));
  Status s = ValidateName("node.name", std::string(kMaxNameLength + 1, 'n'));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("129 characters, at most 128"));
  EXPECT_THAT(ValidateName("id", std::string("j1\0", 3)).message(), HasSubstr("'\\x00' at position 2"));
}

TEST(NamesTest, EscapeForMessageKeepsOneLine) {
  EXPECT_EQ(EscapeForMessage("a\nb\r\t\\'\x01\xff"), "a\\nb\\r\\t\\\\\\'\\x01\\xff");
  EXPECT_EQ(EscapeForMessage("abcdef", 3), "abc...");
}

}  // namespace
}  // namespace gpool
