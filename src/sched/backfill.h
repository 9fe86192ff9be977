// EASY backfill: a reservation for the blocked job at the head of the queue.
//
// When the job at the head can't start now, it gets a reservation: running jobs are released in
// order of their expected end (start + estimated run time) on a copy of the state until the
// gang fits; that time is the shadow time and the placement found then is the set of nodes
// held for it. Later jobs are backfilled on nodes outside the reservation, so they can't delay
// it; and, as in classic EASY, a job whose estimated end comes before the shadow time may use
// the reserved nodes too (the default policy's PolicyConfig::backfill_reserved_nodes, on by
// default; off = conservative, reserved nodes only for the reserved job). These functions only
// compute and mark the reservation; that choice is the caller's (scheduler.cc).
// Jobs without a run time estimate are assumed to run `assumed_runtime_s` (like a time limit);
// with 0 they count as never ending, and a head job that can't fit even when every estimated
// job has ended gets no reservation.
// On a power-managed cluster a gang that the powered-on nodes hold now, but only across more
// leaves than it would need with suspended nodes back on, waits for those resumes
// (PlaceGang's WaitForResume): it gets no reservation. It is not going to start on the nodes
// that are on (the caller counts it as demand, nodes resume, and it goes there whole a boot
// later), so holding them would only keep backfill off them for the boot. Past its wait bound
// PlaceGang no longer declines it and it reserves as any gang. A gang that doesn't fit the
// powered-on nodes now reserves at the first end after which they hold it, however many leaves
// that takes (the walk doesn't wait for resumes): the latest start it is promised; resumed nodes
// may still let it start sooner and whole. (Until 2026-11-30 the walk looked for the first end
// after which the powered-on nodes held it as compactly as with the resumes, re-placing the gang
// at every end: 3/4 of the simulator's CPU time on the 100,000-job replay.)
//
// Thread safety: pure functions over a const ClusterState.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sched/cluster.h"
#include "sched/placement.h"
#include "sched/types.h"

namespace gpool::sched {

// Computes a reservation for `job` (which doesn't fit now). nullopt when it can't fit even after
// every job with an estimated end has ended.
std::optional<Reservation> ComputeReservation(const ClusterState& state, const JobSpec& job,
                                              const PlacementOptions& options, int64_t now_ns,
                                              double assumed_runtime_s = 0);

// Marks the reservation's nodes in `excluded` (resized to the node count as needed).
void ExcludeReserved(const Reservation& r, std::vector<uint8_t>* excluded);

}  // namespace gpool::sched
