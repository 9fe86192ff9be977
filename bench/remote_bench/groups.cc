// remote_bench --interleaved's groups (bench/remote_bench/internal.h lists the files; the head of
// bench/remote_bench.cc says what the driver reports): per transport, the round trip (plain
// socket or plain ucp ping-pong, gpool's Connection echo, a session's calls, with --clients the
// interception layers), the async ops, an idle session's cost, then the copy cells against the
// raw streams, and the summary lines. The method that runs a group is in method.cc.
// Apart from the method: these say what is compared with what, not how it is measured.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "remote_bench/internal.h"

#include "remote/client/link.h"
#include "remote/transport/ucx_transport.h"

namespace gpool::remote::remote_bench {
namespace {

std::unique_ptr<client::ServerLink> DriverLink(int transport) {
  auto l = client::ServerLink::Connect({.address = GpuAddr(transport), .transport = Name(transport)});
  if (!l.ok()) Die(l.status().ToString());
  return std::move(*l);
}
std::shared_ptr<Connection> DriverRaw(int transport) {
  static std::vector<std::unique_ptr<Transport>> keep;  // transports outlive their connections
  auto t = MakeTransport(Name(transport), {});
  if (!t.ok()) Die(t.status().ToString());
  auto c = (*t)->Connect(EchoAddr(transport));
  if (!c.ok()) Die(c.status().ToString());
  keep.push_back(std::move(*t));
  return std::shared_ptr<Connection>(std::move(*c));
}

// One copy cell of a summary line: "tcp h2d 64K 0.97".
// A miss that two decimals would round up to 0.95 gets three ("0.949"), so that the list does not
// show a "0.95" among the cells that did not count as met.
std::string CellName(int transport, bool d2h, size_t size, double ratio) {
  return fmt::format(
      "{} {} {} {}", Name(transport), d2h ? "d2h" : "h2d",
      size >= (size_t{1} << 20) ? fmt::format("{}M", size >> 20) : fmt::format("{}K", size >> 10),
      ratio < 0.95 && ratio >= 0.945 ? fmt::format("{:.3f}", ratio) : fmt::format("{:.2f}", ratio));
}
// "<head>: N of M cells <met>: [cell] [cell] ...": ratios >= 0.95 count.
void PrintCells(const std::string& head, const char* met,
                const std::vector<std::pair<std::string, double>>& cells) {
  auto n =
      std::count_if(cells.begin(), cells.end(), [](const auto& c) { return c.second >= 0.95; });
  std::printf("%s: %td of %zu cells %s:", head.c_str(), n, cells.size(), met);
  for (const auto& c : cells) std::printf(" [%s]", c.first.c_str());
  std::printf("\n");
}

}  // namespace

int RunInterleaved(const DriverFlags& f) {
  std::vector<int> transports;
  if (f.only != "ucx") transports.push_back(0);
  if (f.only != "tcp") transports.push_back(1);
  const char* tls = std::getenv("UCX_TLS");
  std::printf(
      "remote_bench --interleaved: reps %d, min time %.2f s, UCX_TLS=%s, A/A calibration %s\n"
      "  pinned: %s\n",
      f.reps, f.min_time, tls ? tls : "(unset)", f.aa ? "on" : "off", PinningHeader(f).c_str());
  if (f.skip.find("lat") == std::string::npos) {
    for (int t : transports) {
      Group grp{fmt::format("round trip, {}", Name(t)), false, {}};
      if (t == 0) {
        auto plain = std::make_shared<net::Fd>();
        auto c = net::ConnectTcp(g.plain_tcp);
        if (!c.ok()) Die(c.status().ToString());
        *plain = std::move(*c);
        grp.c.push_back({"plain TCP socket, 48 B", [plain] {
                           char buf[48] = {0};
                           if (!net::WriteAll(plain->get(), buf, sizeof buf, "echo").ok() ||
                               !net::ReadAll(plain->get(), buf, sizeof buf, "echo").ok()) {
                             Die("plain echo failed");
                           }
                           return 1.0;
                         }});
      }
      if (t == 1) {
        // The plain ucp ping-pong is the peer (the round-trip target is against it), as the plain
        // socket is for TCP; the ratio to gpool's own Connection echo is printed second. Its
        // echo server busy-polls while it waits, so it is paused outside its own turns (a
        // message makes it block on its bootstrap socket; a byte there resumes it): left
        // polling, it kept one of the two cores busy while gpool's contenders were measured,
        // whose two ends then had to share a CPU (a round trip on one CPU is ~8x (shm) and
        // ~1.8x (tcp) one on two here, bench/ucx_rt_bench.cc), while gpool's servers sleep
        // during its turns. (SIGSTOP/SIGCONT did the same, but a signal interrupts UCX's
        // syscalls; this keeps the peer plain.)
        auto plain = std::make_shared<PlainUcx>();
        auto fd = net::ConnectTcp(g.plain_ucx);
        if (!fd.ok()) Die(fd.status().ToString());
        if (!plain->Init() || !plain->Wire(fd->get())) Die("plain ucx ping-pong setup failed");
        auto keep_fd = std::make_shared<net::Fd>(std::move(*fd));
        auto pause = [plain] {
          char buf[48] = {kPlainUcxPause};
          if (!plain->Send(buf, sizeof buf)) Die("plain ucx pause failed");
        };
        auto resume = [keep_fd] {
          char go = 1;
          if (!net::WriteAll(keep_fd->get(), &go, 1, "plain ucp echo").ok()) Die("resume failed");
        };
        pause();
        grp.c.push_back({"plain ucp tag ping-pong, 48 B",
                         [plain, keep_fd] {
                           char buf[48] = {0};
                           if (!plain->Send(buf, sizeof buf) || !plain->Recv(buf, sizeof buf)) {
                             Die("plain ucx echo failed");
                           }
                           return 1.0;
                         },
                         resume, pause});
        grp.second = 1;
      }
      auto raw = DriverRaw(t);
      grp.c.push_back({fmt::format("gpool {} Connection echo, 48 B", Name(t)), [raw] {
                         static thread_local std::vector<std::byte> msg(48), in;
                         if (!raw->Send(msg).ok() || !raw->Recv(&in).ok()) Die("echo failed");
                         return 1.0;
                       }});
      std::shared_ptr<client::ServerLink> link = DriverLink(t);
      // The shape of a program's step: one asynchronous op (a launch), then a synchronizing call
      // (cudaStreamSynchronize): one round trip, plus whatever queuing the op costs the client
      // (arming the pump's timer).
      proto::Malloc pm{.size = 4096};
      proto::Pointer pp;
      proto::ReplyHead ph;
      if (!link->Call(pm, &ph, &pp).ok() || ph.error) Die("malloc failed");
      grp.c.push_back({fmt::format("one async op + sync through a session, {}", Name(t)),
                       [link, ptr = pp.ptr] {
                         std::lock_guard<std::mutex> lk(link->mu());
                         proto::Memset op{.dst = ptr, .value = 0, .size = 0};
                         proto::StreamSync sync{};
                         proto::ReplyHead h;
                         proto::Empty none;
                         if (!link->Post(op).ok() || !link->Call(sync, &h, &none).ok() ||
                             h.async_error) {
                           Die("post and sync failed");
                         }
                         return 1.0;
                       }});
      grp.c.push_back({fmt::format("no-op call through a session, {}", Name(t)), [link] {
                         std::lock_guard<std::mutex> lk(link->mu());
                         proto::Ping ping;
                         proto::ReplyHead h;
                         proto::Empty none;
                         if (!link->Call(ping, &h, &none).ok()) Die("ping failed");
                         return 1.0;
                       }});
      const size_t session_noop = grp.c.size() - 1;
      // --clients: the same round trip and launches through the interception layers, and the
      // SGEMM loop (bench/layer_client.h). Indices into the group's contenders.
      size_t drv_sync = 0, rt_sync = 0, drv_launch = 0, rt_launch = 0, st_launch = 0, sgemm = 0;
      if (!f.clients.empty()) {
        Layers& l = LayersFor(f, t);
        auto add = [&grp](Contender c) {
          grp.c.push_back(std::move(c));
          return grp.c.size() - 1;
        };
        drv_sync = add(ClientCalls("cuCtxSynchronize, driver stand-in", l.driver, "sync"));
        rt_sync = add(ClientCalls("cudaDeviceSynchronize, NVIDIA shared runtime over driver stand-in",
                                  l.runtime, "sync"));
        drv_launch = add(ClientCalls("cuLaunchKernel, driver stand-in", l.driver, "launch"));
        rt_launch = add(ClientCalls("<<<>>> launch, NVIDIA shared runtime over driver stand-in",
                                    l.runtime, "launch"));
        if (l.blas) {
          st_launch = add(ClientCalls("<<<>>> launch, NVIDIA static runtime over driver stand-in",
                                      l.blas, "launch"));
          sgemm = add(ClientCalls(fmt::format("cublasSgemm {0}x{0}, cuBLAS over driver stand-in",
                                              f.sgemm), l.blas, "sgemm"));
        }
      }
      std::vector<double> rate;
      std::vector<double> r = RunGroup(grp, f.reps, f.min_time, &rate);
      std::printf("round trip, %s%s: no-op call through a session / %s = %.2fx (target <= 1.3x)\n",
                  Name(t), t == 1 ? fmt::format(" (UCX_TLS={})", tls ? tls : "unset").c_str() : "",
                  grp.c[0].name.c_str(), r[session_noop]);
      if (!f.clients.empty()) {
        // The driver layer's targets (issue 27), each against the peer of this same run.
        std::printf("driver layer, %s: cuCtxSynchronize through the driver stand-in / %s = %.2fx "
                    "(target <= 1.3x); cudaDeviceSynchronize through NVIDIA's shared runtime %.2fx\n",
                    Name(t), grp.c[0].name.c_str(), r[drv_sync], r[rt_sync]);
        std::printf("driver layer, %s: cuLaunchKernel %.2f M launches/s (target >= 0.5 M/s); "
                    "<<<>>> through NVIDIA's shared runtime %.2f M/s",
                    Name(t), rate[drv_launch] / 1e6, rate[rt_launch] / 1e6);
        if (st_launch) {
          std::printf("; NVIDIA's static runtime over the driver stand-in %.2f M/s",
                      rate[st_launch] / 1e6);
        }
        std::printf("\n");
        if (sgemm) {
          std::printf("driver layer, %s: cublasSgemm %dx%d through cuBLAS over the driver "
                      "stand-in: %.0f calls/s, %.2f us/call = %.2fx the raw round trip (%.2f us), "
                      "%.2fx a <<<>>> launch through NVIDIA's shared runtime (%.2f us)\n",
                      Name(t), f.sgemm, f.sgemm, rate[sgemm], 1e6 / rate[sgemm], r[sgemm],
                      1e6 / rate[0], rate[rt_launch] / rate[sgemm], 1e6 / rate[rt_launch]);
        }
        // Their sessions (UCX ones poll) would count in the idle figure below and load the copy
        // groups: the copies start driver_client alone again.
        EndLayers(t);
      }
      std::fflush(stdout);
    }
    Group async{"async ops pipelined into a session (10,000 zero-byte memsets + 1 sync)", false, {}};
    for (int t : transports) {
      std::shared_ptr<client::ServerLink> link = DriverLink(t);
      proto::Malloc m{.size = 4096};
      proto::Pointer p;
      proto::ReplyHead h;
      if (!link->Call(m, &h, &p).ok() || h.error) Die("malloc failed");
      uint64_t ptr = p.ptr;
      async.c.push_back({fmt::format("async ops, {}", Name(t)), [link, ptr] {
                           std::lock_guard<std::mutex> lk(link->mu());
                           for (int i = 0; i < 10000; ++i) {
                             proto::Memset op{.dst = ptr, .value = 0, .size = 0};
                             if (!link->Post(op).ok()) Die("post failed");
                           }
                           proto::DeviceSync sync;
                           proto::ReplyHead h;
                           proto::Empty none;
                           if (!link->Call(sync, &h, &none).ok() || h.async_error) Die("sync failed");
                           return 10000.0;
                         }});
    }
    RunGroup(async, f.reps, f.min_time);
    // The plain ucp echo polls forever for its (now idle) client: stop it before the idle figure.
    if (g.plain_ucx_pid > 0) {
      kill(g.plain_ucx_pid, SIGKILL);
      waitpid(g.plain_ucx_pid, nullptr, 0);
      g.pids.erase(std::find(g.pids.begin(), g.pids.end(), g.plain_ucx_pid));
      g.plain_ucx_pid = -1;
    }
    // Idle cost: a connected session (one round trip done) left alone for 1 s; CPU and context
    // switches of all processes (client with its pump and transport helper threads, server,
    // session worker). A waiting thread that polls shows up here whatever the load.
    for (int t : transports) {
      std::shared_ptr<client::ServerLink> link = DriverLink(t);
      {
        std::lock_guard<std::mutex> lk(link->mu());
        proto::Ping ping;
        proto::ReplyHead h;
        proto::Empty none;
        if (!link->Call(ping, &h, &none).ok()) Die("ping failed");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // pump and helpers settle
      double vol0, invol0, vol1, invol1;
      AllSwitches(&vol0, &invol0);
      uint64_t sleeps0 = GetUcxWaitCounters().sleeps;
      double cpu0 = AllCpu();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      double cpu = AllCpu() - cpu0;
      AllSwitches(&vol1, &invol1);
      std::printf("idle connected session, %s: CPU %.2f ms per s (all processes), context switches "
                  "%.0f+%.0f per s, client ucx sleeps %.0f per s\n",
                  Name(t), cpu * 1e3, vol1 - vol0, invol1 - invol0,
                  static_cast<double>(GetUcxWaitCounters().sleeps - sleeps0));
    }
    std::fflush(stdout);
  }
  if (f.skip.find("bw") != std::string::npos) {
    EndLayers(-1);
    return 0;
  }
  // Copies of `size` bytes; below 4 MiB (one chunk) a step streams 4 MiB worth of them and syncs
  // once (d2h copies into "pinned" memory, asynchronous, as a program streaming small copies
  // would), against as many messages of `size` and one acknowledgement on the raw connection.
  // For the summary lines: the copy's ratio, and with --aa the second raw contender's, per cell.
  std::vector<std::pair<std::string, double>> cells, aa_cells, driver_cells;
  for (int t : transports) {
    // The table's sizes, or --size alone (any size: 128 KiB, say, where thresholds lie).
    std::vector<size_t> sizes = {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20,
                                 size_t{256} << 20, size_t{1} << 30};
    if (!f.sizes.empty()) sizes = f.sizes;
    for (size_t size : sizes) {
      const size_t per_step = std::max(size, proto::kCopyChunkBytes) / size;
      const size_t total = size * per_step;
      for (bool d2h : {false, true}) {
        if (f.skip.find(d2h ? "d2h" : "h2d") != std::string::npos) continue;
        Group grp{fmt::format("{} {} copies of {} bytes{}", Name(t), d2h ? "d2h" : "h2d", size,
                              per_step > 1 ? fmt::format(", {} per sync", per_step) : ""),
                  true, {}};
        auto raw = DriverRaw(t);
        auto spread = std::make_shared<RawStreamer>(raw.get(), total, d2h, true, size);
        auto hot = std::make_shared<RawStreamer>(raw.get(), total, d2h, false, size);
        if (!spread->Run() || !spread->Landed()) {
          Die("raw stream's data did not arrive");
        }
        grp.c.push_back({"raw, buffers of the copy's size", [raw, spread, total] {
                           if (!spread->Run()) Die("raw stream failed");
                           return static_cast<double>(total);
                         }});
        grp.c.push_back({"raw, one cache-resident chunk", [raw, hot, total] {
                           if (!hot->Run()) Die("raw stream failed");
                           return static_cast<double>(total);
                         }});
        if (t == 1) {
          // The plain ucp stream (see StartPlainUcxStream): the second peer, printed as "vs #3".
          PlainStreamClient* plain = PlainStreamClient::Get();
          if (plain == nullptr) Die("plain ucp stream setup failed");
          auto buf = std::make_shared<std::vector<std::byte>>(
              total, d2h ? std::byte{0} : kPlainStreamFill);
          if (!plain->Run(buf->data(), total, std::min(size, proto::kCopyChunkBytes), d2h) ||
              (*buf)[0] != kPlainStreamFill || (*buf)[total - 1] != kPlainStreamFill) {
            Die("plain ucp stream's data did not arrive");
          }
          grp.second = static_cast<int>(grp.c.size());
          grp.c.push_back({"plain ucp stream, all in flight", [plain, buf, total, size, d2h] {
                             if (!plain->Run(buf->data(), total,
                                             std::min(size, proto::kCopyChunkBytes), d2h)) {
                               Die("plain ucp stream failed");
                             }
                             return static_cast<double>(total);
                           }});
        }
        // --aa: the first contender again, same code and buffers, right before the copy (so as
        // far from the first in each repetition's order as the copy): its ratio to the first is
        // what the method reports between two identical contenders.
        const size_t aa_index = grp.c.size();
        if (f.aa) grp.c.push_back({"raw again (A/A), copy's size", grp.c[0].step});
        std::shared_ptr<client::ServerLink> link = DriverLink(t);
        proto::Malloc m{.size = total};
        proto::Pointer p;
        proto::ReplyHead h;
        if (!link->Call(m, &h, &p).ok() || h.error) Die("malloc failed");
        auto host = std::make_shared<std::vector<std::byte>>(total, std::byte{3});
        uint64_t ptr = p.ptr;
        if (d2h) {
          // Fill the device memory first (untimed), as a program's results would be: never
          // written, emulated memory reads back from the kernel's shared zero page, which stays in
          // the CPU caches and made the server's side of a copy cheaper than the raw echo's
          // (which sends from a written buffer of the same size).
          proto::Ping ping;
          proto::Empty none;
          if (!link->CopyToDevice(ptr, *host, 0).ok() || !link->Call(ping, &h, &none).ok() ||
              h.async_error) {
            Die("filling device memory failed");
          }
        }
        const size_t session_copy = grp.c.size();
        grp.c.push_back({"copy through a session", [link, host, ptr, total, size, per_step, d2h] {
                           std::lock_guard<std::mutex> lk(link->mu());
                           proto::ReplyHead h;
                           Status s;
                           if (d2h && per_step == 1) {
                             s = link->CopyFromDevice(host->data(), ptr, total, 0, &h);
                           } else {
                             for (size_t i = 0; i < per_step && s.ok(); ++i) {
                               s = d2h ? link->CopyFromDevice(host->data() + i * size, ptr + i * size,
                                                              size, 0, &h, /*async=*/true)
                                       : link->CopyToDevice(ptr + i * size,
                                                            ByteSpan(host->data() + i * size, size), 0);
                             }
                             // As the program's cudaStreamSynchronize(0) (ServerLink::SyncStream:
                             // after reads, answered by their replies; after writes, a round trip).
                             if (s.ok()) s = link->SyncStream(0, 0, &h);
                           }
                           if (!s.ok() || h.error || h.async_error) Die("copy failed");
                           return static_cast<double>(total);
                         }});
        size_t driver_copy = 0;
        if (!f.clients.empty()) {
          // The same copies through the driver stand-in (driver_client's h2d/d2h: cuMemcpyHtoD,
          // cuMemcpyDtoH, cuMemcpyDtoHAsync into page-locked memory), a command repeating the
          // step up to >= 64 MiB so that the pipe's round trip per command stays negligible.
          auto c = LayersFor(f, t, /*driver_only=*/true).driver;
          const size_t repeat = std::max<size_t>(1, (size_t{64} << 20) / total);
          const std::string line =
              fmt::format("{} {} {} {}", d2h ? "d2h" : "h2d", size, per_step, repeat);
          if (!c->Do(fmt::format("{} {} {} 1", d2h ? "d2h" : "h2d", size, per_step))) {
            Die(c->name() + ": " + line + " failed");  // allocates and fills, untimed
          }
          driver_copy = grp.c.size();
          grp.c.push_back({"copy through the driver stand-in", [c, line, total, repeat] {
                             if (!c->Do(line)) Die(c->name() + ": '" + line + "' failed");
                             return static_cast<double>(total * repeat);
                           }});
        }
        std::vector<double> r = RunGroup(grp, f.reps, f.min_time);
        const double copy = r[session_copy];
        if (driver_copy) {
          driver_cells.emplace_back(CellName(t, d2h, size, r[driver_copy]), r[driver_copy]);
        }
        cells.emplace_back(CellName(t, d2h, size, copy), copy);
        if (f.aa) aa_cells.emplace_back(CellName(t, d2h, size, r[aa_index]), r[aa_index]);
      }
    }
  }
  if (!cells.empty()) {
    PrintCells(
        "copies through a session / raw, buffers of the copy's size (target >= 0.95)",
        "met", cells);
  }
  if (!driver_cells.empty()) {
    PrintCells("driver layer, copies through the driver stand-in / raw, buffers of the copy's size "
               "(target >= 0.95)", "met", driver_cells);
  }
  if (!aa_cells.empty()) {
    PrintCells("A/A calibration", ">= 0.95 (the method's own false-miss rate on this host)",
               aa_cells);
  }
  EndLayers(-1);  // the programs exit at the end of their input
  return 0;
}


}  // namespace gpool::remote::remote_bench
