// Chrome trace-event JSON writer and reader (see core/trace.h).
//
// The writer formats by hand rather than through a JSON DOM: a predicted trace
// of a large layout has hundreds of thousands of events, and a DOM costs
// several allocations per event. Numbers are written in shortest round-trip
// form (std::to_chars), so parse_trace(trace_to_json(t)) gives back t exactly.
// The reader goes through nlohmann (core/json_util.h) for its error positions.
#include "core/trace.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/json_util.h"

namespace loom {
namespace {

void put_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  out += '"';
}

// Non-finite values are not JSON; they are written as null, which the reader rejects.
void put_number(std::string& out, double x) {
  if (!std::isfinite(x)) {
    out += "null";
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, r.ptr);
}

void put_int(std::string& out, int64_t x) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, r.ptr);
}

void put_metadata(std::string& out, const char* name, int pid, int tid, const char* arg_key,
                  const std::string* str_arg, int64_t int_arg) {
  out += "{\"name\":\"";
  out += name;
  out += "\",\"ph\":\"M\",\"pid\":";
  put_int(out, pid);
  out += ",\"tid\":";
  put_int(out, tid);
  out += ",\"args\":{\"";
  out += arg_key;
  out += "\":";
  if (str_arg)
    put_string(out, *str_arg);
  else
    put_int(out, int_arg);
  out += "}},\n";
}

// Names are indexed by pid/tid; bound them so a stray OS pid cannot allocate gigabytes.
constexpr int64_t kMaxNamedId = int64_t(1) << 22;

Result<int64_t> event_int(const Json& ev, const char* key, size_t index, bool required, int64_t fallback) {
  std::string where = "trace: traceEvents[" + std::to_string(index) + "]";
  if (!ev.contains(key) || ev[key].is_null()) {
    if (required) return parse_error(where + "." + key + " is missing; every event needs it");
    return fallback;
  }
  const Json& v = ev[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  return parse_error(where + "." + key + " must be an integer, got " + v.dump());
}

Result<double> event_number(const Json& ev, const char* key, size_t index, bool required, double fallback) {
  std::string where = "trace: traceEvents[" + std::to_string(index) + "]";
  if (!ev.contains(key) || ev[key].is_null()) {
    if (required) return parse_error(where + "." + key + " is missing; every complete (X) event needs it");
    return fallback;
  }
  const Json& v = ev[key];
  if (!v.is_number()) return parse_error(where + "." + key + " must be a number, got " + v.dump());
  return v.get<double>();
}

Result<int32_t> event_int32(const Json& obj, const char* key, size_t index, bool required, int64_t fallback) {
  LOOM_ASSIGN_OR_RETURN(int64_t x, event_int(obj, key, index, required, fallback));
  if (x < INT32_MIN || x > INT32_MAX)
    return parse_error("trace: traceEvents[" + std::to_string(index) + "]." + key + "=" + std::to_string(x) +
                       " does not fit a 32-bit integer");
  return static_cast<int32_t>(x);
}

Status set_name(std::vector<std::string>& names, int64_t id, const Json& ev, size_t index, const char* what) {
  if (id < 0 || id >= kMaxNamedId)
    return parse_error("trace: traceEvents[" + std::to_string(index) + "]: " + what + " " + std::to_string(id) +
                       " is out of range for a named track (0.." + std::to_string(kMaxNamedId - 1) + ")");
  const Json* args = ev.contains("args") ? &ev["args"] : nullptr;
  if (!args || !args->is_object() || !args->contains("name") || !(*args)["name"].is_string())
    return parse_error("trace: traceEvents[" + std::to_string(index) + "]: metadata event needs args.name (a string)");
  if (static_cast<int64_t>(names.size()) <= id) names.resize(id + 1);
  // Thread names repeat per process; the first one wins.
  if (names[id].empty()) names[id] = (*args)["name"].get<std::string>();
  return Status::ok();
}

Result<TraceEvent> parse_complete_event(const Json& ev, size_t i) {
  TraceEvent e;
  if (ev.contains("name")) {
    if (!ev["name"].is_string())
      return parse_error("trace: traceEvents[" + std::to_string(i) + "].name must be a string");
    e.name = ev["name"].get<std::string>();
  }
  if (ev.contains("cat") && ev["cat"].is_string()) e.cat = ev["cat"].get<std::string>();
  LOOM_ASSIGN_OR_RETURN(e.pid, event_int32(ev, "pid", i, true, 0));
  LOOM_ASSIGN_OR_RETURN(e.tid, event_int32(ev, "tid", i, true, 0));
  LOOM_ASSIGN_OR_RETURN(e.ts_us, event_number(ev, "ts", i, true, 0));
  LOOM_ASSIGN_OR_RETURN(e.dur_us, event_number(ev, "dur", i, true, 0));
  if (ev.contains("args") && !ev["args"].is_null()) {
    const Json& a = ev["args"];
    if (!a.is_object()) return parse_error("trace: traceEvents[" + std::to_string(i) + "].args must be an object");
    LOOM_ASSIGN_OR_RETURN(e.op_id, event_int32(a, "op_id", i, false, -1));
    LOOM_ASSIGN_OR_RETURN(e.micro, event_int32(a, "micro", i, false, -1));
    LOOM_ASSIGN_OR_RETURN(e.stage, event_int32(a, "stage", i, false, -1));
    LOOM_ASSIGN_OR_RETURN(e.chunk, event_int32(a, "chunk", i, false, -1));
    LOOM_ASSIGN_OR_RETURN(e.bytes, event_number(a, "bytes", i, false, 0));
  }
  return e;
}

}  // namespace

std::string trace_to_json(const Trace& trace) {
  std::string out;
  out.reserve(256 + trace.events.size() * 200 + trace.process_names.size() * trace.thread_names.size() * 160);
  out += "{\"traceEvents\":[\n";
  for (size_t pid = 0; pid < trace.process_names.size(); ++pid) {
    int p = static_cast<int>(pid);
    put_metadata(out, "process_name", p, 0, "name", &trace.process_names[pid], 0);
    put_metadata(out, "process_sort_index", p, 0, "sort_index", nullptr, p);
    for (size_t tid = 0; tid < trace.thread_names.size(); ++tid) {
      int t = static_cast<int>(tid);
      put_metadata(out, "thread_name", p, t, "name", &trace.thread_names[tid], 0);
      put_metadata(out, "thread_sort_index", p, t, "sort_index", nullptr, t);
    }
  }
  for (const TraceEvent& e : trace.events) {
    out += "{\"name\":";
    put_string(out, e.name);
    out += ",\"cat\":";
    put_string(out, e.cat);
    out += ",\"ph\":\"X\",\"ts\":";
    put_number(out, e.ts_us);
    out += ",\"dur\":";
    put_number(out, e.dur_us);
    out += ",\"pid\":";
    put_int(out, e.pid);
    out += ",\"tid\":";
    put_int(out, e.tid);
    out += ",\"args\":{\"op_id\":";
    put_int(out, e.op_id);
    out += ",\"micro\":";
    put_int(out, e.micro);
    out += ",\"stage\":";
    put_int(out, e.stage);
    out += ",\"chunk\":";
    put_int(out, e.chunk);
    out += ",\"bytes\":";
    put_number(out, e.bytes);
    out += "}},\n";
  }
  if (out.back() == '\n' && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);  // no trailing comma
  out += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"kind\":";
  put_string(out, trace.kind);
  out += ",\"plan_hash\":";
  put_string(out, trace.plan_hash);
  out += ",\"program_hash\":";
  put_string(out, trace.program_hash);
  out += "}}\n";
  return out;
}

Result<Trace> parse_trace(const std::string& json_text) {
  LOOM_ASSIGN_OR_RETURN(Json root, parse_json(json_text, "trace"));
  Trace trace;
  const Json* events = nullptr;
  if (root.is_array()) {  // the bare-array form of the format
    events = &root;
  } else if (root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array()) {
    events = &root["traceEvents"];
    if (root.contains("otherData") && root["otherData"].is_object()) {
      const Json& other = root["otherData"];
      if (other.contains("kind") && other["kind"].is_string()) trace.kind = other["kind"].get<std::string>();
      if (other.contains("plan_hash") && other["plan_hash"].is_string())
        trace.plan_hash = other["plan_hash"].get<std::string>();
      if (other.contains("program_hash") && other["program_hash"].is_string())
        trace.program_hash = other["program_hash"].get<std::string>();
    }
  } else {
    return parse_error("trace: expected an object with a \"traceEvents\" array (or a bare array of events)");
  }
  trace.events.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& ev = (*events)[i];
    if (!ev.is_object()) return parse_error("trace: traceEvents[" + std::to_string(i) + "] must be an object");
    if (!ev.contains("ph") || !ev["ph"].is_string())
      return parse_error("trace: traceEvents[" + std::to_string(i) + "].ph is missing; every event needs a phase");
    const std::string ph = ev["ph"].get<std::string>();
    if (ph == "X") {
      LOOM_ASSIGN_OR_RETURN(TraceEvent e, parse_complete_event(ev, i));
      trace.events.push_back(std::move(e));
    } else if (ph == "M") {
      const std::string name = ev.contains("name") && ev["name"].is_string() ? ev["name"].get<std::string>() : "";
      if (name == "process_name") {
        LOOM_ASSIGN_OR_RETURN(int64_t pid, event_int(ev, "pid", i, true, 0));
        LOOM_RETURN_IF_ERROR(set_name(trace.process_names, pid, ev, i, "pid"));
      } else if (name == "thread_name") {
        LOOM_ASSIGN_OR_RETURN(int64_t tid, event_int(ev, "tid", i, true, 0));
        LOOM_RETURN_IF_ERROR(set_name(trace.thread_names, tid, ev, i, "tid"));
      }
      // sort indices and other metadata follow from the names' indices
    }
    // Other phases (B/E, counters, flows, instants) are not part of Loom's schema; skipped.
  }
  return trace;
}

Status write_trace(const Trace& trace, const std::string& path) {
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (!std::isfinite(e.ts_us) || !std::isfinite(e.dur_us) || e.dur_us < 0 || !std::isfinite(e.bytes))
      return invalid_argument("trace: event " + std::to_string(i) + " ('" + e.name +
                              "') has a non-finite time or a negative duration; fix the timeline that produced it");
  }
  return write_text_file(path, trace_to_json(trace)).with_context("trace");
}

}  // namespace loom
