// What the cluster commands share: the daemons (cluster_cmd.cc: `gpool controller`,
// `gpool agent`) and the controller's clients (jobs_cmd.cc: submit, jobs, nodes, tenants, top).
// They are two files because the clients are also built into the lean front binary, which must
// not link the daemons (src/cli/CMakeLists.txt, docs/cli.md "Two binaries").
#pragma once

#include <atomic>
#include <csignal>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "common/names.h"
#include "common/status.h"

namespace gpool::cli {

// Set by SIGINT or SIGTERM once InstallStopSignals ran: commands that run until stopped (the
// daemons, `jobs watch`, `top`) poll it.
inline std::atomic<bool> g_cluster_stop{false};
inline void OnClusterSignal(int) { g_cluster_stop = true; }
inline void InstallStopSignals() {
  std::signal(SIGINT, OnClusterSignal);
  std::signal(SIGTERM, OnClusterSignal);
}

// How a command authenticates to the controller (client commands and the agent).
struct AuthFlags {
  std::string token, token_file, tls_ca, tls_server_name;
};

inline void AddAuthFlags(CLI::App* c, AuthFlags* a) {
  c->add_option("--token", a->token, "bearer token (default: --token-file, else $GPOOL_TOKEN)");
  c->add_option("--token-file", a->token_file, "file whose first word is the token");
  c->add_option("--tls-ca", a->tls_ca, "PEM CA certificate(s): use TLS, verify the controller");
  c->add_option("--tls-server-name", a->tls_server_name,
                "name expected in the controller's certificate (default: its host)");
}

// A name given on the command line (common/names.h), checked before anything is sent; the
// controller checks again. Empty = not given, when `optional`.
inline Status CheckNameFlag(std::string_view flag, const std::string& value, bool optional = true) {
  if (optional && value.empty()) return Status::Ok();
  return ValidateName(flag, value);
}

}  // namespace gpool::cli
