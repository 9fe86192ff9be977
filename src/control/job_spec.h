// Job spec files for `gpool submit -f job.yaml`: a YAML mapping turned into a SubmitJobRequest.
//
//   tenant: research
//   gpus: 16                 # whole GPUs (<= 8, or a multiple of 8: a gang of 8-GPU tasks)
//   # or a fraction of one GPU:
//   # gpu_fraction: 0.25     # or gpu_milli: 250 (unit: 0.001 GPU; finer is an error)
//   # gpu_memory: 20GiB
//   cpus: 16                 # per task (CPU cores, fractions allowed); default none
//   memory: 256GiB           # per task host memory (or `mem:`); default none
//   gpu_model: H100          # or "A100|H100"; default any
//   locality: leaf           # node | leaf | pod | any
//   locality_required: true  # default false (preferred)
//   gpu_source: pooled       # local (default) | pooled | remote: GPUs of other nodes' servers
//   gpu_within: leaf         # pooled/remote: how far a task's GPUs may be (node|leaf|pod|any)
//   max_slowdown: 1.1        # pooled/remote: the largest estimated slowdown accepted (0 = any)
//   preemptible: false       # default true
//   min_runtime: 10m
//   kind: training           # training | inference | interactive
//   priority: 10
//   duration: 2h             # expected run time (hollow agents "run" jobs this long)
//   request_id: nightly-42   # idempotency key
//   command: [python, train.py]   # or one string (split on spaces)
//
// Unknown keys and bad values are errors naming FILE:LINE and the key. Only the request's shape
// is checked here; the controller validates the values (and names the field) on submit.
//
// Thread safety: free functions, no state.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "gpool/v1/gpool.pb.h"

namespace gpool::control {

// A fraction of one GPU (gpu_fraction, --gpu-fraction) in milli-GPU, the scheduler's unit: a
// number from 0.001 to 0.999 that is a whole number of milli-GPUs. Anything else is an error
// naming `field` (when not empty) and the unit, never rounded silently: 0.0004 would round to 0, which the API
// reads as whole GPUs, and 0.9996 to a whole GPU.
StatusOr<int32_t> GpuFractionToMilli(std::string_view field, double fraction);

StatusOr<v1::SubmitJobRequest> ParseJobSpecYaml(std::string_view text, std::string_view source);

}  // namespace gpool::control
