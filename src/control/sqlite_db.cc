#include "control/sqlite_db.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <utility>

namespace gpool::control {
namespace {

StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return StatusCode::kResourceExhausted;
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return StatusCode::kInvalidArgument;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_SCHEMA:
      return StatusCode::kFailedPrecondition;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return StatusCode::kPermissionDenied;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
      return StatusCode::kIoError;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace

Status SqliteError(sqlite3* db, int rc, std::string_view path, std::string_view what) {
  // sqlite3_errmsg describes the most recent failure on the connection, which is ours: each
  // connection is used by one thread at a time.
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return Status(CodeFor(rc), fmt::format("{}: {}: {} (sqlite code {})", path, what, msg, rc));
}

Statement::Statement(sqlite3* db, sqlite3_stmt* stmt, std::string_view path)
    : db_(db), stmt_(stmt), path_(path) {}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), path_(other.path_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    path_ = other.path_;
  }
  return *this;
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void Statement::BindBlob(int index, std::string_view bytes) {
  // A zero-length blob must still bind as a blob, not NULL: pass a non-null pointer.
  static const char kEmpty = 0;
  sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(),
                      SQLITE_TRANSIENT);
}

void Statement::BindText(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

void Statement::BindInt(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }

void Statement::BindNull(int index) { sqlite3_bind_null(stmt_, index); }

StatusOr<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status s = SqliteError(db_, rc, path_, fmt::format("'{}'", sqlite3_sql(stmt_)));
  sqlite3_reset(stmt_);
  return s;
}

Status Statement::Run() {
  for (;;) {
    GPOOL_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string Statement::ColumnBlob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  int n = sqlite3_column_bytes(stmt_, column);
  return p == nullptr ? std::string() : std::string(static_cast<const char*>(p), n);
}

std::string_view Statement::ColumnText(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  int n = sqlite3_column_bytes(stmt_, column);
  return p == nullptr ? std::string_view() : std::string_view(reinterpret_cast<const char*>(p), n);
}

StatusOr<Connection> Connection::Open(const std::string& path, bool create) {
  Connection c;
  c.path_ = std::make_unique<std::string>(path);
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &c.db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    // On failure sqlite3_open_v2 may still allocate a handle that carries the message.
    return SqliteError(c.db_, rc, path, "open");
  }
  sqlite3_extended_result_codes(c.db_, 1);
  sqlite3_busy_timeout(c.db_, 5000);
  return c;
}

Connection::~Connection() {
  // Statements are finalized by their owners first; sqlite3_close_v2 defers the close until they
  // are, so a missed one leaks rather than crashes.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

StatusOr<Statement> Connection::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, *path_, fmt::format("prepare '{}'", sql));
  return Statement(db_, stmt, *path_);
}

Status Connection::Exec(const std::string& sql) {
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, *path_, fmt::format("'{}'", sql));
  return Status::Ok();
}

StatusOr<std::string> Connection::QueryText(std::string_view sql) {
  GPOOL_ASSIGN_OR_RETURN(Statement st, Prepare(sql));
  GPOOL_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? std::string(st.ColumnText(0)) : std::string();
}

}  // namespace gpool::control
