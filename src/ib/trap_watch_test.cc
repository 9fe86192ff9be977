// ParseOsmEvent: the plugin's datagram format (src/ib/osm_plugin/gpool_osm_events.c). The whole
// path (plugin in OpenSM, probes, controller) runs in tests/fabric_ctl/ibsim_events_test.sh.
#include "ib/trap_watch.h"

#include <gtest/gtest.h>

namespace gpool::ib {
namespace {

TEST(OsmEventTest, ParsesTrap128) {
  auto e = ParseOsmEvent("gpool-osm v1 t=1796020782584379028 ev=trap num=128 issuer_lid=3 lid=3\n");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->t_ns, 1796020782584379028);
  EXPECT_EQ(e->ev, "trap");
  EXPECT_EQ(e->trap, 128);
  EXPECT_EQ(e->issuer_lid, 3);
  EXPECT_EQ(e->lid, 3);
  EXPECT_EQ(e->port, 0);
}

TEST(OsmEventTest, ParsesTrap129WithPortAndSweepEvents) {
  auto e = ParseOsmEvent("gpool-osm v1 t=5 ev=trap num=129 issuer_lid=7 lid=7 port=19");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->port, 19);
  auto up = ParseOsmEvent("gpool-osm v1 t=6 ev=subnet_up");
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->ev, "subnet_up");
  // Fields a newer plugin may add are ignored.
  EXPECT_TRUE(ParseOsmEvent("gpool-osm v1 t=6 ev=heavy_sweep_done extra=1").ok());
}

TEST(OsmEventTest, RejectsMalformedDatagramsNamingTheField) {
  auto bad = [](std::string_view d) { return ParseOsmEvent(d).status().message(); };
  EXPECT_NE(bad("hello").find("not a gpool-osm event"), std::string::npos);
  EXPECT_NE(bad("gpool-osm v2 t=1 ev=trap num=128").find("version 'v2'"), std::string::npos);
  EXPECT_NE(bad("gpool-osm v1 ev=subnet_up x=1").find("field t: missing"), std::string::npos);
  EXPECT_NE(bad("gpool-osm v1 t=1 num=128 lid=2").find("field ev: missing"), std::string::npos);
  EXPECT_NE(bad("gpool-osm v1 t=1 ev=trap lid=2").find("field num"), std::string::npos);
  EXPECT_NE(bad("gpool-osm v1 t=1 ev=trap num=128 lid=70000").find("field lid: '70000'"), std::string::npos);
  EXPECT_NE(bad("gpool-osm v1 t=1 ev=trap num=128 lid").find("field 'lid': want key=value"), std::string::npos);
}

}  // namespace
}  // namespace gpool::ib
