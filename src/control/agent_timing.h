// What agents and the controller agree on about time, so that the controller can refuse a node
// timeout under which agents could not keep their nodes alive across a change of leader.
//
// An agent waits at most kAgentCallTimeout for one call (Register, Heartbeat) before it tries
// another controller: a leader that stopped answering (paused, partitioned, overloaded) costs it
// no more. Standbys keep naming that leader until its lease expires, so for kAgentAvoidSilent
// after a call to an endpoint timed out, the agent does not follow redirects back to it while
// another endpoint is there to try (controller_endpoints.h). A new leader gives every node a
// fresh node timeout from when it takes over; reaching it takes an agent at most one call
// deadline (a call hanging on the old leader), the avoidance window, and one heartbeat interval
// (controller.cc: MinNodeTimeout).
#pragma once

#include <chrono>

namespace gpool::control {

inline constexpr std::chrono::milliseconds kAgentCallTimeout{2000};
inline constexpr std::chrono::milliseconds kAgentAvoidSilent{1000};

}  // namespace gpool::control
