#include "exec/comm/tcp_collectives.h"

#include <algorithm>
#include <cstring>

namespace loom::exec::tcp {
namespace {

constexpr size_t kChunkBytes = size_t(1) << 20;
constexpr size_t kSmallBytes = size_t(64) << 10;

int mod(int a, int p) { return ((a % p) + p) % p; }

// Element i of the buffer split into p near-equal segments.
struct Segments {
  size_t n;
  int p;
  size_t begin(int i) const { return size_t(i) * (n / size_t(p)) + std::min(size_t(i), n % size_t(p)); }
  size_t len(int i) const { return n / size_t(p) + (size_t(i) < n % size_t(p) ? 1 : 0); }
};

size_t chunks(size_t len, size_t per) { return (len + per - 1) / per; }

template <typename T>
void combine(T* acc, const T* in, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      for (size_t i = 0; i < n; ++i) acc[i] += in[i];
      break;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
      break;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], in[i]);
      break;
  }
}

template <typename T>
Status all_reduce_small(CollectiveIo& io, T* buf, size_t n, ReduceOp op) {
  const int p = io.group().size(), me = io.group().rank;
  const size_t bytes = n * sizeof(T);
  for (int k = 1; k < p; ++k) LOOM_RETURN_IF_ERROR(io.send(mod(me + k, p), buf, bytes));
  std::vector<Message> got(static_cast<size_t>(p));
  for (int k = 1; k < p; ++k) {
    int from = mod(me - k, p);
    LOOM_ASSIGN_OR_RETURN(got[size_t(from)], io.recv(from, bytes));
  }
  auto data = [&](int r) { return r == me ? buf : reinterpret_cast<const T*>(got[size_t(r)].data.get()); };
  std::vector<T> acc(data(0), data(0) + n);
  for (int r = 1; r < p; ++r) combine(acc.data(), data(r), n, op);
  std::memcpy(buf, acc.data(), bytes);
  return Status::ok();
}

template <typename T>
Status all_reduce_ring(CollectiveIo& io, T* buf, size_t n, ReduceOp op) {
  const int p = io.group().size(), me = io.group().rank;
  const int next = mod(me + 1, p), prev = mod(me - 1, p);
  const Segments seg{n, p};
  const size_t per = kChunkBytes / sizeof(T);
  // Phase 1 (reduce-scatter): after step k, segment me-k-1 holds k+2 ranks'
  // contributions; after p-1 steps this rank owns segment me+1, reduced.
  // Phase 2 (all-gather): the reduced segments travel once around the ring.
  for (int phase = 0; phase < 2; ++phase) {
    for (int k = 0; k < p - 1; ++k) {
      const int s = phase == 0 ? mod(me - k, p) : mod(me + 1 - k, p);
      const int r = phase == 0 ? mod(me - k - 1, p) : mod(me - k, p);
      const size_t cs = chunks(seg.len(s), per), cr = chunks(seg.len(r), per);
      for (size_t c = 0; c < std::max(cs, cr); ++c) {
        if (c < cs) {
          size_t off = c * per, cnt = std::min(per, seg.len(s) - off);
          LOOM_RETURN_IF_ERROR(io.send(next, buf + seg.begin(s) + off, cnt * sizeof(T)));
        }
        if (c < cr) {
          size_t off = c * per, cnt = std::min(per, seg.len(r) - off);
          LOOM_ASSIGN_OR_RETURN(Message m, io.recv(prev, cnt * sizeof(T)));
          T* dst = buf + seg.begin(r) + off;
          if (phase == 0) {
            combine(dst, reinterpret_cast<const T*>(m.data.get()), cnt, op);
          } else {
            std::memcpy(dst, m.data.get(), cnt * sizeof(T));
          }
        }
      }
    }
  }
  return Status::ok();
}

template <typename T>
Status all_reduce_any(CollectiveIo& io, T* buf, size_t n, ReduceOp op) {
  const int p = io.group().size();
  if (p == 1 || n == 0) return Status::ok();
  if (n * sizeof(T) <= kSmallBytes || n < size_t(p)) return all_reduce_small(io, buf, n, op);
  return all_reduce_ring(io, buf, n, op);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

Status CollectiveIo::send(int peer, const void* data, size_t bytes) {
  Deadline d = deadline_after(g_.timeout_s);
  int world_rank = (*g_.members)[size_t(peer)];
  waiting_on_->store(world_rank);
  Status s = g_.transport->send(world_rank, g_.ctx, Kind::kCollective, seq_, data, bytes, d, cancel_);
  if (s.code() == StatusCode::kTimeout && s.message() != "cancelled") {
    return Status(StatusCode::kTimeout, "did not complete within " + seconds_text(g_.timeout_s) +
                                            " (the collective timeout: loom execute --timeout): " + g_.transport->describe(world_rank) +
                                            " did not take the data; a peer is presumed dead or stuck; call "
                                            "abort() to end the job");
  }
  return s;
}

Result<Message> CollectiveIo::recv(int peer, size_t bytes) {
  int world_rank = (*g_.members)[size_t(peer)];
  auto t = g_.transport->post(g_.ctx, world_rank, Kind::kCollective, seq_);
  waiting_on_->store(world_rank);
  Status s = g_.transport->wait(*t, deadline_after(g_.timeout_s), cancel_);
  if (s.code() == StatusCode::kTimeout && s.message() != "cancelled") {
    return Status(StatusCode::kTimeout, "did not complete within " + seconds_text(g_.timeout_s) +
                                            " (the collective timeout: loom execute --timeout) waiting for " +
                                            g_.transport->describe(world_rank) +
                                            "; a peer is presumed dead or stuck, so the job ends (raise --timeout if a step "
                                            "legitimately takes longer)");
  }
  if (!s.is_ok()) return s;
  if (t->msg.bytes != bytes) {
    return invalid_argument(g_.transport->describe(world_rank) + " sent " + std::to_string(t->msg.bytes) +
                            " bytes where this rank expects " + std::to_string(bytes) +
                            "; every member must call the same collectives in the same order with the same "
                            "counts and roots");
  }
  return std::move(t->msg);
}

Status all_reduce(CollectiveIo& io, float* buf, size_t count, ReduceOp op) {
  return all_reduce_any(io, buf, count, op);
}

Status all_reduce(CollectiveIo& io, double* buf, size_t count, ReduceOp op) {
  return all_reduce_any(io, buf, count, op);
}

// recv = this rank's slice of the sum. Step k sends the partial sum of
// segment me-k-1 and receives that of me-k-2, adding this rank's own part;
// the last step completes segment me.
Status reduce_scatter(CollectiveIo& io, const float* send, float* recv, size_t n) {
  const int p = io.group().size(), me = io.group().rank;
  if (p == 1) {
    if (send != recv) std::memmove(recv, send, n * sizeof(float));
    return Status::ok();
  }
  if (n == 0) return Status::ok();
  const int next = mod(me + 1, p), prev = mod(me - 1, p);
  std::vector<float> scratch;
  float* acc = recv;
  if (overlaps(recv, n * sizeof(float), send, n * size_t(p) * sizeof(float))) {
    scratch.resize(n);
    acc = scratch.data();
  }
  const size_t per = kChunkBytes / sizeof(float);
  const size_t nc = chunks(n, per);
  for (int k = 0; k < p - 1; ++k) {
    const int s = mod(me - k - 1, p), r = mod(me - k - 2, p);
    const float* out = k == 0 ? send + size_t(s) * n : acc;
    const float* own = send + size_t(r) * n;
    for (size_t c = 0; c < nc; ++c) {
      size_t off = c * per, cnt = std::min(per, n - off);
      LOOM_RETURN_IF_ERROR(io.send(next, out + off, cnt * sizeof(float)));
      LOOM_ASSIGN_OR_RETURN(Message m, io.recv(prev, cnt * sizeof(float)));
      const float* in = reinterpret_cast<const float*>(m.data.get());
      for (size_t i = 0; i < cnt; ++i) acc[off + i] = in[i] + own[off + i];
    }
  }
  if (acc != recv) std::memcpy(recv, acc, n * sizeof(float));
  return Status::ok();
}

Status all_gather_bytes(CollectiveIo& io, const void* send, void* recv, size_t block) {
  const int p = io.group().size(), me = io.group().rank;
  char* out = static_cast<char*>(recv);
  if (send != out + size_t(me) * block) std::memmove(out + size_t(me) * block, send, block);
  if (p == 1 || block == 0) return Status::ok();
  const int next = mod(me + 1, p), prev = mod(me - 1, p);
  const size_t nc = chunks(block, kChunkBytes);
  for (int k = 0; k < p - 1; ++k) {
    const int s = mod(me - k, p), r = mod(me - k - 1, p);
    for (size_t c = 0; c < nc; ++c) {
      size_t off = c * kChunkBytes, cnt = std::min(kChunkBytes, block - off);
      LOOM_RETURN_IF_ERROR(io.send(next, out + size_t(s) * block + off, cnt));
      LOOM_ASSIGN_OR_RETURN(Message m, io.recv(prev, cnt));
      std::memcpy(out + size_t(r) * block + off, m.data.get(), cnt);
    }
  }
  return Status::ok();
}

Status broadcast_bytes(CollectiveIo& io, void* buf, size_t bytes, int root) {
  const int p = io.group().size(), me = io.group().rank;
  if (p == 1 || bytes == 0) return Status::ok();
  char* b = static_cast<char*>(buf);
  if (bytes <= kSmallBytes) {
    if (me == root) {
      for (int k = 1; k < p; ++k) LOOM_RETURN_IF_ERROR(io.send(mod(root + k, p), b, bytes));
    } else {
      LOOM_ASSIGN_OR_RETURN(Message m, io.recv(root, bytes));
      std::memcpy(b, m.data.get(), bytes);
    }
    return Status::ok();
  }
  // A chain root -> root+1 -> ... in chunks: each rank forwards a chunk as
  // soon as it has it, so the root sends the buffer once.
  const int v = mod(me - root, p);
  const int next = mod(me + 1, p), prev = mod(me - 1, p);
  for (size_t c = 0; c < chunks(bytes, kChunkBytes); ++c) {
    size_t off = c * kChunkBytes, cnt = std::min(kChunkBytes, bytes - off);
    if (v > 0) {
      LOOM_ASSIGN_OR_RETURN(Message m, io.recv(prev, cnt));
      std::memcpy(b + off, m.data.get(), cnt);
    }
    if (v < p - 1) LOOM_RETURN_IF_ERROR(io.send(next, b + off, cnt));
  }
  return Status::ok();
}

Status all_to_all_bytes(CollectiveIo& io, const void* send, void* recv, size_t block) {
  const int p = io.group().size(), me = io.group().rank;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  std::vector<char> copy;
  if (in != out && overlaps(in, size_t(p) * block, out, size_t(p) * block)) {
    copy.assign(in, in + size_t(p) * block);  // the blocks still to send would be overwritten
    in = copy.data();
  }
  if (in != out) std::memmove(out + size_t(me) * block, in + size_t(me) * block, block);
  if (p == 1 || block == 0) return Status::ok();
  if (in == out) {
    copy.assign(in, in + size_t(p) * block);
    in = copy.data();
  }
  for (int k = 1; k < p; ++k) {
    const int to = mod(me + k, p), from = mod(me - k, p);
    LOOM_RETURN_IF_ERROR(io.send(to, in + size_t(to) * block, block));
    LOOM_ASSIGN_OR_RETURN(Message m, io.recv(from, block));
    std::memcpy(out + size_t(from) * block, m.data.get(), block);
  }
  return Status::ok();
}

Status barrier(CollectiveIo& io) {
  const int p = io.group().size(), me = io.group().rank;
  for (int d = 1; d < p; d *= 2) {
    LOOM_RETURN_IF_ERROR(io.send(mod(me + d, p), nullptr, 0));
    LOOM_RETURN_IF_ERROR(io.recv(mod(me - d, p), 0).status());
  }
  return Status::ok();
}

}  // namespace loom::exec::tcp
