#include "control/etcd_client.h"

#include <fmt/format.h>
#include <httplib.h>

#include <array>
#include <charconv>

namespace gpool::control {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr size_t kMaxIdlePerEndpoint = 16;

}  // namespace

std::string EtcdEndpoint::ToString() const { return fmt::format("{}:{}", host, port); }

StatusOr<std::vector<EtcdEndpoint>> ParseEtcdEndpoints(std::string_view list) {
  std::vector<EtcdEndpoint> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string_view item = list.substr(start, comma == std::string_view::npos ? list.npos : comma - start);
    size_t colon = item.rfind(':');
    if (item.empty() || colon == std::string_view::npos || colon == 0 || colon + 1 == item.size()) {
      return Status::InvalidArgument(
          fmt::format("etcd endpoint {} '{}': want HOST:PORT", out.size() + 1, item));
    }
    int port = 0;
    std::string_view p = item.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc() || ptr != p.data() + p.size() || port < 1 || port > 65535) {
      return Status::InvalidArgument(
          fmt::format("etcd endpoint {} '{}': bad port '{}'", out.size() + 1, item, p));
    }
    if (item.find('/') != std::string_view::npos) {
      return Status::InvalidArgument(
          fmt::format("etcd endpoint {} '{}': no path allowed", out.size() + 1, item));
    }
    out.push_back({std::string(item.substr(0, colon)), port});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view in) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (size_t i = 0; i < kAlphabet.size(); ++i) t[uint8_t(kAlphabet[i])] = int8_t(i);
    return t;
  }();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int8_t v = table[uint8_t(c)];
    if (v < 0) return Status::InvalidArgument(fmt::format("bad base64 character 0x{:02x}", uint8_t(c)));
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

int64_t JsonInt(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  }
  return 0;
}

StatusOr<std::string> JsonBytes(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return std::string();
  auto s = Base64Decode(it->get_ref<const std::string&>());
  if (!s.ok()) return s.status().WithContext(fmt::format("etcd answer field {}", field));
  return s;
}

Status EtcdError(int code, const std::string& message, const std::string& where) {
  std::string m = fmt::format("etcd {}: {}", where, message);
  switch (code) {
    case 3: return Status::InvalidArgument(m);
    case 5: return Status::NotFound(m);
    case 6: return Status::AlreadyExists(m);
    case 7: return Status::PermissionDenied(m);
    case 8: return Status::ResourceExhausted(m);
    case 9:
    case 11: return Status::FailedPrecondition(m);
    case 10: return Status::Aborted(m);
    case 12: return Status::Unimplemented(m);
    case 4:   // deadline exceeded: the request may still be applied
    case 14: return Status::Unavailable(m);
    default: return Status::Internal(m);
  }
}

EtcdClient::EtcdClient(std::vector<EtcdEndpoint> endpoints, const EtcdClientOptions& options)
    : endpoints_(std::move(endpoints)), options_(options), idle_(endpoints_.size()) {}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::EndpointList() const {
  std::string out;
  for (const auto& e : endpoints_) out += (out.empty() ? "" : ",") + e.ToString();
  return out;
}

std::unique_ptr<httplib::Client> EtcdClient::NewConnection(size_t index) const {
  const EtcdEndpoint& e = endpoints_[index];
  auto c = std::make_unique<httplib::Client>(e.host, e.port);
  c->set_connection_timeout(options_.connect_timeout);
  c->set_read_timeout(options_.request_timeout);
  c->set_write_timeout(options_.request_timeout);
  c->set_keep_alive(true);
  return c;
}

std::unique_ptr<httplib::Client> EtcdClient::Borrow(size_t index) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& pool = idle_[index];
    if (!pool.empty()) {
      auto c = std::move(pool.back());
      pool.pop_back();
      return c;
    }
  }
  return NewConnection(index);
}

void EtcdClient::Return(size_t index, std::unique_ptr<httplib::Client> c) {
  std::lock_guard<std::mutex> l(mu_);
  if (idle_[index].size() < kMaxIdlePerEndpoint) idle_[index].push_back(std::move(c));
}

StatusOr<nlohmann::json> EtcdClient::Attempt(size_t index, std::string_view path,
                                             const std::string& text, bool idempotent,
                                             bool* retry_elsewhere) {
  *retry_elsewhere = false;
  const std::string where = endpoints_[index].ToString();
  auto c = Borrow(index);
  // The body is collected by a receiver because etcd's gateway ends error answers with an HTTP
  // trailer (Grpc-Trailer-Content-Type) that cpp-httplib 0.11 cannot parse: the read then
  // "fails" after the whole JSON body arrived, and the answer is still good.
  httplib::Request req;
  req.method = "POST";
  req.path = std::string(path);
  req.body = text;
  req.set_header("Content-Type", "application/json");
  std::string body;
  req.content_receiver = [&body](const char* data, size_t len, uint64_t, uint64_t) {
    body.append(data, len);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool ok = c->send(req, res, err);
  nlohmann::json answer;
  if (res.status > 0) answer = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  bool answered = ok || (res.status > 0 && !answer.is_discarded() && answer.is_object());
  if (!answered) {
    // Connect failures never reached etcd: always safe to try the next member.
    bool unsent = err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout;
    *retry_elsewhere = unsent || idempotent;
    if (unsent) {
      return Status::Unavailable(fmt::format("etcd {}: {}", where, httplib::to_string(err)));
    }
    return Status::Unavailable(fmt::format(
        "etcd {}: {} {}: connection lost after sending{}", where, path, httplib::to_string(err),
        idempotent ? "" : ", the outcome is unknown"));
  }
  if (ok) Return(index, std::move(c));  // after a trailer the connection's state is unknown
  if (answer.is_discarded() || !answer.is_object()) {
    return Status::Internal(fmt::format("etcd {}: {} answered HTTP {} with non-JSON '{}'", where,
                                        path, res.status, body.substr(0, 200)));
  }
  const int http_status = res.status;
  if (http_status != 200 || answer.contains("error")) {
    int code = static_cast<int>(JsonInt(answer, "code"));
    std::string msg = answer.value("message", std::string());
    if (msg.empty() && answer.contains("error") && answer["error"].is_string()) {
      msg = answer["error"].get<std::string>();
    }
    // A member without a leader (partitioned, or mid-election) cannot serve; others may.
    *retry_elsewhere = code == 14 && idempotent;
    return EtcdError(code, fmt::format("{}: {}", path, msg), where);
  }
  return answer;
}

StatusOr<nlohmann::json> EtcdClient::CallMember(size_t index, std::string_view path,
                                                const nlohmann::json& body) {
  bool retry = false;
  return Attempt(index, path, body.dump(), /*idempotent=*/true, &retry);
}

StatusOr<nlohmann::json> EtcdClient::Call(std::string_view path, const nlohmann::json& body,
                                          bool idempotent) {
  const std::string text = body.dump();
  const size_t first = preferred_.load();
  std::string errors;
  for (size_t k = 0; k < endpoints_.size(); ++k) {
    size_t index = (first + k) % endpoints_.size();
    bool retry = false;
    auto r = Attempt(index, path, text, idempotent, &retry);
    if (r.ok()) {
      preferred_.store(index);
      return r;
    }
    if (!retry) return r.status();
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", r.status().message());
  }
  return Status::Unavailable(
      fmt::format("etcd {}: no member answered {} ({})", EndpointList(), path, errors));
}

}  // namespace gpool::control
