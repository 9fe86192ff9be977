// Reader for ibnetdiscover output and ibsim net files.
//
// Both are one line-oriented format (ibsim reads real ibnetdiscover dumps unchanged), so one
// parser serves both. A file is a sequence of node records:
//
//   vendid=0x2c9                       ID lines: apply to the next record of their kind
//   sysimgguid=0x5442ba00003000
//   switchguid=0x5442ba00003080(5442ba00003080)
//   Switch  24 "S-005442ba00003080"    # "ISR9024 Voltaire" base port 0 lid 6 lmc 0
//   [22]  "H-0008f10403961354"[1](8f10403961355)  # "MT23108 ..." lid 4 4xSDR
//   [10]  "S-0008f10400410015"[1]      # "SW-6IB4 Voltaire" lid 3 4xSDR
//
//   caguid=0x8f10403960984
//   Ca  2 "H-0008f10403960984"         # "MT23108 InfiniHost Mellanox Technologies"
//   [1](8f10403960985)  "S-0008f10400410015"[6]  # lid 16 lmc 1 "SW-6IB4 Voltaire" lid 3 4xSDR
//
// What is accepted, and why:
// - Record headers `Switch`, `Ca`, `Hca` (ibsim), `Rt`/`Router`; the quoted name is the node's
//   name, the first quoted string of the comment its description. Switch headers carry the LID
//   and LMC of port 0 (`base|enhanced port 0 lid 6 lmc 0`).
// - Port lines `[p][ext n](guid) "remote"[rp][ext n](guid)  attrs  # comment`. The local GUID in
//   parentheses is a CA port's own GUID, the one after the remote port the remote CA port's. A
//   missing `[rp]` means port 1, as in ibsim. A port line without a remote (`[3]`) declares an
//   unconnected port. Ports a record does not list are unconnected.
// - Comments as ibnetdiscover writes them: CA ports `lid L lmc M "remote desc" lid R 4xQDR`,
//   switch ports `"remote desc" lid R 4xQDR`. Width/speed tokens are 1x/2x/4x/8x/12x with
//   SDR..XDR or FDR10; an unknown speed (`4x???`, old tools on HDR/NDR) keeps the default speed
//   and adds a warning. Other comment text is ignored.
// - Per-port attributes `w=`, `s=`, `e=` (anywhere after the remote, as ibsim scans them; `v=` and
//   unknown keys are ignored). They are InfiniBand's encoded masks, as ibsim's parser stores them
//   and `ibnetdiscover -f` prints them: w (LinkWidth) 1=1x 2=4x 4=8x 8=12x 16=2x, s (LinkSpeed)
//   1=SDR 2=DDR 4=QDR (0 means QDR, as in ibsim), e (LinkSpeedExt) 1=FDR 2=EDR 4=HDR 8=NDR; the
//   highest enabled value wins and e beats s. So `w=4` is 8x: ibsim's README says "w=(1|4|12)"
//   but its code reads a mask. Attributes override the comment's width/speed token.
// - Each link is normally listed from both ends; it is accepted once. When the two ends disagree
//   on width or speed (real dumps do: jabl_1 has one end 4xSDR, the other 1xSDR), each port keeps
//   the rate its own line gives, the link runs at the lower of each (Fabric::link_gbps), as an
//   active link would, and a warning naming both lines is recorded; RateMismatches (compare.h)
//   lists such links. Listing a port as linked to two different peers is an error.
// - ibsim extensions: `include "file"` (relative to the including file; cycles and depth > 16 are
//   errors), defaults `width=`, `speed=`, `extspeed=` (masks, as above) for later ports without
//   their own, `pdebug=` (ignored). `module=`, `do <cmd>` and `@alias` ports are not supported and
//   fail with Unimplemented.
// - Node GUIDs come from the last `switchguid=`/`caguid=`/`hcaguids=`/`rtguid=` line before the
//   record. A record without one gets the next GUID after the previous record of its type (switch
//   +1, CA/router + ports + 1), starting from ibsim's bases 0x100000 (switches) and 0x200000 (CAs),
//   and 0x300000 for routers, so an ibsim net gets the GUIDs ibsim itself would present.
// - Lines ibnetdiscover prints between records (`Chassis ...`, `Non-Chassis Nodes`,
//   `Hostname: ...`, `# comments`) are skipped. Unrecognised lines before the first record are
//   tolerated with a warning: dumps captured with `2>&1` start with diagnostics such as
//   "src/query_smp.c:195; umad (DR path ...) bad status 110". Anywhere else they are errors.
// - Every record a port line names must exist; a missing one is an error naming the line.
// - Level hints: a comment line `# gpool: level N` (N in 0..31) inside a switch record sets that
//   switch's Node::level; gpool's writers put one under every switch header that has a level.
//   Other tools skip it as a comment. Levels are used only when every switch has one (see
//   levels.h); a hint outside a switch record is ignored with a warning, a malformed one
//   ("level x") is an error.
//
// Errors name the file and line and what was expected. Speed: one pass over the text with
// string_view and from_chars, no per-line allocation except node names.
//
// Thread safety: stateless functions; safe to call concurrently.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::fabric {

// Reads an included file; gets the path already resolved against the including file's folder.
using IncludeReader = std::function<StatusOr<std::string>(const std::string& path)>;

struct NetParseOptions {
  // Name used in errors ("net.topo:12: ...") and the folder relative includes resolve against.
  std::string source_name = "<input>";
  // How `include "file"` reads files. Unset: includes are refused (ParseNet on a string);
  // LoadNetFile sets it to read from disk.
  IncludeReader read_include;
  // Width and speed of links whose ports say nothing: 4xSDR, what ibsim gives such a link.
  LinkSpec default_link = {4, LinkSpeed::kSdr};
  // Assign LIDs (OpenSM style) to switches and connected CA ports the input gives none.
  bool assign_lids = true;
  // When set, non-fatal findings are appended here ("file:line: ...").
  std::vector<std::string>* warnings = nullptr;
};

StatusOr<Fabric> ParseNet(std::string_view text, const NetParseOptions& options);

// Reads `path` and parses it; includes are read from disk relative to the including file.
// options.source_name is replaced by `path`.
StatusOr<Fabric> LoadNetFile(const std::string& path, NetParseOptions options);

}  // namespace gpool::fabric
