// gguf.cpp - GGUF reader and dequantizers (see gguf.hpp).
#include "gguf.hpp"

#include <cstring>
#include <fstream>
#include <limits>

#include <kvq/numeric/bits.hpp>

namespace smollm2 {

float half_to_float(uint16_t h) { return kvq::f16_bits_to_f32(h); }

const char* ggml_type_name(uint32_t type) {
  switch (type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 30: return "BF16";
    default: return "unknown";
  }
}

bool ggml_type_supported(uint32_t type) {
  return type == 0 || type == 1 || type == 2 || type == 3 || type == 8 || type == 30;
}

namespace {

// Bytes per block and elements per block of the supported types.
struct BlockShape {
  uint64_t bytes, elems;
};
BlockShape block_shape(uint32_t type) {
  switch (type) {
    case 0: return {4, 1};
    case 1: return {2, 1};
    case 30: return {2, 1};
    case 2: return {18, 32};  // fp16 d, 16 bytes of nibbles
    case 3: return {20, 32};  // fp16 d, fp16 m, 16 bytes of nibbles
    case 8: return {34, 32};  // fp16 d, 32 int8
    default: return {0, 0};
  }
}

// A bounds-checked cursor over the file bytes.
class Cursor {
 public:
  Cursor(const std::vector<uint8_t>& d, const std::string& path) : d_(d), path_(path) {}
  uint64_t pos() const { return pos_; }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(d_.data() + pos_), size_t(n));
    pos_ += n;
    return s;
  }
  void need(uint64_t n, const char* what) const {
    if (n > d_.size() - pos_)
      throw Error("gguf: " + path_ + ": file is truncated or corrupt (reading " + what + " at byte " +
                  std::to_string(pos_) + " needs " + std::to_string(n) + " bytes, file has " +
                  std::to_string(d_.size()) + ")");
  }
  uint64_t left() const { return d_.size() - pos_; }

 private:
  const std::vector<uint8_t>& d_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Cursor& c, GgufType type, const std::string& path, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kU8: v.i = c.read<uint8_t>("u8"); break;
    case GgufType::kI8: v.i = c.read<int8_t>("i8"); break;
    case GgufType::kU16: v.i = c.read<uint16_t>("u16"); break;
    case GgufType::kI16: v.i = c.read<int16_t>("i16"); break;
    case GgufType::kU32: v.i = c.read<uint32_t>("u32"); break;
    case GgufType::kI32: v.i = c.read<int32_t>("i32"); break;
    case GgufType::kU64: {
      const uint64_t u = c.read<uint64_t>("u64");
      v.i = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(u);
      break;
    }
    case GgufType::kI64: v.i = c.read<int64_t>("i64"); break;
    case GgufType::kF32: v.f = c.read<float>("f32"); break;
    case GgufType::kF64: v.f = c.read<double>("f64"); break;
    case GgufType::kBool: v.i = c.read<uint8_t>("bool") != 0; break;
    case GgufType::kString: v.s = c.read_string("string"); break;
    case GgufType::kArray: {
      if (depth > 2) throw Error("gguf: " + path + ": arrays nested too deeply in key '" + key + "'");
      const uint32_t et = c.read<uint32_t>("array type");
      if (et > 12) throw Error("gguf: " + path + ": unknown array element type " + std::to_string(et) + " in key '" + key + "'");
      const uint64_t n = c.read<uint64_t>("array length");
      if (n > c.left())
        throw Error("gguf: " + path + ": file is truncated or corrupt: array length " + std::to_string(n) + " of key '" + key +
                    "' exceeds the file");
      v.elem_type = GgufType(et);
      v.array.reserve(size_t(n));
      for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(c, GgufType(et), path, key, depth + 1));
      break;
    }
  }
  if (type == GgufType::kF32 || type == GgufType::kF64) v.i = int64_t(v.f);
  else if (type != GgufType::kString && type != GgufType::kArray) v.f = double(v.i);
  return v;
}

}  // namespace

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("gguf: cannot open '" + path + "' (missing file or no permission)");
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error("gguf: cannot read '" + path + "'");
  data_.resize(size_t(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(data_.data()), size)) throw Error("gguf: read error on '" + path + "'");

  Cursor c(data_, path_);
  if (data_.size() < 4 || std::memcmp(data_.data(), "GGUF", 4) != 0)
    throw Error("gguf: " + path + ": not a GGUF file (bad magic; expected the bytes 'GGUF' at the start)");
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    throw Error("gguf: " + path + ": unsupported GGUF version " + std::to_string(version_) + " (2 and 3 are supported)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each metadata entry and tensor record takes at least 8 + 4 bytes: reject absurd counts early.
  if (n_kv > c.left() / 12 || n_tensors > c.left() / 12)
    throw Error("gguf: " + path + ": file is truncated or corrupt: header counts (" + std::to_string(n_tensors) + " tensors, " +
                std::to_string(n_kv) + " metadata entries) exceed the file size");
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string("metadata key");
    const uint32_t t = c.read<uint32_t>("metadata type");
    if (t > 12) throw Error("gguf: " + path + ": unknown metadata type " + std::to_string(t) + " for key '" + key + "'");
    meta_[key] = read_value(c, GgufType(t), path_, key, 0);
  }
  uint64_t alignment = 32;
  if (has("general.alignment")) {
    const int64_t a = get_int("general.alignment");
    if (a <= 0 || (a & (a - 1)) != 0 || a > 65536)
      throw Error("gguf: " + path + ": bad general.alignment " + std::to_string(a));
    alignment = uint64_t(a);
  }
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.read_string("tensor name");
    const uint32_t nd = c.read<uint32_t>("tensor rank");
    if (nd == 0 || nd > 4) throw Error("gguf: " + path + ": tensor '" + t.name + "' has rank " + std::to_string(nd));
    uint64_t elems = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = c.read<uint64_t>("tensor dim");
      if (n == 0 || n > (uint64_t(1) << 40) || elems > (uint64_t(1) << 40) / n)
        throw Error("gguf: " + path + ": tensor '" + t.name + "' has an invalid shape");
      elems *= n;
      t.dims.push_back(int64_t(n));
    }
    t.type = c.read<uint32_t>("tensor type");
    t.offset = c.read<uint64_t>("tensor offset");
    const BlockShape b = block_shape(t.type);
    if (b.elems != 0) {
      if (uint64_t(t.dims[0]) % b.elems != 0)
        throw Error("gguf: " + path + ": tensor '" + t.name + "' row length is not a multiple of its block size");
      t.bytes = elems / b.elems * b.bytes;
    }
    if (by_name_.count(t.name)) throw Error("gguf: " + path + ": duplicate tensor '" + t.name + "'");
    by_name_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  data_start_ = (c.pos() + alignment - 1) / alignment * alignment;
  for (const GgufTensor& t : tensors_) {
    if (t.offset % alignment != 0)
      throw Error("gguf: " + path + ": tensor '" + t.name + "' data is not aligned");
    if (data_start_ > data_.size() || t.offset > data_.size() - data_start_ || t.bytes > data_.size() - data_start_ - t.offset)
      throw Error("gguf: " + path + ": file is truncated: the data of tensor '" + t.name + "' ends past the end of the file (" +
                  std::to_string(data_.size()) + " bytes)");
  }
}

const GgufValue& GgufFile::get(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) throw Error("gguf: " + path_ + ": missing metadata key '" + key + "'");
  return it->second;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type == GgufType::kString || v.type == GgufType::kArray || v.type == GgufType::kF32 || v.type == GgufType::kF64)
    throw Error("gguf: " + path_ + ": metadata key '" + key + "' is not an integer");
  return v.i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type == GgufType::kString || v.type == GgufType::kArray)
    throw Error("gguf: " + path_ + ": metadata key '" + key + "' is not a number");
  return v.f;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufType::kString) throw Error("gguf: " + path_ + ": metadata key '" + key + "' is not a string");
  return v.s;
}

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufType::kArray || v.elem_type != GgufType::kString)
    throw Error("gguf: " + path_ + ": metadata key '" + key + "' is not an array of strings");
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const GgufValue& e : v.array) out.push_back(e.s);
  return out;
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufType::kArray || v.elem_type == GgufType::kString || v.elem_type == GgufType::kArray)
    throw Error("gguf: " + path_ + ": metadata key '" + key + "' is not an array of numbers");
  std::vector<int64_t> out;
  out.reserve(v.array.size());
  for (const GgufValue& e : v.array) out.push_back(e.i);
  return out;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::vector<float> GgufFile::dequantize(const std::string& name, const std::vector<int64_t>& expect) const {
  const GgufTensor* t = find(name);
  if (!t) throw Error("gguf: " + path_ + ": missing tensor '" + name + "'");
  auto shape = [](const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  };
  if (!expect.empty() && expect != t->dims)
    throw Error("gguf: " + path_ + ": tensor '" + name + "' has shape " + shape(t->dims) + ", expected " + shape(expect));
  if (!ggml_type_supported(t->type))
    throw Error("gguf: " + path_ + ": tensor '" + name + "' has type " + ggml_type_name(t->type) + " (" +
                std::to_string(t->type) + "), which this example does not dequantize (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0)");
  const uint8_t* p = data_.data() + data_start_ + t->offset;
  const int64_t n = t->elements();
  std::vector<float> out(static_cast<size_t>(n));
  auto u16 = [](const uint8_t* q) {
    uint16_t h;
    std::memcpy(&h, q, 2);
    return h;
  };
  switch (t->type) {
    case 0: std::memcpy(out.data(), p, size_t(n) * 4); break;
    case 1:
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = half_to_float(u16(p + 2 * i));
      break;
    case 30:
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = kvq::bf16_bits_to_f32(u16(p + 2 * i));
      break;
    case 2:
    case 3:
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + b * (t->type == 2 ? 18 : 20);
        const float d = half_to_float(u16(blk));
        const float m = t->type == 3 ? half_to_float(u16(blk + 2)) : 0.0f;
        const uint8_t* qs = blk + (t->type == 2 ? 2 : 4);
        float* o = out.data() + b * 32;
        for (int j = 0; j < 16; ++j) {
          if (t->type == 2) {  // Q4_0: (q - 8) * d, as ggml computes it
            o[j] = float(int(qs[j] & 0xF) - 8) * d;
            o[j + 16] = float(int(qs[j] >> 4) - 8) * d;
          } else {  // Q4_1: q * d + m
            o[j] = float(qs[j] & 0xF) * d + m;
            o[j + 16] = float(qs[j] >> 4) * d + m;
          }
        }
      }
      break;
    case 8:
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + b * 34;
        const float d = half_to_float(u16(blk));
        for (int j = 0; j < 32; ++j) out[size_t(b * 32 + j)] = float(int8_t(blk[2 + j])) * d;
      }
      break;
    default: break;
  }
  return out;
}

}  // namespace smollm2
