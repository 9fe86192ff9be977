#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <fmt/format.h>

namespace gpool {

Status InitLogging(const LogOptions& options) {
  auto level = spdlog::level::from_str(std::string(options.level));
  if (level == spdlog::level::off && options.level != "off")
    return Status::InvalidArgument(fmt::format(
        "log level '{}' is not one of trace, debug, info, warn, error, off", options.level));
  auto logger = options.to_stderr ? spdlog::stderr_logger_mt("gpool-stderr")
                                  : spdlog::stdout_logger_mt("gpool-stdout");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%L%$ %v", spdlog::pattern_time_type::utc);
  spdlog::set_default_logger(logger);
  spdlog::set_level(level);
  return Status::Ok();
}

}  // namespace gpool
