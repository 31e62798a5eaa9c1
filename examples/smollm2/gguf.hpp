// gguf.hpp - a small reader for GGUF files (the llama.cpp model format): header, metadata,
// tensor directory, and dequantization of the tensor types SmolLM2's file uses (F32, F16, BF16,
// Q8_0, Q4_0, Q4_1) to fp32. Every malformed input becomes a smollm2::Error with a message that
// names the file and what is wrong; nothing is read outside the file.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace smollm2 {

// The one exception type of the example: bad files, bad flags, unsupported models.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// One metadata value. Numbers are kept both as int64 and double; arrays hold their elements.
struct GgufValue {
  GgufType type = GgufType::kU8;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  GgufType elem_type = GgufType::kU8;  // arrays only
  std::vector<GgufValue> array;
};

// ggml tensor types this reader knows by name; `supported` tells which it can dequantize.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };
const char* ggml_type_name(uint32_t type);
bool ggml_type_supported(uint32_t type);

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (input) dimension
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  int64_t elements() const;
};

class GgufFile {
 public:
  // Reads and validates the whole file; throws Error.
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }

  bool has(const std::string& key) const { return meta_.count(key) != 0; }
  const GgufValue& get(const std::string& key) const;  // throws Error when missing
  int64_t get_int(const std::string& key) const;        // an integer-typed value
  double get_float(const std::string& key) const;       // any numeric value
  std::string get_string(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;  // an array of strings
  std::vector<int64_t> get_ints(const std::string& key) const;         // an array of integers

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;
  // Dequantizes a tensor to fp32 in ggml order (dims[0] fastest). Throws Error on an unsupported
  // type or when `expect` (if not empty) differs from the tensor's dims.
  std::vector<float> dequantize(const std::string& name, const std::vector<int64_t>& expect = {}) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::vector<uint8_t> data_;
  uint64_t data_start_ = 0;
  std::map<std::string, GgufValue> meta_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

// fp16 -> fp32 (exact).
float half_to_float(uint16_t h);

}  // namespace smollm2
