// Chrome trace JSON: what trace_to_json writes, parse_trace reads back exactly;
// the output is the schema Perfetto expects (checked with an independent JSON
// parser); malformed input gives positions and names the bad field.
#include "core/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/json_util.h"

namespace loom {
namespace {

Trace sample() {
  Trace t;
  t.kind = "measured";
  t.plan_hash = "00ff00ff00ff00ff";
  t.process_names = {"rank 0 (dp0,pp0,tp0)", "rank 1 \"quoted\" \\ back", "rank 2 \xc3\xa9t\xc3\xa9"};
  t.thread_names = {"compute", "pp-comm", "dp-comm"};
  auto ev = [&](std::string name, std::string cat, int pid, int tid, double ts, double dur, int op, int micro,
                int stage, int chunk, double bytes) {
    TraceEvent e;
    e.name = std::move(name);
    e.cat = std::move(cat);
    e.pid = pid;
    e.tid = tid;
    e.ts_us = ts;
    e.dur_us = dur;
    e.op_id = op;
    e.micro = micro;
    e.stage = stage;
    e.chunk = chunk;
    e.bytes = bytes;
    t.events.push_back(e);
  };
  ev("fwd s0 c0 mb0", "fwd", 0, 0, 0.0, 1234.5678901234567, 0, 0, 0, 0, 0);
  ev("send_act s0 c0 mb0", "comm", 0, 1, 1234.5678901234567, 0.1, 1, 0, 0, 0, 16777216);
  ev("bwd s1 c1 mb3 p2", "bwd", 1, 0, 1e-7, 3.0000000000000004, 17, 3, 1, 1, 0);
  ev("grad_sync s2 c0 b1", "comm", 2, 2, 123456789.123456, 0, 40, -1, 2, 0, 1.5e9);
  ev("nested\tslice\n\x01 ctl", "comm", 2, 0, 5, 2.5, -1, -1, -1, -1, 0);
  return t;
}

void expect_equal(const Trace& a, const Trace& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.plan_hash, b.plan_hash);
  EXPECT_EQ(a.process_names, b.process_names);
  EXPECT_EQ(a.thread_names, b.thread_names);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    const TraceEvent &x = a.events[i], &y = b.events[i];
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.cat, y.cat);
    EXPECT_EQ(x.pid, y.pid);
    EXPECT_EQ(x.tid, y.tid);
    EXPECT_EQ(x.ts_us, y.ts_us);  // exact: numbers are written in round-trip form
    EXPECT_EQ(x.dur_us, y.dur_us);
    EXPECT_EQ(x.op_id, y.op_id);
    EXPECT_EQ(x.micro, y.micro);
    EXPECT_EQ(x.stage, y.stage);
    EXPECT_EQ(x.chunk, y.chunk);
    EXPECT_EQ(x.bytes, y.bytes);
  }
}

TEST(Trace, RoundTripsExactly) {
  Trace t = sample();
  auto back = parse_trace(trace_to_json(t));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_equal(t, *back);
}

TEST(Trace, EmptyTraceRoundTrips) {
  Trace t;
  t.kind = "predicted";
  auto back = parse_trace(trace_to_json(t));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_equal(t, *back);
}

TEST(Trace, WritesTheChromeTraceSchema) {
  nlohmann::json j = nlohmann::json::parse(trace_to_json(sample()));
  ASSERT_TRUE(j["traceEvents"].is_array());
  EXPECT_EQ(j["otherData"]["kind"], "measured");
  EXPECT_EQ(j["otherData"]["plan_hash"], "00ff00ff00ff00ff");
  int complete = 0, process_names = 0, thread_names = 0, sort_indices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      for (const char* key : {"name", "cat", "ts", "dur", "pid", "tid"}) EXPECT_TRUE(e.contains(key)) << key;
      for (const char* key : {"op_id", "micro", "stage", "chunk", "bytes"}) EXPECT_TRUE(e["args"].contains(key)) << key;
    } else if (e["ph"] == "M") {
      if (e["name"] == "process_name") ++process_names;
      if (e["name"] == "thread_name") ++thread_names;
      if (e["name"] == "process_sort_index" || e["name"] == "thread_sort_index") ++sort_indices;
      EXPECT_TRUE(e["args"].is_object());
    } else {
      ADD_FAILURE() << "unexpected phase " << e["ph"];
    }
  }
  EXPECT_EQ(complete, 5);
  EXPECT_EQ(process_names, 3);
  EXPECT_EQ(thread_names, 3 * 3);  // every stream named in every process
  EXPECT_EQ(sort_indices, 3 + 3 * 3);
  // Microseconds, as written.
  EXPECT_DOUBLE_EQ(j["traceEvents"][j["traceEvents"].size() - 2]["ts"].get<double>(), 123456789.123456);
}

TEST(Trace, ReadsOtherProducers) {
  // The bare-array form, extra phases and keys we do not use, args left out.
  const std::string text = R"([
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "rank 1"}},
    {"name": "ProfilerStep#3", "ph": "B", "pid": 1, "tid": 0, "ts": 1},
    {"name": "mem", "ph": "C", "pid": 1, "ts": 2, "args": {"bytes": 5}},
    {"name": "kernel", "cat": "kernel", "ph": "X", "pid": 1, "tid": 7, "ts": 10.5, "dur": 2, "id": 3}
  ])";
  auto t = parse_trace(text);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(t->process_names.size(), 2u);
  EXPECT_EQ(t->process_names[0], "");
  EXPECT_EQ(t->process_names[1], "rank 1");
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(t->events[0].name, "kernel");
  EXPECT_EQ(t->events[0].tid, 7);
  EXPECT_EQ(t->events[0].ts_us, 10.5);
  EXPECT_EQ(t->events[0].op_id, -1);
  EXPECT_EQ(t->events[0].micro, -1);
}

TEST(Trace, MalformedJsonReportsLineAndColumn) {
  auto t = parse_trace("{\"traceEvents\": [\n  {\"ph\": \"X\",, }\n]}");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kParseError);
  EXPECT_NE(t.status().message().find("line 2, column"), std::string::npos) << t.status().message();
}

TEST(Trace, BadEventsNameTheField) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "dur": 1}]})", "traceEvents[0].ts"},
      {R"({"traceEvents": [{"ph": "M", "name": "x"}, {"ph": "X", "pid": 0, "tid": "t", "ts": 0, "dur": 1}]})",
       "traceEvents[1].tid"},
      {R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": null, "dur": 1}]})", "traceEvents[0].ts"},
      {R"({"traceEvents": [{"name": "a"}]})", "traceEvents[0].ph"},
      {R"({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0}]})", "args.name"},
      {R"({"traceEvents": [{"ph": "M", "name": "process_name", "pid": -3, "args": {"name": "x"}}]})", "pid -3"},
      {R"({"events": []})", "traceEvents"},
  };
  for (const Case& c : cases) {
    auto t = parse_trace(c.text);
    ASSERT_FALSE(t.is_ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kParseError);
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
  }
}

TEST(Trace, WriteTraceIsReadableAndRejectsNonFiniteTimes) {
  std::string path = ::testing::TempDir() + "loom_trace_test_" + std::to_string(::getpid()) + ".json";
  Trace t = sample();
  ASSERT_TRUE(write_trace(t, path).is_ok());
  auto text = read_text_file(path);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  auto back = parse_trace(*text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_equal(t, *back);
  std::remove(path.c_str());

  t.events[1].dur_us = std::numeric_limits<double>::quiet_NaN();
  Status s = write_trace(t, path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(read_text_file(path).is_ok()) << "nothing may be written for a rejected trace";
  // trace_to_json never emits invalid JSON: the NaN becomes null, which the reader refuses.
  auto parsed = parse_trace(trace_to_json(t));
  EXPECT_EQ(parsed.status().code(), StatusCode::kParseError);

  // A missing folder is bad input (exit 2), as for every output (core/output_file.h).
  EXPECT_EQ(write_trace(sample(), "/nonexistent-dir/x/trace.json").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom
