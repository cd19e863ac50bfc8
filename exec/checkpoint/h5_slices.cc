// HDF5 slice files: see h5_slices.h for the layout.
#include "exec/checkpoint/h5_slices.h"

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

namespace loom::ckpt {

namespace {

std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

// Silences HDF5's automatic printing; the thread-safe build keeps that
// setting (and the error stack) per thread, so once per thread.
void h5_init() {
  thread_local bool done = false;
  if (!done) {
    // No HDF5 clean-up at exit: a file whose close failed (the disk full, the
    // file size limit hit) is still open there, and HDF5's atexit handler
    // crashed closing it again after loom had reported the error. Every file
    // is closed (or failed) before its write returns; the OS does the rest.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

// Collects the two innermost descriptions of the error stack; when HDF5
// quotes the OS ("errno = 28, error message = 'No space left on device'"),
// that part alone.
herr_t walk_cb(unsigned n, const H5E_error2_t* e, void* client) {
  auto* s = static_cast<std::string*>(client);
  if (n >= 2) return 0;
  std::string desc = e->desc ? e->desc : "";
  auto pos = desc.find("errno = ");
  if (pos != std::string::npos) {
    auto end = desc.find("', ", pos);
    desc = desc.substr(pos, end == std::string::npos ? std::string::npos : end + 1 - pos);
  }
  if (!s->empty()) s->append("; ");
  s->append(std::string(e->func_name ? e->func_name : "?") + ": " + desc);
  return 0;
}

Status h5_error(const std::string& path, const char* call, const char* file, int line) {
  std::string stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &stack);
  H5Eclear2(H5E_DEFAULT);
  std::string fn(call);
  fn = fn.substr(0, fn.find('('));
  char where[64];
  std::snprintf(where, sizeof where, " [%s:%d]", file, line);
  return io_error(path + ": HDF5 " + fn + " failed" + (stack.empty() ? "" : " (" + stack + ")") + where);
}

#define LOOM_H5_CHECK(expr, path)                                            \
  do {                                                                       \
    if ((expr) < 0) return h5_error((path), #expr, __FILE__, __LINE__);      \
  } while (0)

// Closes an hid_t with the right function at scope exit.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { close(); }
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  herr_t close() {
    herr_t r = 0;
    if (id_ >= 0) r = closer_(id_);
    id_ = -1;
    return r;
  }

 private:
  hid_t id_;
  Closer closer_;
};

Handle file_access_props() {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  // Locking fails on many network file systems and buys nothing here: a file
  // is written by one rank and read only after the commit.
  if (fapl.valid()) H5Pset_file_locking(fapl.get(), false, true);
#endif
  return fapl;
}

Status write_attr(hid_t obj, const char* name, const std::vector<int64_t>& v, const std::string& path) {
  hsize_t n = v.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  LOOM_H5_CHECK(space.get(), path);
  Handle attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  LOOM_H5_CHECK(attr.get(), path);
  LOOM_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, v.data()), path);
  return Status::ok();
}

Status read_attr(hid_t obj, const char* name, std::vector<int64_t>* v, const std::string& path) {
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  LOOM_H5_CHECK(attr.get(), path);
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  LOOM_H5_CHECK(space.get(), path);
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  LOOM_H5_CHECK(n, path);
  if (n < 1 || n > 2) return parse_error(path + ": attribute " + name + " has " + std::to_string(n) + " values");
  v->assign(static_cast<size_t>(n), 0);
  LOOM_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, v->data()), path);
  return Status::ok();
}

Status check_slice(const TensorSlice& s) {
  const size_t rank = s.global_shape.size();
  if (rank < 1 || rank > 2 || s.offset.size() != rank || s.extent.size() != rank)
    return invalid_argument("checkpoint slice " + s.name + ": global_shape/offset/extent must all be 1-D or 2-D");
  int64_t n = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (s.offset[d] < 0 || s.extent[d] < 0 || s.offset[d] + s.extent[d] > s.global_shape[d])
      return invalid_argument("checkpoint slice " + s.name + ": offset+extent exceeds the global shape in dim " +
                              std::to_string(d));
    n *= s.extent[d];
  }
  if (static_cast<int64_t>(s.data.size()) != n)
    return invalid_argument("checkpoint slice " + s.name + ": holds " + std::to_string(s.data.size()) +
                            " values, extent needs " + std::to_string(n));
  return Status::ok();
}

herr_t list_cb(hid_t, const char* link, const H5L_info_t*, void* client) {
  static_cast<std::vector<std::string>*>(client)->push_back(link);
  return 0;
}

}  // namespace

std::string escape_h5_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '%') out += "%25";
    else if (c == '/') out += "%2F";
    else out += c;
  }
  return out;
}

std::string unescape_h5_name(const std::string& link) {
  std::string out;
  for (size_t i = 0; i < link.size(); ++i) {
    if (link.compare(i, 3, "%25") == 0) {
      out += '%';
      i += 2;
    } else if (link.compare(i, 3, "%2F") == 0) {
      out += '/';
      i += 2;
    }
    else out += link[i];
  }
  return out;
}

Status write_h5_slices(const std::string& path, const std::vector<TensorSlice>& slices) {
  for (const auto& s : slices) LOOM_RETURN_IF_ERROR(check_slice(s));
  std::lock_guard<std::mutex> lock(h5_mutex());
  h5_init();
  Handle fapl = file_access_props();
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  LOOM_H5_CHECK(file.get(), path);
  for (const auto& s : slices) {
    std::vector<hsize_t> dims(s.extent.begin(), s.extent.end());
    Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    LOOM_H5_CHECK(space.get(), path);
    const std::string link = escape_h5_name(s.name);
    Handle ds(H5Dcreate2(file.get(), link.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT),
              H5Dclose);
    if (!ds.valid()) return h5_error(path, ("H5Dcreate2 " + link).c_str(), __FILE__, __LINE__);
    if (!s.data.empty())
      LOOM_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data.data()), path);
    LOOM_RETURN_IF_ERROR(write_attr(ds.get(), "global_shape", s.global_shape, path));
    LOOM_RETURN_IF_ERROR(write_attr(ds.get(), "offset", s.offset, path));
    LOOM_RETURN_IF_ERROR(write_attr(ds.get(), "extent", s.extent, path));
    Handle str(H5Tcopy(H5T_C_S1), H5Tclose);
    LOOM_H5_CHECK(H5Tset_size(str.get(), 7), path);
    Handle scalar(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attr(H5Acreate2(ds.get(), "dtype", str.get(), scalar.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    LOOM_H5_CHECK(attr.get(), path);
    LOOM_H5_CHECK(H5Awrite(attr.get(), str.get(), "float32"), path);
    LOOM_H5_CHECK(attr.close(), path);
    LOOM_H5_CHECK(ds.close(), path);
  }
  // Closing flushes the metadata cache: a full disk usually shows up here.
  LOOM_H5_CHECK(file.close(), path);
  return Status::ok();
}

Result<std::vector<SliceInfo>> list_h5_slices(const std::string& path) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  h5_init();
  Handle fapl = file_access_props();
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  LOOM_H5_CHECK(file.get(), path);
  std::vector<std::string> links;
  LOOM_H5_CHECK(H5Literate(file.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, list_cb, &links), path);
  std::vector<SliceInfo> out;
  for (const auto& link : links) {
    Handle ds(H5Dopen2(file.get(), link.c_str(), H5P_DEFAULT), H5Dclose);
    LOOM_H5_CHECK(ds.get(), path);
    SliceInfo info;
    info.name = unescape_h5_name(link);
    LOOM_RETURN_IF_ERROR(read_attr(ds.get(), "global_shape", &info.global_shape, path));
    LOOM_RETURN_IF_ERROR(read_attr(ds.get(), "offset", &info.offset, path));
    LOOM_RETURN_IF_ERROR(read_attr(ds.get(), "extent", &info.extent, path));
    if (info.offset.size() != info.global_shape.size() || info.extent.size() != info.global_shape.size())
      return parse_error(path + ": " + info.name + ": offset/extent/global_shape ranks differ");
    // The attributes are data from the file: checked before any arithmetic
    // (a reader forms offset + extent and products of the shape).
    constexpr int64_t kMaxDim = int64_t{1} << 32, kMaxElements = int64_t{1} << 48;
    int64_t elements = 1;
    for (size_t d = 0; d < info.global_shape.size(); ++d) {
      const int64_t g = info.global_shape[d], o = info.offset[d], e = info.extent[d];
      if (g < 0 || g > kMaxDim)
        return parse_error(path + ": " + info.name + ": global_shape[" + std::to_string(d) + "] = " +
                           std::to_string(g) + " is out of range (0..2^32)");
      if (o < 0 || e < 0 || o > g || e > g - o)
        return parse_error(path + ": " + info.name + ": the slice (offset " + std::to_string(o) + ", extent " +
                           std::to_string(e) + ") lies outside the global shape " + std::to_string(g) + " in dim " +
                           std::to_string(d));
      if (g != 0 && elements > kMaxElements / g)
        return parse_error(path + ": " + info.name + ": the global shape has more than 2^48 elements");
      elements *= g;
    }
    // The dataset itself must hold exactly the extent it claims.
    Handle space(H5Dget_space(ds.get()), H5Sclose);
    LOOM_H5_CHECK(space.get(), path);
    const int ndims = H5Sget_simple_extent_ndims(space.get());
    LOOM_H5_CHECK(ndims, path);
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(ndims, 0)));
    if (ndims > 0) LOOM_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), path);
    bool same = dims.size() == info.extent.size();
    for (size_t d = 0; same && d < dims.size(); ++d) same = dims[d] == static_cast<hsize_t>(info.extent[d]);
    if (!same)
      return parse_error(path + ": " + info.name + ": the dataset's shape differs from its extent attribute");
    out.push_back(std::move(info));
  }
  return out;
}

Status read_h5_slice_region(const std::string& path, const std::string& name,
                            const std::vector<int64_t>& local_offset, const std::vector<int64_t>& count,
                            float* out) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  h5_init();
  Handle fapl = file_access_props();
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  LOOM_H5_CHECK(file.get(), path);
  const std::string link = escape_h5_name(name);
  Handle ds(H5Dopen2(file.get(), link.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) return h5_error(path, ("H5Dopen2 " + link).c_str(), __FILE__, __LINE__);
  Handle fspace(H5Dget_space(ds.get()), H5Sclose);
  LOOM_H5_CHECK(fspace.get(), path);
  const int rank = H5Sget_simple_extent_ndims(fspace.get());
  if (rank != static_cast<int>(count.size()) || local_offset.size() != count.size())
    return invalid_argument(path + ": " + name + ": region rank " + std::to_string(count.size()) +
                            " differs from the dataset's " + std::to_string(rank));
  hsize_t total = 1;
  for (int64_t c : count) total *= static_cast<hsize_t>(c);
  if (total == 0) return Status::ok();
  std::vector<hsize_t> start(local_offset.begin(), local_offset.end()), cnt(count.begin(), count.end());
  LOOM_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr),
                path);
  Handle mspace(H5Screate_simple(rank, cnt.data(), nullptr), H5Sclose);
  LOOM_H5_CHECK(mspace.get(), path);
  LOOM_H5_CHECK(H5Dread(ds.get(), H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, out), path);
  return Status::ok();
}

}  // namespace loom::ckpt
