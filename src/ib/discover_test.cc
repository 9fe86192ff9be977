// Discovery round trips under ibsim: a fabric written as an ibsim net file, discovered by the real
// libibnetdisc (ibnetdiscover --cache through umad2sim), read back by LoadIbndCache, must be the
// fabric we wrote (fabric::SameFabric: names, ports, links, GUIDs, LIDs, rates).
#include "ib/discover.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fabric/compare.h"
#include "fabric/generators.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/writers.h"
#include "ib/ibsim.h"

namespace gpool::ib {
namespace {

// Runs ibsim on `f`, discovers it with ibnetdiscover --cache and loads the cache.
StatusOr<fabric::Fabric> DiscoverUnderIbsim(const fabric::Fabric& f,
                                            const DiscoverOptions& options = {}) {
  GPOOL_ASSIGN_OR_RETURN(std::string net, fabric::WriteIbsimNet(f));
  GPOOL_ASSIGN_OR_RETURN(auto sim, Ibsim::Start({.net_text = net}));
  std::string cache = sim->dir() + "/fabric.cache";
  GPOOL_RETURN_IF_ERROR(sim->RunOk({"ibnetdiscover", "--cache", cache}, {.timeout_s = 60}).status());
  return LoadIbndCache(cache, options);
}

void ExpectRoundTrip(const fabric::Fabric& f, const DiscoverOptions& options = {},
                     fabric::CompareOptions cmp = {}) {
  auto got = DiscoverUnderIbsim(f, options);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->num_switches(), f.num_switches());
  EXPECT_EQ(got->num_cas(), f.num_cas());
  // What we wrote leaves unknown system image GUIDs at 0; ibsim reports the node GUID for them.
  cmp.unknown_sysimg_matches = true;
  Status same = fabric::SameFabric(f, *got, cmp);
  EXPECT_TRUE(same.ok()) << same.ToString();
}

TEST(DiscoverTest, TwoLevelFatTreeRoundTrips) {
  // HDR: Debian's ibsim 0.10 knows speeds up to HDR.
  auto f = fabric::GenerateFatTree({.levels = 2, .radix = 8, .speed = fabric::LinkSpeed::kHdr});
  ASSERT_TRUE(f.ok());
  ExpectRoundTrip(*f);
}

TEST(DiscoverTest, TorusRoundTrips) {
  auto f = fabric::GenerateTorus({.dims = {3, 3, 2}, .hcas_per_switch = 1,
                                  .speed = fabric::LinkSpeed::kEdr});
  ASSERT_TRUE(f.ok());
  ExpectRoundTrip(*f);
}

TEST(DiscoverTest, RealDumpsRoundTrip) {
  for (const char* name : {"jabl_1", "jabl_2", "jabl_3", "jabl_4"}) {
    SCOPED_TRACE(name);
    auto f = fabric::LoadNetFile(std::string("testdata/fabric/") + name + ".topo", {});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    // Real dumps name nodes by GUID, as ibnetdiscover does, so matching names is matching node
    // GUIDs. GUIDs are not compared further: ibsim gives CA port p the GUID node GUID + p,
    // whatever the dump says (jabl_3 has port GUIDs equal to the node GUID).
    // A link whose ends the dump lists at different rates (jabl_1: 4x against 1x) runs, and is
    // reported by ibsim at both ends, at the lower: compare what links run at.
    ExpectRoundTrip(*f, {.naming = NodeNaming::kGuid}, {.guids = false, .negotiated_rates = true});
  }
}

TEST(DiscoverTest, NamingFollowsDescriptionsOnlyWhenUnique) {
  auto f = fabric::GenerateFatTree({.levels = 2, .radix = 4, .speed = fabric::LinkSpeed::kHdr});
  ASSERT_TRUE(f.ok());
  auto guid_named = DiscoverUnderIbsim(*f, {.naming = NodeNaming::kGuid});
  ASSERT_TRUE(guid_named.ok()) << guid_named.status().ToString();
  const fabric::Node& sw = guid_named->node(guid_named->switches().front());
  EXPECT_EQ(sw.name, fmt::format("S-{:016x}", sw.guid));
  EXPECT_FALSE(sw.description.empty());
  // jabl_1's CAs share one description: kAuto falls back to GUID names, kDescription refuses.
  auto jabl = fabric::LoadNetFile("testdata/fabric/jabl_1.topo", {});
  ASSERT_TRUE(jabl.ok());
  auto strict = DiscoverUnderIbsim(*jabl, {.naming = NodeNaming::kDescription});
  EXPECT_FALSE(strict.ok());
}

TEST(DiscoverTest, BadCacheFileIsAnErrorNamingIt) {
  auto r = LoadIbndCache("testdata/fabric/jabl_1.topo");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("jabl_1.topo"), std::string::npos);
}

}  // namespace
}  // namespace gpool::ib
