// Logging: a thin setup layer over spdlog.
//
// Libraries log through spdlog's default logger (GPOOL_LOG_* below); daemons call InitLogging once
// to pick the level. Lines carry an ISO-8601 time, the level and key=value fields in the message.
// Thread safety: spdlog's default logger is thread-safe; InitLogging must run before threads start.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace gpool {

struct LogOptions {
  std::string_view level = "info";  // trace, debug, info, warn, error, off
  bool to_stderr = true;
};

Status InitLogging(const LogOptions& options);

}  // namespace gpool

#define GPOOL_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define GPOOL_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define GPOOL_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define GPOOL_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
