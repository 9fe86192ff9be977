#include "fabric/load.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpool::fabric {
namespace {

using ::testing::HasSubstr;

TEST(LoadTest, DetectsEachFormat) {
  struct Case {
    const char* path;
    FabricFormat want;
    size_t switches;
  };
  const Case cases[] = {
      {"testdata/fabric/jabl_2.topo", FabricFormat::kIbnetdiscover, 1},
      {"testdata/fabric/jabl_3.topo", FabricFormat::kIbnetdiscover, 2},
      {"testdata/fabric/include/top.net", FabricFormat::kIbsim, 2},
      {"testdata/fabric/alibaba-lingjun-2023-topo.csv", FabricFormat::kClosCsv, 123},
  };
  for (const Case& c : cases) {
    FabricFormat got = FabricFormat::kAuto;
    LoadOptions o;
    o.detected = &got;
    auto f = LoadFabric(c.path, o);
    ASSERT_TRUE(f.ok()) << c.path << ": " << f.status().ToString();
    EXPECT_EQ(got, c.want) << c.path;
    EXPECT_EQ(f->num_switches(), c.switches) << c.path;
  }
}

TEST(LoadTest, ExplicitFormatAndErrors) {
  LoadOptions o;
  o.format = FabricFormat::kClosCsv;
  auto wrong = LoadFabric("testdata/fabric/jabl_2.topo", o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("jabl_2.topo:"));  // names the file
  EXPECT_FALSE(LoadFabric("testdata/fabric/no-such-file.topo").ok());

  EXPECT_EQ(*ParseFabricFormat("clos-csv"), FabricFormat::kClosCsv);
  EXPECT_EQ(FabricFormatName(FabricFormat::kIbsim), "ibsim");
  EXPECT_THAT(ParseFabricFormat("xml").status().message(), HasSubstr("unknown fabric format 'xml'"));
  EXPECT_THAT(DetectFabricFormat("x.txt", "hello\nworld\n").status().message(),
              HasSubstr("x.txt: cannot tell the fabric format"));
  EXPECT_EQ(*DetectFabricFormat("x", "# c\n\nip,DSW,PSW,ASW\n"), FabricFormat::kClosCsv);
  EXPECT_EQ(*DetectFabricFormat("x", "Hca 1 \"h\"\n"), FabricFormat::kIbsim);
}

TEST(LoadTest, WarningsReachTheCaller) {
  std::vector<std::string> warnings;
  LoadOptions o;
  o.warnings = &warnings;
  ASSERT_TRUE(LoadFabric("testdata/fabric/jabl_1.topo", o).ok());
  EXPECT_EQ(warnings.size(), 2u);
}

}  // namespace
}  // namespace gpool::fabric
