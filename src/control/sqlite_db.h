// Thin RAII wrappers over the SQLite C API, used by SqliteStore only.
//
// Errors become Status with the database path and what was being done ("state.db: prepare
// 'SELECT ...': no such table: kv"). Thread safety: a Connection and its statements belong to one
// thread at a time (connections are opened SQLITE_OPEN_NOMUTEX); callers serialise access.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gpool::control {

// Maps a SQLite result code to a StatusCode and formats "<path>: <what>: <sqlite message>".
Status SqliteError(sqlite3* db, int rc, std::string_view path, std::string_view what);

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, sqlite3_stmt* stmt, std::string_view path);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Clears the bindings and rewinds, ready for new parameters. Call before each use.
  void Reset();
  // Parameters are 1-based, as in SQLite.
  void BindBlob(int index, std::string_view bytes);
  void BindText(int index, std::string_view text);
  void BindInt(int index, int64_t value);
  void BindNull(int index);
  // True when a row is ready, false when done; an error otherwise.
  StatusOr<bool> Step();
  // Steps to completion, ignoring rows.
  Status Run();

  int64_t ColumnInt(int column) const;
  std::string ColumnBlob(int column) const;
  std::string_view ColumnText(int column) const;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string_view path_;  // owned by the Connection, which outlives its statements
};

class Connection {
 public:
  // Opens (and with `create`, creates) the database file; sets a busy timeout.
  static StatusOr<Connection> Open(const std::string& path, bool create);
  Connection() = default;
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  StatusOr<Statement> Prepare(std::string_view sql);
  // Runs one or more statements that return no rows we need.
  Status Exec(const std::string& sql);
  // Runs a statement (typically a PRAGMA) and returns the first column of its first row as text,
  // "" when there is no row.
  StatusOr<std::string> QueryText(std::string_view sql);
  sqlite3* db() const { return db_; }
  const std::string& path() const { return *path_; }

 private:
  sqlite3* db_ = nullptr;
  // Heap-allocated so statements can keep a stable view of it across moves of the Connection.
  std::unique_ptr<std::string> path_;
};

}  // namespace gpool::control
