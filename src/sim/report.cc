#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "common/file.h"

namespace gpool::sim {

nlohmann::json MetricsDocument(const RunInfo& info, const std::vector<Metrics>& metrics) {
  nlohmann::json doc;
  doc["workload"] = info.workload;
  doc["cluster"] = info.cluster;
  doc["seed"] = info.seed;
  doc["command"] = info.command;
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : info.skipped) {
    skipped.push_back({{"reason", s.reason}, {"count", s.count}, {"example", s.example}});
  }
  doc["skipped_rows"] = skipped;
  if (info.offered_load) doc["offered_load"] = OfferedLoadToJson(*info.offered_load);
  nlohmann::json pol = nlohmann::json::object();
  for (const auto& m : metrics) pol[m.policy] = MetricsToJson(m);
  doc["policies"] = pol;
  return doc;
}

namespace {

std::vector<size_t> Thin(size_t n, size_t max_rows) {
  std::vector<size_t> idx;
  if (n == 0) return idx;
  size_t step = std::max<size_t>(1, (n + max_rows - 1) / max_rows);
  for (size_t i = 0; i < n; i += step) idx.push_back(i);
  if (idx.back() != n - 1) idx.push_back(n - 1);
  return idx;
}

const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                         "#e377c2", "#7f7f7f"};

std::string Esc(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A small SVG plot frame: maps data to a 640x300 box with margins; draws axes and labels.
struct Frame {
  double x0, x1, y0, y1;
  bool logx = false;
  static constexpr double W = 640, H = 300, L = 60, R = 150, T = 20, B = 40;
  double X(double x) const {
    double a = logx ? std::log10(std::max(x, 1e-9)) : x, lo = logx ? std::log10(x0) : x0,
           hi = logx ? std::log10(x1) : x1;
    return L + (hi > lo ? (a - lo) / (hi - lo) : 0) * (W - L - R);
  }
  double Y(double y) const { return T + (1 - (y1 > y0 ? (y - y0) / (y1 - y0) : 0)) * (H - T - B); }
  std::string Open(const std::string& xlabel, const std::string& ylabel) const {
    std::string s = fmt::format(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
        "font-size='11'><rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#999'/>",
        W, H, L, T, W - L - R, H - T - B);
    for (int i = 0; i <= 4; ++i) {
      double fy = y0 + (y1 - y0) * i / 4;
      s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{:.3g}</text>", L - 4, Y(fy) + 4, fy);
      double fx = logx ? std::pow(10, std::log10(x0) + (std::log10(x1) - std::log10(x0)) * i / 4)
                       : x0 + (x1 - x0) * i / 4;
      s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{:.3g}</text>", X(fx), H - B + 14, fx);
    }
    s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{}</text>", (L + W - R) / 2, H - 6,
                     Esc(xlabel));
    s += fmt::format("<text x='12' y='{}' transform='rotate(-90 12 {})' text-anchor='middle'>{}</text>",
                     (T + H - B) / 2, (T + H - B) / 2, Esc(ylabel));
    return s;
  }
  std::string Legend(const std::vector<std::string>& names) const {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i) {
      double y = T + 10 + 16 * static_cast<double>(i);
      s += fmt::format("<rect x='{}' y='{}' width='12' height='4' fill='{}'/><text x='{}' y='{}'>{}</text>",
                       W - R + 10, y - 4, kColors[i % 8], W - R + 26, y, Esc(names[i]));
    }
    return s;
  }
};

std::string Polyline(const std::vector<std::pair<double, double>>& pts, const Frame& f, size_t color) {
  std::string s = fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5' points='",
                              kColors[color % 8]);
  for (auto [x, y] : pts) s += fmt::format("{:.1f},{:.1f} ", f.X(x), f.Y(y));
  return s + "'/>";
}

std::string AllocationPlot(const std::vector<RunResult>& runs) {
  double t0 = 1e300, t1 = -1e300;
  for (const auto& r : runs) {
    t0 = std::min(t0, r.start_s);
    t1 = std::max(t1, r.end_s);
  }
  if (!(t1 > t0)) t1 = t0 + 1;
  const double scale = (t1 - t0) > 3 * 86400 ? 86400 : 3600;
  Frame f{0, (t1 - t0) / scale, 0, 1};
  std::string s = f.Open(scale == 86400 ? "time (days)" : "time (hours)", "GPU allocation rate");
  std::vector<std::string> names;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    names.push_back(r.policy);
    std::vector<std::pair<double, double>> pts;
    for (size_t k : Thin(r.timeline.size(), 600)) {
      const auto& p = r.timeline[k];
      pts.emplace_back((p.t - t0) / scale,
                       r.total_gpu_milli ? static_cast<double>(p.used_milli) / r.total_gpu_milli : 0);
    }
    s += Polyline(pts, f, i);
  }
  return s + f.Legend(names) + "</svg>";
}

std::string JctCdfPlot(const std::vector<RunResult>& runs) {
  double lo = 1e300, hi = 1;
  std::vector<std::vector<double>> all;
  for (const auto& r : runs) {
    std::vector<double> v;
    for (const auto& j : r.jobs) {
      if (j.finish_s >= 0) v.push_back(std::max(1.0, j.jct_s()));
    }
    std::sort(v.begin(), v.end());
    if (!v.empty()) {
      lo = std::min(lo, v.front());
      hi = std::max(hi, v.back());
    }
    all.push_back(std::move(v));
  }
  if (lo > hi) lo = 1;
  if (hi <= lo) hi = lo * 10;
  Frame f{lo, hi, 0, 1, true};
  std::string s = f.Open("JCT (s, log scale)", "fraction of jobs");
  std::vector<std::string> names;
  for (size_t i = 0; i < runs.size(); ++i) {
    names.push_back(runs[i].policy);
    std::vector<std::pair<double, double>> pts;
    const auto& v = all[i];
    for (size_t k : Thin(v.size(), 400)) pts.emplace_back(v[k], static_cast<double>(k + 1) / v.size());
    s += Polyline(pts, f, i);
  }
  return s + f.Legend(names) + "</svg>";
}

// Grouped bars: one group per label, one bar per policy.
std::string Bars(const std::vector<std::string>& groups, const std::vector<std::string>& series,
                 const std::vector<std::vector<double>>& values, const std::string& ylabel) {
  double hi = 0;
  for (const auto& row : values) for (double v : row) hi = std::max(hi, v);
  if (hi <= 0) hi = 1;
  Frame f{0, static_cast<double>(groups.size()), 0, hi * 1.05};
  std::string s = f.Open("", ylabel);
  const double gw = (Frame::W - Frame::L - Frame::R) / std::max<size_t>(1, groups.size());
  const double bw = gw * 0.8 / std::max<size_t>(1, series.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    double gx = Frame::L + gw * static_cast<double>(g) + gw * 0.1;
    for (size_t k = 0; k < series.size(); ++k) {
      double v = values[k][g];
      s += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'><title>{} {}: {:.4g}</title></rect>",
                       gx + bw * static_cast<double>(k), f.Y(v), bw, f.Y(0) - f.Y(v), kColors[k % 8],
                       Esc(series[k]), Esc(groups[g]), v);
    }
    s += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{}</text>", gx + gw * 0.4,
                     Frame::H - Frame::B + 26, Esc(groups[g]));
  }
  return s + f.Legend(series) + "</svg>";
}

}  // namespace

std::string TimelineCsv(const std::vector<RunResult>& runs, size_t max_rows) {
  std::string out = "policy,t_s,allocated_gpus,running_jobs,pending_jobs,nodes_on,power_w\n";
  for (const auto& r : runs) {
    for (size_t k : Thin(r.timeline.size(), max_rows)) {
      const auto& p = r.timeline[k];
      out += fmt::format("{},{:.3f},{:.3f},{},{},{},{:.1f}\n", r.policy, p.t, p.used_milli / 1000.0,
                         p.running, p.pending, p.nodes_on, p.power_w);
    }
  }
  return out;
}

std::string JobsCsv(const std::vector<RunResult>& runs) {
  std::string out =
      "policy,job,tenant,gpus,gpu_milli,submit_s,start_s,finish_s,wait_s,jct_s,base_run_s,slowdown,"
      "preemptions,leaves,remote_gpus,remote_slowdown\n";
  for (const auto& r : runs) {
    for (size_t i = 0; i < r.jobs.size(); ++i) {
      const JobOutcome& o = r.jobs[i];
      const std::string wait = o.start_s >= 0 ? fmt::format("{:.3f}", o.wait_s()) : "";
      const std::string jct = o.finish_s >= 0 ? fmt::format("{:.3f}", o.jct_s()) : "";
      out += fmt::format("{},{},{},{},{},{:.3f},{:.3f},{:.3f},{},{},{:.3f},{:.4f},{},{},{},{:.4f}\n", r.policy, i,
                         o.tenant, o.gpus, o.gpu_milli, o.submit_s, o.start_s, o.finish_s, wait, jct,
                         o.base_run_s, o.slowdown, o.preemptions, o.leaves, o.remote_gpus,
                         o.remote_slowdown);
    }
  }
  return out;
}

std::string ReportHtml(const RunInfo& info, const std::vector<RunResult>& runs,
                       const std::vector<Metrics>& metrics) {
  std::string h =
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpool sim report</title><style>"
      "body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
      "td:first-child{text-align:left}</style></head><body>";
  h += "<h1>gpool sim report</h1>";
  h += fmt::format("<p><b>Workload:</b> {}<br><b>Cluster:</b> {}<br><b>Seed:</b> {}<br><b>Command:</b> <code>{}</code></p>",
                   Esc(info.workload), Esc(info.cluster), info.seed, Esc(info.command));
  if (!info.skipped.empty()) {
    h += "<p><b>Rows skipped on purpose:</b></p><ul>";
    for (const auto& s : info.skipped) {
      h += fmt::format("<li>{}: {} (first at {})</li>", Esc(s.reason), s.count, Esc(s.example));
    }
    h += "</ul>";
  }
  h += "<h2>Metrics</h2><table><tr><th>policy</th><th>avg JCT (s)</th><th>p50 JCT</th><th>p99 JCT</th>"
       "<th>avg wait</th><th>unallocated GPUs at 1st failure</th><th>allocation rate</th>"
       "<th>makespan (s)</th><th>preemptions</th><th>energy (kWh)</th><th>energy, busy span "
       "(kWh)</th><th>finished</th><th>rejected</th><th>unfinished</th></tr>";
  for (const auto& m : metrics) {
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                     "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0f}</td><td>{}</td>"
                     "<td>{}</td><td>{}</td><td>{}</td></tr>",
                     Esc(m.policy), FormatMetric(m.avg_jct_s, "{:.0f}"), FormatMetric(m.p50_jct_s, "{:.0f}"),
                     FormatMetric(m.p99_jct_s, "{:.0f}"), FormatMetric(m.avg_wait_s, "{:.0f}"),
                     FormatMetric(m.unallocated_gpus, "{:.1f}"), FormatMetric(m.allocation_rate, "{:.3f}"),
                     FormatMetric(m.makespan_s, "{:.0f}"), m.preemptions, m.energy_kwh,
                     FormatMetric(m.energy_busy_span_kwh, "{:.0f}"), m.finished, m.rejected, m.unfinished);
  }
  h += "</table>";
  if (std::any_of(metrics.begin(), metrics.end(), [](const Metrics& m) { return m.remote_attach; })) {
    h += "<h2>Remote attachment</h2><p>Slowdown: the cost model's estimate (sched/remote_cost.h), "
         "not a measurement.</p><table><tr><th>policy</th><th>remote jobs</th><th>share of GPU "
         "jobs</th><th>share of GPUs</th><th>mean slowdown</th><th>p99 slowdown</th></tr>";
    for (const auto& m : metrics) {
      if (!m.remote_attach) continue;
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                       Esc(m.policy), m.remote_jobs, FormatMetric(m.remote_job_share, "{:.4f}"),
                       FormatMetric(m.remote_gpu_share, "{:.4f}"),
                       FormatMetric(m.avg_remote_slowdown, "{:.4f}"),
                       FormatMetric(m.p99_remote_slowdown, "{:.4f}"));
    }
    h += "</table>";
  }
  h += "<h2>GPU allocation over time</h2>" + AllocationPlot(runs);
  h += "<h2>JCT CDF</h2>" + JctCdfPlot(runs);
  // Wait per gang size.
  std::vector<std::string> groups;
  for (const auto& m : metrics) {
    for (const auto& b : m.wait_by_gang) {
      if (std::find(groups.begin(), groups.end(), b.label) == groups.end()) groups.push_back(b.label);
    }
  }
  std::vector<std::string> series;
  std::vector<std::vector<double>> waits;
  for (const auto& m : metrics) {
    series.push_back(m.policy);
    std::vector<double> row(groups.size(), 0);
    for (const auto& b : m.wait_by_gang) {
      row[std::find(groups.begin(), groups.end(), b.label) - groups.begin()] = b.avg_wait_s;
    }
    waits.push_back(std::move(row));
  }
  h += "<h2>Average queue wait by gang size (GPUs)</h2>" + Bars(groups, series, waits, "avg wait (s)");
  std::vector<std::vector<double>> energy;
  for (const auto& m : metrics) energy.push_back({m.energy_kwh});
  h += "<h2>Energy</h2>" + Bars({"energy"}, series, energy, "kWh");
  h += "<h2>Tenant shares</h2><table><tr><th>policy</th><th>tenant</th><th>entitlement</th><th>share</th><th>GPU-hours</th></tr>";
  for (const auto& m : metrics) {
    for (const auto& t : m.tenants) {
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{}</td><td>{:.0f}</td></tr>",
                       Esc(m.policy), Esc(t.tenant), t.entitlement, FormatMetric(t.share, "{:.3f}"),
                       t.gpu_hours);
    }
  }
  h += "</table></body></html>\n";
  return h;
}

Status WriteOutputs(const std::string& dir, const RunInfo& info, const std::vector<RunResult>& runs,
                    const std::vector<Metrics>& metrics) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create directory: {}", dir, ec.message()));
  GPOOL_RETURN_IF_ERROR(
      WriteFileAtomic(dir + "/metrics.json", MetricsDocument(info, metrics).dump(2) + "\n"));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(dir + "/timeline.csv", TimelineCsv(runs)));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(dir + "/jobs.csv", JobsCsv(runs)));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(dir + "/report.html", ReportHtml(info, runs, metrics)));
  return Status::Ok();
}

}  // namespace gpool::sim
