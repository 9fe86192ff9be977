// The one syntax of the names gpool hands to other programs: tenants, jobs, nodes, partitions.
//
// These names end up in files other tools parse (OpenSM's partitions.conf and QoS policy, the
// Prometheus text exposition, Slurm's topology.conf, Graphviz, JSON), in store keys
// (`/jobs/<id>`, `/nodes/<name>`), in paths (the agent's log files) and on terminals. One strict
// syntax, checked wherever a name enters (gRPC API, CLI flags, YAML specs, the token file, store
// load), keeps all of those safe at once; the writers escape or refuse on top of it.
//
// Syntax: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, the first a letter or a digit. That holds
// host names (`gpu01.example.com`), the generated node names (`hollow-0000`, `host0001`), job ids
// (`j00000042`) and request ids (`cli-0123abcd`), and excludes everything the formats above
// give meaning to: white space and line breaks, quotes, `\`, `,` `:` `;` `=` `#` `{` `}` `/`,
// control bytes, NUL and non-ASCII. Names are case-sensitive. The fabric's own node names
// (`host0001 mlx5_0`, from ibnetdiscover) are not covered: they come from fabric files, not from
// users, and the fabric writers check or escape them themselves.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpool {

inline constexpr size_t kMaxNameLength = 128;

// "what the syntax is", for error messages and help texts.
inline constexpr std::string_view kNameSyntax =
    "1-128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit";

// OK, or INVALID_ARGUMENT naming `field`, the bad character (escaped) and its 0-based position:
//   tenant: 'a\nb': character '\n' at position 1 is not allowed (names are 1-128 characters ...)
Status ValidateName(std::string_view field, std::string_view name);

bool IsValidName(std::string_view name);

// `s` for an error or log message: printable ASCII as is, '\n' '\r' '\t' '\\' and '\''
// backslash-escaped, every other byte as \xNN; at most `max_bytes` of input (then "...").
// Messages quoting user input use it so the input cannot forge lines in a log or a terminal.
std::string EscapeForMessage(std::string_view s, size_t max_bytes = 64);

}  // namespace gpool
