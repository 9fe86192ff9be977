// The controller's fabric from the command line (owner: ibctl): `gpool controller --fabric ...`
// flags, `gpool agent --fabric` host names, and the clients `gpool fabric show|path|health
// --controller ADDR` (docs/cli.md, docs/control-plane.md "Fabric").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "control/controller.h"
#include "control/fabric_monitor.h"
#include "control/fabric_view.h"

namespace gpool::cli {

struct ControllerFabricFlags {
  std::string fabric;                 // file or gen:... spec
  std::string engine = "minhop";
  std::string lfts;                   // OpenSM's opensm-lfts.dump: routes from it
  std::string sweep;                  // discovery command
  int sweep_ms = 1000;
  int hold_down_ms = 5000;
  int sweep_confirm = 2;
  std::string partitions;             // partitions.conf path (enables partitions/QoS)
  std::string opensm_pid;
  std::vector<std::string> tenant_sl; // TENANT=SL
  int default_sl = 0;
};

void AddControllerFabricFlags(CLI::App* ctl, ControllerFabricFlags* f);
// Null when --fabric is not given.
StatusOr<std::shared_ptr<control::FabricView>> OpenControllerFabric(const ControllerFabricFlags& f);
// Null when the controller has no fabric. Started.
StatusOr<std::unique_ptr<control::FabricMonitor>> StartFabricMonitor(control::Controller* c,
                                                                    const ControllerFabricFlags& f);
// The fabric's host names, in fabric order (`gpool agent --fabric`).
StatusOr<std::vector<std::string>> FabricHostNames(const std::string& source);

// Adds show, path and health under `gpool fabric`.
void RegisterFabricClient(CLI::App* fab, int* exit_code);

}  // namespace gpool::cli
