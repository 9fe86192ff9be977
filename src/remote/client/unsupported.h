// The loud failure for CUDA runtime calls gpool does not implement.
#pragma once

namespace gpool::remote::client {
// Prints "gpool: <name> is not supported by the gpool client runtime" to stderr (once per name)
// and returns cudaErrorNotSupported (801), which also becomes the thread's last error.
int Unsupported(const char* name);
// The same with the reason: "gpool: <name> is not supported by the gpool client runtime: <why>".
int Unsupported(const char* name, const char* why);
}  // namespace gpool::remote::client
