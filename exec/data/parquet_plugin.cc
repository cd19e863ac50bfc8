// libloom_parquet.so: Parquet input through Apache Arrow's C++ reader, loaded
// at run time by ParquetTextFile::open (parquet_reader.h explains why a plugin).
#include "exec/data/parquet_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>

namespace loom::data {

namespace fs = std::filesystem;

namespace {

bool is_text_type(const arrow::DataType& t) {
  switch (t.id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_BINARY:
    case arrow::Type::BINARY_VIEW:
      return true;
    case arrow::Type::DICTIONARY:
      return is_text_type(*static_cast<const arrow::DictionaryType&>(t).value_type());
    default:
      return false;
  }
}

bool is_number_type(const arrow::DataType& t) {
  return arrow::is_integer(t.id()) || t.id() == arrow::Type::FLOAT || t.id() == arrow::Type::DOUBLE ||
         t.id() == arrow::Type::BOOL;
}

// The bytes of element i of a text array; false for a null.
bool text_at(const arrow::Array& a, int64_t i, std::string_view* out) {
  if (a.IsNull(i)) return false;
  switch (a.type_id()) {
    case arrow::Type::STRING: *out = static_cast<const arrow::StringArray&>(a).GetView(i); return true;
    case arrow::Type::LARGE_STRING: *out = static_cast<const arrow::LargeStringArray&>(a).GetView(i); return true;
    case arrow::Type::STRING_VIEW: *out = static_cast<const arrow::StringViewArray&>(a).GetView(i); return true;
    case arrow::Type::BINARY: *out = static_cast<const arrow::BinaryArray&>(a).GetView(i); return true;
    case arrow::Type::LARGE_BINARY: *out = static_cast<const arrow::LargeBinaryArray&>(a).GetView(i); return true;
    case arrow::Type::BINARY_VIEW: *out = static_cast<const arrow::BinaryViewArray&>(a).GetView(i); return true;
    case arrow::Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(a);
      return text_at(*d.dictionary(), d.GetValueIndex(i), out);
    }
    default: return false;
  }
}

template <typename ArrayT>
double number_of(const arrow::Array& a, int64_t i) {
  return static_cast<double>(static_cast<const ArrayT&>(a).Value(i));
}

// The value of element i of a field column.
FieldValue field_at(const arrow::Array& a, int64_t i) {
  FieldValue v;
  if (a.IsNull(i)) return v;
  if (text_at(a, i, &v.str)) {
    v.kind = FieldValue::Kind::kString;
    return v;
  }
  v.kind = FieldValue::Kind::kNumber;
  switch (a.type_id()) {
    case arrow::Type::BOOL: v.num = static_cast<const arrow::BooleanArray&>(a).Value(i) ? 1 : 0; break;
    case arrow::Type::INT8: v.num = number_of<arrow::Int8Array>(a, i); break;
    case arrow::Type::INT16: v.num = number_of<arrow::Int16Array>(a, i); break;
    case arrow::Type::INT32: v.num = number_of<arrow::Int32Array>(a, i); break;
    case arrow::Type::INT64: v.num = number_of<arrow::Int64Array>(a, i); break;
    case arrow::Type::UINT8: v.num = number_of<arrow::UInt8Array>(a, i); break;
    case arrow::Type::UINT16: v.num = number_of<arrow::UInt16Array>(a, i); break;
    case arrow::Type::UINT32: v.num = number_of<arrow::UInt32Array>(a, i); break;
    case arrow::Type::UINT64: v.num = number_of<arrow::UInt64Array>(a, i); break;
    case arrow::Type::FLOAT: v.num = number_of<arrow::FloatArray>(a, i); break;
    case arrow::Type::DOUBLE: v.num = number_of<arrow::DoubleArray>(a, i); break;
    default: v.kind = FieldValue::Kind::kMissing; break;
  }
  return v;
}

std::string column_list(const arrow::Schema& s) {
  std::string out;
  for (const auto& f : s.fields()) out += (out.empty() ? "" : ", ") + f->name() + " (" + f->type()->ToString() + ")";
  return out;
}

}  // namespace

class ArrowTextFile final : public ParquetTextFile {
 public:
  int row_groups() const override { return meta->num_row_groups(); }
  int64_t rows() const override { return meta->num_rows(); }
  int64_t row_group_rows(int g) const override { return meta->RowGroup(g)->num_rows(); }
  int64_t row_group_first_row(int g) const override { return first_row[static_cast<size_t>(g)]; }
  int64_t row_group_compressed_bytes(int g) const override;
  Status read_row_group(int g, int64_t batch_rows, const std::function<Status(const ParquetRow&)>& fn,
                        const std::function<Status(bool last)>& batch_done) const override;
  const std::string& path() const override { return path_; }

  std::string path_;
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::shared_ptr<parquet::FileMetaData> meta;
  std::string text_column;
  std::vector<std::string> field_columns;
  std::vector<int> leaves;  // leaf column indices to read: text first, then the fields (deduplicated)
  std::vector<int64_t> first_row;
};

namespace {

Result<std::unique_ptr<ParquetTextFile>> open_arrow(const std::string& path, const std::string& text_column,
                                                    const std::vector<std::string>& field_columns) {
  auto impl = std::make_unique<ArrowTextFile>();
  impl->path_ = path;
  impl->text_column = text_column;
  impl->field_columns = field_columns;
  try {
    // Pages are read through a 1 MiB buffer, not as whole column chunks, and
    // nothing is pre-buffered: memory stays bounded by a page and a batch.
    parquet::ReaderProperties props = parquet::default_reader_properties();
    props.enable_buffered_stream();
    props.set_buffer_size(1 << 20);
    parquet::ArrowReaderProperties aprops(/*use_threads=*/false);
    aprops.set_pre_buffer(false);
    parquet::arrow::FileReaderBuilder builder;
    auto st = builder.OpenFile(path, /*memory_map=*/false, props);
    if (!st.ok()) return parse_error(path + ": not a readable Parquet file (" + st.ToString() + ")");
    builder.properties(aprops);
    auto reader = builder.Build();
    if (!reader.ok()) return parse_error(path + ": not a readable Parquet file (" + reader.status().ToString() + ")");
    impl->reader = std::move(*reader);
    impl->meta = impl->reader->parquet_reader()->metadata();
    std::shared_ptr<arrow::Schema> schema;
    st = impl->reader->GetSchema(&schema);
    if (!st.ok()) return parse_error(path + ": unreadable schema (" + st.ToString() + ")");
    const auto& manifest = impl->reader->manifest();
    auto leaf_of = [&](const std::string& name, bool text) -> Result<int> {
      int i = schema->GetFieldIndex(name);
      if (i < 0)
        return invalid_argument(path + ": no column \"" + name + "\" (" +
                                (schema->GetFieldByName(name) ? "the name is ambiguous" : "columns: " + column_list(*schema)) +
                                ")" + (text ? "; name the text column with --text-key" : ""));
      const arrow::DataType& t = *schema->field(i)->type();
      bool ok = text ? is_text_type(t) : (is_text_type(t) || is_number_type(t));
      int leaf = manifest.schema_fields[static_cast<size_t>(i)].column_index;
      if (!ok || leaf < 0)
        return invalid_argument(path + ": column \"" + name + "\" is " + t.ToString() + "; " +
                                (text ? "the text column must be a string (or binary) column"
                                      : "a filter column must be a string, boolean or number column"));
      return leaf;
    };
    LOOM_ASSIGN_OR_RETURN(int text_leaf, leaf_of(text_column, true));
    impl->leaves.push_back(text_leaf);
    for (const std::string& f : field_columns) {
      LOOM_ASSIGN_OR_RETURN(int leaf, leaf_of(f, false));
      if (std::find(impl->leaves.begin(), impl->leaves.end(), leaf) == impl->leaves.end()) impl->leaves.push_back(leaf);
    }
  } catch (const std::exception& e) {
    return parse_error(path + ": not a readable Parquet file (" + e.what() + ")");
  }
  int64_t row = 0;
  for (int g = 0; g < impl->meta->num_row_groups(); ++g) {
    impl->first_row.push_back(row);
    row += impl->meta->RowGroup(g)->num_rows();
  }
  return std::unique_ptr<ParquetTextFile>(std::move(impl));
}

const ParquetPlugin kPlugin{kParquetPluginAbi, open_arrow};

}  // namespace

int64_t ArrowTextFile::row_group_compressed_bytes(int g) const {
  auto rg = meta->RowGroup(g);
  int64_t n = 0;
  for (int c = 0; c < rg->num_columns(); ++c) n += rg->ColumnChunk(c)->total_compressed_size();
  return n;
}
Status ArrowTextFile::read_row_group(int g, int64_t batch_rows, const std::function<Status(const ParquetRow&)>& fn,
                                       const std::function<Status(bool last)>& batch_done) const {
  const std::string where = path_ + ": row group " + std::to_string(g);
  try {
    reader->set_batch_size(batch_rows);
    auto rb = reader->GetRecordBatchReader({g}, leaves);
    if (!rb.ok()) return parse_error(where + ": " + rb.status().ToString());
    int64_t row = first_row[static_cast<size_t>(g)];
    const int64_t end_row = row + row_group_rows(g);
    std::vector<FieldValue> fields(field_columns.size());
    std::shared_ptr<arrow::RecordBatch> batch;
    for (;;) {
      auto st = (*rb)->ReadNext(&batch);
      if (!st.ok()) return parse_error(where + ": " + st.ToString() + " (a corrupt or truncated file)");
      if (!batch) break;
      std::shared_ptr<arrow::Array> text = batch->GetColumnByName(text_column);
      std::vector<std::shared_ptr<arrow::Array>> cols;
      for (const std::string& f : field_columns) cols.push_back(batch->GetColumnByName(f));
      if (!text) return internal_error(where + ": the text column is missing from a record batch");
      for (int64_t i = 0; i < batch->num_rows(); ++i, ++row) {
        std::string_view view;
        bool present = text_at(*text, i, &view);
        for (size_t k = 0; k < cols.size(); ++k) fields[k] = cols[k] ? field_at(*cols[k], i) : FieldValue{};
        ParquetRow r{row, present ? &view : nullptr, &fields};
        LOOM_RETURN_IF_ERROR(fn(r));
      }
      LOOM_RETURN_IF_ERROR(batch_done(row == end_row));
    }
    if (row != end_row)
      return parse_error(where + ": " + std::to_string(row - first_row[static_cast<size_t>(g)]) + " rows read of " +
                         std::to_string(row_group_rows(g)) + " (a corrupt or truncated file)");
    if (row_group_rows(g) == 0) LOOM_RETURN_IF_ERROR(batch_done(true));
  } catch (const std::exception& e) {
    return parse_error(where + ": " + e.what() + " (a corrupt or truncated file)");
  }
  return Status::ok();
}

}  // namespace loom::data

extern "C" __attribute__((visibility("default"))) const loom::data::ParquetPlugin* loom_parquet_plugin() {
  return &loom::data::kPlugin;
}
