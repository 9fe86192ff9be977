// ControllerEndpoints: the controllers a client (CLI, agent) may talk to, and which one leads.
//
// `--controller` takes "host:port[,host:port...]". Calls go to the endpoint believed to lead.
// A controller that is not the leader answers UNAVAILABLE "not the leader; the leader is at
// HOST:PORT": Failed() switches to that address (the leader advertises its own address, so it
// is followed even when it is not in the list), else to the next endpoint. A dead controller
// (connection refused, deadline) also moves the client to the next endpoint. After a call to an
// endpoint ran out its deadline, redirects back to it are not followed for kAgentAvoidSilent
// (agent_timing.h) while there is another endpoint to try: standbys name a paused leader until
// its lease expires, and each return to it would cost a whole call deadline.
//
// FindLeader probes with a cancel of job "j00000000", which never exists (ids start at 1): the
// leader answers NOT_FOUND, a standby UNAVAILABLE naming the leader. It has no side effect.
//
// Thread safety: not thread-safe; one per client thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/auth.h"

namespace gpool::control {

class ControllerEndpoints {
 public:
  // `base.address` is the comma-separated list; errors name `flag` and the bad element.
  static StatusOr<ControllerEndpoints> Parse(const std::string& flag, const ClientOptions& base);

  // The channel to the endpoint currently believed to lead.
  StatusOr<std::shared_ptr<grpc::Channel>> Channel();
  const std::string& current() const { return addresses_[current_]; }
  size_t size() const { return addresses_.size(); }
  // Moves on after a failed call; returns whether another try may succeed (UNAVAILABLE or
  // DEADLINE_EXCEEDED: a dead, starting or non-leading controller). `now`: for tests.
  bool Failed(const grpc::Status& s,
              std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // Probes until a controller answers as the leader, for up to `patience`; a controller that
  // answers anything but UNAVAILABLE/DEADLINE_EXCEEDED counts. Unavailable when none did.
  StatusOr<std::shared_ptr<grpc::Channel>> FindLeader(std::chrono::milliseconds patience);

 private:
  ClientOptions base_;
  std::vector<std::string> addresses_;
  size_t current_ = 0;
  std::string silent_;  // the endpoint whose call last ran out its deadline
  std::chrono::steady_clock::time_point silent_until_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

}  // namespace gpool::control
