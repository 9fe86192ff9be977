#include "control/controller_endpoints.h"

#include <fmt/format.h>

#include <thread>

#include "control/agent_timing.h"
#include "control/rpc_common.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::control {

StatusOr<ControllerEndpoints> ControllerEndpoints::Parse(const std::string& flag,
                                                         const ClientOptions& base) {
  ControllerEndpoints e;
  e.base_ = base;
  const std::string& list = base.address;
  size_t start = 0;
  for (;;) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::string host;
    int port = 0;
    GPOOL_RETURN_IF_ERROR(ParseHostPort(
        e.addresses_.empty() && comma == std::string::npos
            ? flag
            : fmt::format("{} (endpoint {})", flag, e.addresses_.size() + 1),
        item, &host, &port));
    e.addresses_.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return e;
}

StatusOr<std::shared_ptr<grpc::Channel>> ControllerEndpoints::Channel() {
  auto& ch = channels_[addresses_[current_]];
  if (ch == nullptr) {
    ClientOptions o = base_;
    o.address = addresses_[current_];
    GPOOL_ASSIGN_OR_RETURN(ch, MakeChannel(o));
  }
  return ch;
}

bool ControllerEndpoints::Failed(const grpc::Status& s, std::chrono::steady_clock::time_point now) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
      s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return false;
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    silent_ = current();
    silent_until_ = now + kAgentAvoidSilent;
  }
  auto avoid = [&](size_t i) {
    return addresses_.size() > 1 && addresses_[i] == silent_ && now < silent_until_;
  };
  constexpr std::string_view kHint = "the leader is at ";
  size_t at = s.error_message().find(kHint);
  if (at != std::string::npos) {
    std::string leader = s.error_message().substr(at + kHint.size());
    leader = leader.substr(0, leader.find_first_of(" ;,)"));
    size_t i = 0;
    while (i < addresses_.size() && addresses_[i] != leader) ++i;
    std::string h;
    int p = 0;
    if (i == addresses_.size() && ParseHostPort("leader", leader, &h, &p).ok()) {
      addresses_.push_back(leader);
    }
    if (i < addresses_.size() && !avoid(i)) {
      current_ = i;
      return true;
    }
  }
  // The next endpoint, past the silent one while it is avoided (with two or more, one is not).
  current_ = (current_ + 1) % addresses_.size();
  if (avoid(current_)) current_ = (current_ + 1) % addresses_.size();
  return true;
}

StatusOr<std::shared_ptr<grpc::Channel>> ControllerEndpoints::FindLeader(
    std::chrono::milliseconds patience) {
  auto give_up = std::chrono::steady_clock::now() + patience;
  size_t tries = 0;
  grpc::Status last;
  for (;;) {
    GPOOL_ASSIGN_OR_RETURN(auto ch, Channel());
    auto stub = v1::JobService::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    AttachToken(&ctx, base_.token);
    v1::CancelJobRequest req;
    req.set_id("j00000000");
    v1::Job ignored;
    last = stub->Cancel(&ctx, req, &ignored);
    if (!Failed(last)) return ch;
    if (std::chrono::steady_clock::now() >= give_up) break;
    // A full round without a leader: an election is probably running; wait a little.
    // Waiting on the channel polls its reconnect attempt, which gRPC 1.51 otherwise leaves to
    // its 5 s backup poller (agent/protocol.cc).
    if (++tries % addresses_.size() == 0) {
      auto until = std::chrono::system_clock::now() + std::chrono::milliseconds(100);
      ch->WaitForConnected(until);
      std::this_thread::sleep_until(until);
    }
  }
  return Status::Unavailable(fmt::format("no controller of {} answered as the leader ({})",
                                         base_.address, last.error_message()));
}

}  // namespace gpool::control
