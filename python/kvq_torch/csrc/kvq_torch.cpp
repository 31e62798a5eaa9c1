// kvq_torch.cpp - kvq's operations as PyTorch operators (TORCH_LIBRARY namespace "kvq").
//
// The only translation unit that includes torch. Every op checks its tensors (dtype, device,
// shape, contiguity, alignment) and the configuration before anything runs, so a refused call
// leaves the cache untouched; kvq's own host-side checks come next (a Status). A refusal raises
// ValueError "kvq.<op>: <Status name>: <argument>: <why>" (kvq_torch turns it into KvqError);
// a CUDA error raises RuntimeError with the cudaError_t's text (kvq::last_cuda_error()).
//
// CUDA kernels: through kvq::Handle (kvq/runtime/handle.hpp) of the configurations compiled into
// this build (kvq_instances.hpp, written by cmake/kvq_instances.cmake from the package's list), on
// the current CUDA stream, without synchronising or allocating: a step can be captured in a CUDA
// graph. CPU kernels: kvq's host reference (host_ops.hpp).
//
// Cache tensors (one layer), as kvq/cache/view.hpp lays them out:
//   cold        uint8 [num_pages][num_kv_heads][record_bytes]
//   hot_k/v     T [num_slots][R + P][num_kv_heads][D]        (R from the shape)
//   sink_k/v    T [num_slots][sinks][num_kv_heads][D] or None (sinks from the shape)
//   block_table int32 [batch][max_pages_per_seq]; hot_slot, seq_len, seq_cold int32 [batch]
//   flags       int32 [1] (kvq's uint32 flags word)
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <kvq/cache/planner.hpp>
#include <kvq/cache/rollback.hpp>
#include <kvq/cache/window.hpp>
#include <kvq/quant/rotation.hpp>

#include "host_ops.hpp"

#ifdef KVQ_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include "device_ops.hpp"
#include "kvq_instances.hpp"
#endif

namespace kvq_torch {
namespace {

using at::Tensor;

// ---- errors -------------------------------------------------------------------------------------

// Messages are built with std::string and std::to_string, never with iostreams: a toolchain that
// links libstdc++ statically into the extension (a g++ wrapper adding -static-libstdc++) can leave
// that copy's locale uninitialised, and formatting a number through a stream then crashes.
[[noreturn]] void refuse(const char* op, kvq::Status st, const std::string& arg, const std::string& why) {
  TORCH_CHECK_VALUE(false, std::string("kvq.") + op + ": " + status_name(st) + ": " + arg + ": " + why);
}

// The argument a kvq Status most likely concerns, for statuses kvq itself returned.
const char* argument_of(kvq::Status st) {
  switch (st) {
    case kvq::Status::kInvalidLength: return "seq_len";
    case kvq::Status::kBlockTableOverflow: return "block_table";
    case kvq::Status::kInvalidPageId: return "block_table";
    case kvq::Status::kInvalidHotSlot: return "hot_slot";
    case kvq::Status::kConfigMismatch: return "config";
    case kvq::Status::kNotInstantiated: return "config";
    case kvq::Status::kWorkspaceTooSmall: return "workspace";
    default: return "-";
  }
}

void check_status(const char* op, kvq::Status st) {
  if (st == kvq::Status::kSuccess) return;
#ifdef KVQ_TORCH_CUDA
  if (st == kvq::Status::kCudaError) {
    const auto err = static_cast<cudaError_t>(kvq::last_cuda_error());
    TORCH_CHECK(false, "kvq.", op, ": kCudaError: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  }
#endif
  refuse(op, st, argument_of(st), kvq::to_string(st));
}

// ---- configurations -------------------------------------------------------------------------------

std::string compiled_list() {
  std::string s;
  for (const std::string& c : compiled_configs()) s += (s.empty() ? "" : ", ") + c;
  return s.empty() ? "none" : s;
}

struct Config {
  kvq::ConfigKey key;
  size_t record_bytes;
  at::ScalarType dtype;
#ifdef KVQ_TORCH_CUDA
  kvq::Handle handle;
#endif
};

// The compiled configuration named by `text` (cached: the ops parse it once per string).
const Config& config_of(const char* op, const std::string& text) {
  static std::mutex mu;
  static std::unordered_map<std::string, Config> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(text);
  if (it != cache.end()) return it->second;
  Config c{};
  std::string error;
  if (!parse_config(text, &c.key, &error)) refuse(op, kvq::Status::kConfigMismatch, "config", "'" + text + "': " + error);
  c.record_bytes = record_bytes_of(c.key);
  if (c.record_bytes == 0) refuse(op, kvq::Status::kConfigMismatch, "config", "'" + text + "' is not a valid kvq layout");
  if (!is_compiled(c.key))
    refuse(op, kvq::Status::kNotInstantiated, "config",
           "'" + config_string(c.key) + "' was not compiled into kvq_torch; compiled: " + compiled_list() +
               " (rebuild with KVQ_TORCH_CONFIGS naming it)");
  c.dtype = c.key.dtype == kvq::DType::kBF16 ? at::kBFloat16 : at::kHalf;
#ifdef KVQ_TORCH_CUDA
  check_status(op, kvq_torch_instances::make_handle(c.key, &c.handle));
#endif
  return cache.emplace(text, c).first->second;
}

// ---- tensor checks --------------------------------------------------------------------------------

std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// dims: expected sizes, -1 for any. align: byte alignment of the data pointer.
void check_tensor(const char* op, const char* name, const Tensor& t, at::ScalarType dtype, const at::Device& device,
                  std::vector<int64_t> dims, int64_t align = 4) {
  if (!t.defined()) refuse(op, kvq::Status::kNullPointer, name, "missing tensor");
  if (t.scalar_type() != dtype)
    refuse(op, kvq::Status::kInvalidShape, name,
           std::string("expected dtype ") + c10::toString(dtype) + ", got " + c10::toString(t.scalar_type()));
  if (t.device() != device)
    refuse(op, kvq::Status::kInvalidShape, name, "expected device " + device.str() + ", got " + t.device().str());
  if (t.dim() != int64_t(dims.size()))
    refuse(op, kvq::Status::kInvalidShape, name,
           "expected " + std::to_string(dims.size()) + " dimensions, got shape " + shape_string(t));
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] >= 0 && t.size(int64_t(i)) != dims[i])
      refuse(op, kvq::Status::kInvalidShape, name,
             "dimension " + std::to_string(i) + " must be " + std::to_string(dims[i]) + ", got shape " + shape_string(t));
  if (!t.is_contiguous()) refuse(op, kvq::Status::kInvalidShape, name, "must be contiguous");
  if (t.numel() > 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % uintptr_t(align) != 0)
    refuse(op, kvq::Status::kInvalidShape, name, "data must be " + std::to_string(align) + "-byte aligned");
}

// The cache arguments shared by append, decode, prefill and dequantize, checked and turned into
// a kvq::CacheView<void>.
struct CacheArgs {
  const Tensor& cold;
  const Tensor& hot_k;
  const Tensor& hot_v;
  const c10::optional<Tensor>& sink_k;
  const c10::optional<Tensor>& sink_v;
  int64_t key_clip;
  const Tensor& block_table;
  const Tensor& hot_slot;
  const Tensor& seq_len;
  const Tensor& seq_cold;
};

kvq::CacheView<void> make_view(const char* op, const Config& cfg, const CacheArgs& a, int64_t* batch) {
  const at::Device dev = a.hot_k.device();
  const int D = cfg.key.head_dim, P = cfg.key.page;
  if (!a.hot_k.defined() || a.hot_k.dim() != 4) refuse(op, kvq::Status::kInvalidShape, "hot_k", "expected [slots][R + P][kv_heads][head_dim]");
  const int64_t slots = a.hot_k.size(0), window = a.hot_k.size(1), heads = a.hot_k.size(2);
  if (window < P || window % P != 0)
    refuse(op, kvq::Status::kConfigMismatch, "hot_k", "ring rows R + P = " + std::to_string(window) +
                                                          " must be a positive multiple of the page " + std::to_string(P));
  check_tensor(op, "hot_k", a.hot_k, cfg.dtype, dev, {slots, window, heads, D}, 16);
  check_tensor(op, "hot_v", a.hot_v, cfg.dtype, dev, {slots, window, heads, D}, 16);
  check_tensor(op, "cold", a.cold, at::kByte, dev, {-1, heads, int64_t(cfg.record_bytes)}, 16);
  check_tensor(op, "hot_slot", a.hot_slot, at::kInt, dev, {-1});
  const int64_t b = a.hot_slot.size(0);
  check_tensor(op, "block_table", a.block_table, at::kInt, dev, {b, -1});
  check_tensor(op, "seq_len", a.seq_len, at::kInt, dev, {b});
  check_tensor(op, "seq_cold", a.seq_cold, at::kInt, dev, {b});
  const bool has_sink_k = a.sink_k.has_value() && a.sink_k->defined(), has_sink_v = a.sink_v.has_value() && a.sink_v->defined();
  if (has_sink_k != has_sink_v) refuse(op, kvq::Status::kNullPointer, has_sink_k ? "sink_v" : "sink_k", "sink_k and sink_v go together");
  int64_t sinks = 0;
  if (has_sink_k) {
    if (a.sink_k->dim() != 4) refuse(op, kvq::Status::kInvalidShape, "sink_k", "expected [slots][sinks][kv_heads][head_dim]");
    sinks = a.sink_k->size(1);
    check_tensor(op, "sink_k", *a.sink_k, cfg.dtype, dev, {slots, sinks, heads, D}, 16);
    check_tensor(op, "sink_v", *a.sink_v, cfg.dtype, dev, {slots, sinks, heads, D}, 16);
  }
  if (a.key_clip != int64_t(kvq::KeyClip::kMinMax) && a.key_clip != int64_t(kvq::KeyClip::kMse))
    refuse(op, kvq::Status::kConfigMismatch, "key_clip", "0 (min/max) or 1 (MSE)");
  if (slots > INT32_MAX || a.block_table.size(1) > INT32_MAX || window > INT32_MAX)
    refuse(op, kvq::Status::kInvalidShape, "hot_k", "sizes must fit in int32");
  kvq::CacheView<void> v;
  v.cold = a.cold.data_ptr<uint8_t>();
  v.num_pages = a.cold.size(0);
  v.hot_k = a.hot_k.data_ptr();
  v.hot_v = a.hot_v.data_ptr();
  v.num_slots = int32_t(slots);
  v.residual = int32_t(window - P);
  v.num_kv_heads = int32_t(heads);
  v.block_table = a.block_table.data_ptr<int32_t>();
  v.max_pages_per_seq = int32_t(a.block_table.size(1));
  v.hot_slot = a.hot_slot.data_ptr<int32_t>();
  v.sink_k = has_sink_k ? a.sink_k->data_ptr() : nullptr;
  v.sink_v = has_sink_v ? a.sink_v->data_ptr() : nullptr;
  v.sinks = int32_t(sinks);
  v.key_clip = static_cast<kvq::KeyClip>(a.key_clip);
  // kvq's own host-side checks of the view (the GPU launchers make the same ones).
  check_status(op, kvq::check_view(v, P));
  const bool unquantized = cfg.key.k.kind == kvq::QuantKind::kNone && cfg.key.v.kind == kvq::QuantKind::kNone;
  if (sinks > 0 && unquantized) refuse(op, kvq::Status::kConfigMismatch, "sink_k", "a 'none' configuration keeps no sinks");
  *batch = b;
  return v;
}

uint32_t* flags_ptr(const char* op, const Tensor& flags, const at::Device& dev) {
  check_tensor(op, "flags", flags, at::kInt, dev, {1});
  return reinterpret_cast<uint32_t*>(flags.data_ptr<int32_t>());
}

bool on_cuda(const Tensor& t) { return t.device().is_cuda(); }

#ifdef KVQ_TORCH_CUDA
cudaStream_t stream_of(const Tensor& t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
#endif

[[noreturn]] void no_cuda(const char* op) {
  refuse(op, kvq::Status::kNotInstantiated, "device", "this kvq_torch was built without CUDA (CPU reference only)");
}

// ---- plans ------------------------------------------------------------------------------------------

template <class Plan>
Tensor plan_tensor(const Plan& p) {
  Tensor t = at::empty({int64_t(sizeof(Plan))}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr<uint8_t>(), &p, sizeof(Plan));
  return t;
}

template <class Plan>
Plan plan_from(const char* op, const Tensor& t) {
  if (!t.defined() || t.device().type() != at::kCPU || t.scalar_type() != at::kByte || t.dim() != 1 ||
      t.numel() != int64_t(sizeof(Plan)) || !t.is_contiguous())
    refuse(op, kvq::Status::kConfigMismatch, "plan",
           "expected the CPU uint8 tensor of " + std::to_string(sizeof(Plan)) + " bytes that kvq::plan_* returned");
  Plan p;
  std::memcpy(&p, t.data_ptr<uint8_t>(), sizeof(Plan));
  return p;
}

Tensor plan_decode_op(const std::string& config, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t residual,
                      int64_t max_tokens, int64_t max_q_len, int64_t total_q, at::Device device) {
  const char* op = "plan_decode";
  const Config& cfg = config_of(op, config);
  kvq::DecodeShape s{int32_t(batch), int32_t(num_q_heads), int32_t(num_kv_heads), int32_t(residual), max_tokens,
                     int32_t(max_q_len), total_q, 1};
  kvq::DecodePlan plan{};
  if (device.is_cuda()) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(device);
    s.num_sms = at::cuda::getDeviceProperties(c10::cuda::current_device())->multiProcessorCount;
    check_status(op, cfg.handle.plan_decode(s, &plan));
#else
    no_cuda(op);
#endif
  } else {
    check_status(op, cpu_plan_decode(cfg.key, s, &plan));
  }
  return plan_tensor(plan);
}

Tensor plan_prefill_op(const std::string& config, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads,
                       int64_t residual, int64_t max_tokens, int64_t max_q_len, int64_t total_q, at::Device device) {
  const char* op = "plan_prefill";
  const Config& cfg = config_of(op, config);
  const kvq::PrefillShape s{int32_t(batch), int32_t(num_q_heads), int32_t(num_kv_heads), int32_t(residual), max_tokens,
                            int32_t(max_q_len), total_q};
  kvq::PrefillPlan plan{};
  if (device.is_cuda()) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(device);
    check_status(op, cfg.handle.plan_prefill(s, &plan));
#else
    no_cuda(op);
#endif
  } else {
    check_status(op, cpu_plan_prefill(cfg.key, s, &plan));
  }
  return plan_tensor(plan);
}

// Workspace bytes of a plan tensor (decode or prefill).
int64_t plan_workspace_bytes_op(const Tensor& plan) {
  if (plan.defined() && plan.numel() == int64_t(sizeof(kvq::DecodePlan)))
    return int64_t(plan_from<kvq::DecodePlan>("plan_workspace_bytes", plan).workspace_bytes);
  return int64_t(plan_from<kvq::PrefillPlan>("plan_workspace_bytes", plan).workspace_bytes);
}

// What a decode plan chose, for benchmarks and logs: [batch, num_q_heads, num_kv_heads, residual,
// max_tokens, max_q_len, total_q, num_sms, rows_per_cta, split_tokens, max_splits, tail_slots,
// tail_span, tail_ctas, dependent_launches, workspace_bytes] (kvq/decode/plan.hpp; rows_per_cta
// kDecodeManyRows: the many-row kernel, else the records kernel's row tile).
std::vector<int64_t> decode_plan_info_op(const Tensor& t) {
  const kvq::DecodePlan p = plan_from<kvq::DecodePlan>("decode_plan_info", t);
  const kvq::DecodeShape& s = p.shape;
  return {s.batch, s.num_q_heads, s.num_kv_heads, s.residual, s.max_tokens, s.max_q_len, s.total_q, s.num_sms,
          p.rows_per_cta, p.split_tokens, p.max_splits, p.tail_slots, p.tail_span, p.tail_ctas, p.dependent_launches,
          int64_t(p.workspace_bytes)};
}

// K and V rows [n][num_kv_heads][head_dim] of the model dtype, as many of each (n -1: any number).
void check_kv_rows(const char* op, const char* k_name, const Tensor& k, const char* v_name, const Tensor& v, const Config& cfg,
                   const kvq::CacheView<void>& view, const at::Device& dev, int64_t n = -1) {
  check_tensor(op, k_name, k, cfg.dtype, dev, {n, view.num_kv_heads, cfg.key.head_dim}, 16);
  check_tensor(op, v_name, v, cfg.dtype, dev, {k.size(0), view.num_kv_heads, cfg.key.head_dim}, 16);
}

// ---- append -----------------------------------------------------------------------------------------

void append_op(const std::string& config, Tensor& cold, Tensor& hot_k, Tensor& hot_v, const c10::optional<Tensor>& sink_k,
               const c10::optional<Tensor>& sink_v, int64_t key_clip, const Tensor& block_table, const Tensor& hot_slot,
               const Tensor& seq_len, const Tensor& seq_cold, const Tensor& cu_new, const Tensor& new_k,
               const Tensor& new_v, int64_t max_new_tokens, Tensor& flags) {
  const char* op = "append";
  const Config& cfg = config_of(op, config);
  int64_t batch = 0;
  const kvq::CacheView<void> view =
      make_view(op, cfg, CacheArgs{cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len, seq_cold}, &batch);
  const at::Device dev = hot_k.device();
  check_tensor(op, "cu_new", cu_new, at::kInt, dev, {batch + 1});
  check_kv_rows(op, "new_k", new_k, "new_v", new_v, cfg, view, dev);
  uint32_t* f = flags_ptr(op, flags, dev);
  if (max_new_tokens < 0 || max_new_tokens > INT32_MAX) refuse(op, kvq::Status::kInvalidShape, "max_new_tokens", "out of range");
  kvq::AppendBatch<void> a;
  a.batch = int32_t(batch);
  a.lengths = kvq::SeqLengths{seq_len.data_ptr<int32_t>(), seq_cold.data_ptr<int32_t>()};
  a.cu_new = cu_new.data_ptr<int32_t>();
  a.new_k = new_k.data_ptr();
  a.new_v = new_v.data_ptr();
  if (on_cuda(hot_k)) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(dev);
    check_status(op, cfg.handle.append(view, a, int(max_new_tokens), f, stream_of(hot_k)));
#else
    no_cuda(op);
#endif
  } else {
    // The host reference checks every sequence before it writes: a refusal leaves the cache as it was.
    check_status(op, cpu_append(cfg.key, view, a, f));
  }
}

// ---- decode / prefill ---------------------------------------------------------------------------------

void attention_op(const char* op, bool decode, const std::string& config, const Tensor& plan, const Tensor& cold,
                  const Tensor& hot_k, const Tensor& hot_v, const c10::optional<Tensor>& sink_k,
                  const c10::optional<Tensor>& sink_v, int64_t key_clip, const Tensor& block_table, const Tensor& hot_slot,
                  const Tensor& seq_len, const Tensor& seq_cold, const Tensor& cu_q, const Tensor& q, const Tensor& new_k,
                  const Tensor& new_v, double softmax_scale, double softcap, Tensor& workspace, Tensor& out, Tensor& flags) {
  const Config& cfg = config_of(op, config);
  int64_t batch = 0;
  const kvq::CacheView<void> view =
      make_view(op, cfg, CacheArgs{cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len, seq_cold}, &batch);
  const at::Device dev = hot_k.device();
  const int D = cfg.key.head_dim;
  check_tensor(op, "cu_q", cu_q, at::kInt, dev, {batch + 1});
  check_tensor(op, "q", q, cfg.dtype, dev, {-1, -1, D}, 16);
  const int64_t rows = q.size(0), q_heads = q.size(1);
  if (q_heads % view.num_kv_heads != 0)
    refuse(op, kvq::Status::kInvalidShape, "q", "query heads " + std::to_string(q_heads) + " must be a multiple of KV heads " +
                                                     std::to_string(view.num_kv_heads));
  check_kv_rows(op, "new_k", new_k, "new_v", new_v, cfg, view, dev, rows);
  check_tensor(op, "out", out, cfg.dtype, dev, {rows, q_heads, D}, 16);
  check_tensor(op, "workspace", workspace, at::kByte, dev, {-1}, on_cuda(hot_k) ? 256 : 1);  // the host reference needs none
  uint32_t* f = flags_ptr(op, flags, dev);
  if (!(softmax_scale > 0.0)) refuse(op, kvq::Status::kInvalidShape, "softmax_scale", "must be > 0");
  if (!(softcap >= 0.0)) refuse(op, kvq::Status::kInvalidShape, "softcap", "must be >= 0");
  kvq::AttentionBatch<void> a;
  a.batch = int32_t(batch);
  a.num_q_heads = int32_t(q_heads);
  a.lengths = kvq::SeqLengths{seq_len.data_ptr<int32_t>(), seq_cold.data_ptr<int32_t>()};
  a.cu_q = cu_q.data_ptr<int32_t>();
  a.q = q.data_ptr();
  a.new_k = new_k.data_ptr();
  a.new_v = new_v.data_ptr();
  a.softmax_scale = float(softmax_scale);
  a.softcap = float(softcap);
  // The plan's shape bounds, checked on the host where the host can see them (the device skips
  // and flags a sequence beyond them).
  int64_t max_q_len = 0, planned_batch = 0, planned_rows = 0, ws_bytes = 0;
  int64_t planned_heads = 0, planned_kv = 0, planned_residual = 0;
  kvq::DecodePlan dplan{};
  kvq::PrefillPlan pplan{};
  const auto read_bounds = [&](const auto& p) {  // a DecodePlan or a PrefillPlan: the same fields
    max_q_len = p.shape.max_q_len, planned_batch = p.shape.batch, planned_rows = p.shape.total_q;
    planned_heads = p.shape.num_q_heads, planned_kv = p.shape.num_kv_heads, planned_residual = p.shape.residual;
    ws_bytes = int64_t(p.workspace_bytes);
    if (p.head_dim != D || p.page != cfg.key.page || p.record_bytes != cfg.record_bytes)
      refuse(op, kvq::Status::kConfigMismatch, "plan", "made for another configuration");
  };
  if (decode) {
    dplan = plan_from<kvq::DecodePlan>(op, plan);
    read_bounds(dplan);
  } else {
    pplan = plan_from<kvq::PrefillPlan>(op, plan);
    read_bounds(pplan);
  }
  if (batch > planned_batch) refuse(op, kvq::Status::kInvalidShape, "hot_slot", "batch " + std::to_string(batch) + " exceeds the plan's " + std::to_string(planned_batch));
  if (rows > planned_rows) refuse(op, kvq::Status::kInvalidShape, "q", std::to_string(rows) + " query rows exceed the plan's " + std::to_string(planned_rows));
  if (q_heads != planned_heads || view.num_kv_heads != planned_kv) refuse(op, kvq::Status::kConfigMismatch, "plan", "planned for other head counts");
  if (view.residual != planned_residual) refuse(op, kvq::Status::kConfigMismatch, "plan", "planned for another hot window R");
  if (workspace.numel() < ws_bytes)
    refuse(op, kvq::Status::kWorkspaceTooSmall, "workspace", std::to_string(workspace.numel()) + " bytes, the plan needs " + std::to_string(ws_bytes));
  if (on_cuda(hot_k)) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(dev);
    const cudaStream_t stream = stream_of(hot_k);
    const kvq::Status st =
        decode ? cfg.handle.decode(view, a, dplan, workspace.data_ptr(), size_t(workspace.numel()), out.data_ptr(), f, stream)
               : cfg.handle.prefill(view, a, pplan, workspace.data_ptr(), size_t(workspace.numel()), out.data_ptr(), f, stream);
    check_status(op, st);
#else
    no_cuda(op);
#endif
    return;
  }
  // CPU: the host reference (fp32), rounded to the model dtype. The device's per-sequence bounds
  // of the plan are checked here on the host and refused instead of flagged.
  const int32_t* cq = cu_q.data_ptr<int32_t>();
  if (batch > 0 && cq[0] != 0) refuse(op, kvq::Status::kInvalidShape, "cu_q", "cu_q[0] must be 0");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = int64_t(cq[b + 1]) - cq[b];
    if (n < 0 || cq[b + 1] > rows) refuse(op, kvq::Status::kInvalidShape, "cu_q", "rows outside q");
    if (n > max_q_len) refuse(op, kvq::Status::kInvalidShape, "cu_q", "a sequence has " + std::to_string(n) + " queries, the plan " + std::to_string(max_q_len));
  }
  Tensor out32 = at::zeros({rows, q_heads, D}, at::TensorOptions().dtype(at::kFloat));
  check_status(op, cpu_attention(cfg.key, view, a, out32.data_ptr<float>()));
  out.copy_(out32);
}

void decode_op(const std::string& config, const Tensor& plan, const Tensor& cold, const Tensor& hot_k, const Tensor& hot_v,
               const c10::optional<Tensor>& sink_k, const c10::optional<Tensor>& sink_v, int64_t key_clip,
               const Tensor& block_table, const Tensor& hot_slot, const Tensor& seq_len, const Tensor& seq_cold,
               const Tensor& cu_q, const Tensor& q, const Tensor& new_k, const Tensor& new_v, double softmax_scale,
               double softcap, Tensor& workspace, Tensor& out, Tensor& flags) {
  attention_op("decode", true, config, plan, cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len,
               seq_cold, cu_q, q, new_k, new_v, softmax_scale, softcap, workspace, out, flags);
}

void prefill_op(const std::string& config, const Tensor& plan, const Tensor& cold, const Tensor& hot_k, const Tensor& hot_v,
                const c10::optional<Tensor>& sink_k, const c10::optional<Tensor>& sink_v, int64_t key_clip,
                const Tensor& block_table, const Tensor& hot_slot, const Tensor& seq_len, const Tensor& seq_cold,
                const Tensor& cu_q, const Tensor& q, const Tensor& new_k, const Tensor& new_v, double softmax_scale,
                double softcap, Tensor& workspace, Tensor& out, Tensor& flags) {
  attention_op("prefill", false, config, plan, cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len,
               seq_cold, cu_q, q, new_k, new_v, softmax_scale, softcap, workspace, out, flags);
}

// ---- dequantize -----------------------------------------------------------------------------------------

void dequantize_op(const std::string& config, const Tensor& cold, const Tensor& hot_k, const Tensor& hot_v,
                   const c10::optional<Tensor>& sink_k, const c10::optional<Tensor>& sink_v, int64_t key_clip,
                   const Tensor& block_table, const Tensor& hot_slot, const Tensor& seq_len, const Tensor& seq_cold,
                   const Tensor& cu_out, int64_t max_len, Tensor& k_out, Tensor& v_out, Tensor& flags) {
  const char* op = "dequantize";
  const Config& cfg = config_of(op, config);
  int64_t batch = 0;
  const kvq::CacheView<void> view =
      make_view(op, cfg, CacheArgs{cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len, seq_cold}, &batch);
  const at::Device dev = hot_k.device();
  check_tensor(op, "cu_out", cu_out, at::kInt, dev, {batch + 1});
  check_kv_rows(op, "k_out", k_out, "v_out", v_out, cfg, view, dev);
  uint32_t* f = flags_ptr(op, flags, dev);
  if (max_len < 0) refuse(op, kvq::Status::kInvalidShape, "max_len", "must be >= 0");
  if (on_cuda(hot_k)) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(dev);
    check_status(op, cfg.handle.dequantize(view, kvq::SeqLengths{seq_len.data_ptr<int32_t>(), seq_cold.data_ptr<int32_t>()},
                                           int(batch), cu_out.data_ptr<int32_t>(), max_len, k_out.data_ptr(), v_out.data_ptr(),
                                           f, stream_of(hot_k)));
#else
    no_cuda(op);
#endif
    return;
  }
  // CPU: every sequence into scratch rows first, then copied out, so a refused sequence leaves
  // k_out / v_out untouched (the GPU skips and flags it instead).
  const int32_t* co = cu_out.data_ptr<int32_t>();
  const int32_t* len = seq_len.data_ptr<int32_t>();
  const int32_t* cl = seq_cold.data_ptr<int32_t>();
  std::vector<Tensor> ks, vs;
  for (int64_t b = 0; b < batch; ++b) {
    if (co[b] < 0 || int64_t(co[b]) + len[b] > k_out.size(0) || int64_t(co[b + 1]) - co[b] < len[b] || len[b] > max_len)
      refuse(op, kvq::Status::kInvalidShape, "cu_out", "sequence " + std::to_string(b) + " has fewer output rows than tokens");
    const int64_t n = len[b] > 0 ? len[b] : 0;
    ks.push_back(at::empty({n, view.num_kv_heads, cfg.key.head_dim}, k_out.options()));
    vs.push_back(at::empty_like(ks.back()));
    check_status(op, cpu_dequantize_sequence(cfg.key, view, int(batch), int(b), len[b], cl[b], ks.back().data_ptr(),
                                             vs.back().data_ptr()));
  }
  for (int64_t b = 0; b < batch; ++b) {
    k_out.narrow(0, co[b], ks[size_t(b)].size(0)).copy_(ks[size_t(b)]);
    v_out.narrow(0, co[b], vs[size_t(b)].size(0)).copy_(vs[size_t(b)]);
  }
}

// ---- rollback, advance ---------------------------------------------------------------------------------

void rollback_op(Tensor& seq_len, const Tensor& seq_cold, const Tensor& new_len, Tensor& flags) {
  const char* op = "rollback";
  const at::Device dev = seq_len.device();
  check_tensor(op, "seq_len", seq_len, at::kInt, dev, {-1});
  const int64_t batch = seq_len.size(0);
  check_tensor(op, "seq_cold", seq_cold, at::kInt, dev, {batch});
  check_tensor(op, "new_len", new_len, at::kInt, dev, {batch});
  uint32_t* f = flags_ptr(op, flags, dev);
  if (on_cuda(seq_len)) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(dev);
    check_status(op, rollback_lengths(seq_len.data_ptr<int32_t>(), seq_cold.data_ptr<int32_t>(), new_len.data_ptr<int32_t>(),
                                      int(batch), f, stream_of(seq_len)));
#else
    no_cuda(op);
#endif
    return;
  }
  int32_t* len = seq_len.data_ptr<int32_t>();
  const int32_t* cold = seq_cold.data_ptr<int32_t>();
  const int32_t* nl = new_len.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    if (nl[b] < 0) continue;
    if (kvq::check_rollback(len[b], cold[b], nl[b]) == kvq::Status::kSuccess)
      len[b] = nl[b];
    else
      *f |= kvq::kFlagBadSequence;
  }
}

void advance_op(Tensor& seq_len, Tensor& seq_cold, const Tensor& cu_new, int64_t residual, int64_t page) {
  const char* op = "advance";
  const at::Device dev = seq_len.device();
  check_tensor(op, "seq_len", seq_len, at::kInt, dev, {-1});
  const int64_t batch = seq_len.size(0);
  check_tensor(op, "seq_cold", seq_cold, at::kInt, dev, {batch});
  check_tensor(op, "cu_new", cu_new, at::kInt, dev, {batch + 1});
  if (page <= 0 || residual < 0 || residual % page != 0) refuse(op, kvq::Status::kConfigMismatch, "residual", "R must be a multiple of the page");
  if (on_cuda(seq_len)) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(dev);
    check_status(op, advance_lengths(seq_len.data_ptr<int32_t>(), seq_cold.data_ptr<int32_t>(), cu_new.data_ptr<int32_t>(),
                                     int(batch), int(residual), int(page), stream_of(seq_len)));
#else
    no_cuda(op);
#endif
    return;
  }
  int32_t* len = seq_len.data_ptr<int32_t>();
  int32_t* cold = seq_cold.data_ptr<int32_t>();
  const int32_t* cu = cu_new.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t l = int64_t(len[b]) + (int64_t(cu[b + 1]) - cu[b]);
    cold[b] = int32_t(kvq::cold_after(l, cold[b], int(residual), int(page)));
    len[b] = int32_t(l);
  }
}

// ---- rotation -------------------------------------------------------------------------------------------

// kvq/quant/rotation.hpp's rotation (inverse false) or unrotation of every head vector of x in
// place: x [..., D] (D 64, 128 or 256, the last dimension), fp32, bf16 or fp16, contiguous. seed:
// kvq's 64-bit seed as an int64 bit pattern (layer_rotation_seed). CPU: the host functions; CUDA:
// kvq::rotate_heads on the current stream; the same bits.
void rotate_heads_op(Tensor& x, int64_t seed, bool inverse) {
  const char* op = "rotate_heads";
  if (!x.defined()) refuse(op, kvq::Status::kNullPointer, "x", "missing tensor");
  RotateDType dt;
  switch (x.scalar_type()) {
    case at::kFloat: dt = RotateDType::kF32; break;
    case at::kBFloat16: dt = RotateDType::kBF16; break;
    case at::kHalf: dt = RotateDType::kFP16; break;
    default: refuse(op, kvq::Status::kInvalidShape, "x", std::string("expected float32, bfloat16 or float16, got ") + c10::toString(x.scalar_type()));
  }
  if (x.dim() < 1) refuse(op, kvq::Status::kInvalidShape, "x", "expected [..., head_dim]");
  const int64_t D = x.size(-1);
  if (D != 64 && D != 128 && D != 256)
    refuse(op, kvq::Status::kConfigMismatch, "x", "head dim (last dimension) must be 64, 128 or 256, got shape " + shape_string(x));
  if (!x.is_contiguous()) refuse(op, kvq::Status::kInvalidShape, "x", "must be contiguous");
  if (x.numel() > 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 4 != 0) refuse(op, kvq::Status::kInvalidShape, "x", "data must be 4-byte aligned");
  const int64_t n = x.numel() / D;
  if (on_cuda(x)) {
#ifdef KVQ_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    check_status(op, rotate_heads(x.data_ptr(), dt, int(D), n, uint64_t(seed), inverse, stream_of(x)));
#else
    no_cuda(op);
#endif
    return;
  }
  check_status(op, cpu_rotate(x.data_ptr(), dt, int(D), n, uint64_t(seed), inverse));
}

// kvq::layer_rotation_seed(layer) as an int64 bit pattern (the seed kvq's examples use per layer).
int64_t layer_rotation_seed_op(int64_t layer) { return int64_t(kvq::layer_rotation_seed(int(layer))); }

// ---- capacity, configurations ---------------------------------------------------------------------------

// [record_bytes, page_bytes, hot_bytes_per_sequence, bytes_for_sequence(seq_len),
//  sequences_that_fit(budget, seq_len), tokens_that_fit(budget, num_seqs)] of kvq/cache/planner.hpp
// for a format given as a configuration string (compiled or not), every layer counted.
std::vector<int64_t> capacity_op(const std::string& config, int64_t layers, int64_t kv_heads, int64_t residual, int64_t sinks,
                                 int64_t budget, int64_t num_seqs, int64_t seq_len) {
  const char* op = "capacity";
  kvq::ConfigKey key{};
  std::string error;
  if (!parse_config(config, &key, &error)) refuse(op, kvq::Status::kConfigMismatch, "config", "'" + config + "': " + error);
  const kvq::ModelShape m{int(layers), int(kv_heads), key.head_dim};
  kvq::CacheFormat f{key.k, key.v, key.page, int(residual)};
  f.sinks = int(sinks);
  const kvq::Status st = kvq::validate(m, f);
  if (st != kvq::Status::kSuccess) refuse(op, st, st == kvq::Status::kInvalidShape ? "layers" : "config", kvq::to_string(st));
  const uint64_t b = budget < 0 ? 0 : uint64_t(budget);
  return {int64_t(record_bytes_of(key)),
          int64_t(kvq::page_bytes(m, f)),
          int64_t(kvq::hot_bytes_per_sequence(m, f)),
          int64_t(kvq::bytes_for_sequence(seq_len, m, f)),
          kvq::sequences_that_fit(b, seq_len, m, f),
          kvq::tokens_that_fit(b, num_seqs, m, f)};
}

std::vector<std::string> compiled_configs_op() { return compiled_configs(); }

bool built_with_cuda_op() {
#ifdef KVQ_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<int64_t> plan_nbytes_op() { return {int64_t(sizeof(kvq::DecodePlan)), int64_t(sizeof(kvq::PrefillPlan))}; }

}  // namespace
}  // namespace kvq_torch

TORCH_LIBRARY(kvq, m) {
  const char* cache = "Tensor cold, Tensor hot_k, Tensor hot_v, Tensor? sink_k, Tensor? sink_v, int key_clip, "
                      "Tensor block_table, Tensor hot_slot, Tensor seq_len, Tensor seq_cold";
  m.def(
      "append(str config, Tensor(a!) cold, Tensor(b!) hot_k, Tensor(c!) hot_v, Tensor(d!)? sink_k, Tensor(e!)? sink_v, "
      "int key_clip, Tensor block_table, Tensor hot_slot, Tensor seq_len, Tensor seq_cold, Tensor cu_new, Tensor new_k, "
      "Tensor new_v, int max_new_tokens, Tensor(f!) flags) -> ()");
  const std::string run = ", Tensor cu_q, Tensor q, Tensor new_k, Tensor new_v, float softmax_scale, float softcap, "
                          "Tensor(a!) workspace, Tensor(b!) out, Tensor(c!) flags) -> ()";
  m.def((std::string("decode(str config, Tensor plan, ") + cache + run).c_str());
  m.def((std::string("prefill(str config, Tensor plan, ") + cache + run).c_str());
  m.def((std::string("dequantize(str config, ") + cache +
         ", Tensor cu_out, int max_len, Tensor(a!) k_out, Tensor(b!) v_out, Tensor(c!) flags) -> ()")
            .c_str());
  m.def("rollback(Tensor(a!) seq_len, Tensor seq_cold, Tensor new_len, Tensor(b!) flags) -> ()");
  m.def("advance(Tensor(a!) seq_len, Tensor(b!) seq_cold, Tensor cu_new, int residual, int page) -> ()");
  m.def(
      "plan_decode(str config, int batch, int num_q_heads, int num_kv_heads, int residual, int max_tokens, int max_q_len, "
      "int total_q, Device device) -> Tensor");
  m.def(
      "plan_prefill(str config, int batch, int num_q_heads, int num_kv_heads, int residual, int max_tokens, int max_q_len, "
      "int total_q, Device device) -> Tensor");
  m.def("plan_workspace_bytes(Tensor plan) -> int");
  m.def("decode_plan_info(Tensor plan) -> int[]");
  m.def("capacity(str config, int layers, int kv_heads, int residual, int sinks, int budget, int num_seqs, int seq_len) -> int[]");
  m.def("compiled_configs() -> str[]");
  m.def("built_with_cuda() -> bool");
  m.def("plan_nbytes() -> int[]");
  m.def("rotate_heads(Tensor(a!) x, int seed, bool inverse) -> ()");
  m.def("layer_rotation_seed(int layer) -> int");
}

TORCH_LIBRARY_IMPL(kvq, CPU, m) {
  m.impl("append", &kvq_torch::append_op);
  m.impl("decode", &kvq_torch::decode_op);
  m.impl("prefill", &kvq_torch::prefill_op);
  m.impl("dequantize", &kvq_torch::dequantize_op);
  m.impl("rollback", &kvq_torch::rollback_op);
  m.impl("advance", &kvq_torch::advance_op);
  m.impl("plan_workspace_bytes", &kvq_torch::plan_workspace_bytes_op);
  m.impl("decode_plan_info", &kvq_torch::decode_plan_info_op);
  m.impl("rotate_heads", &kvq_torch::rotate_heads_op);
}

#ifdef KVQ_TORCH_CUDA
TORCH_LIBRARY_IMPL(kvq, CUDA, m) {
  m.impl("append", &kvq_torch::append_op);
  m.impl("decode", &kvq_torch::decode_op);
  m.impl("prefill", &kvq_torch::prefill_op);
  m.impl("dequantize", &kvq_torch::dequantize_op);
  m.impl("rollback", &kvq_torch::rollback_op);
  m.impl("advance", &kvq_torch::advance_op);
  m.impl("rotate_heads", &kvq_torch::rotate_heads_op);
}
#endif

// Ops without tensor inputs (plans, capacity, what was compiled): host code, any backend.
TORCH_LIBRARY_IMPL(kvq, CompositeExplicitAutograd, m) {
  m.impl("plan_decode", &kvq_torch::plan_decode_op);
  m.impl("plan_prefill", &kvq_torch::plan_prefill_op);
  m.impl("capacity", &kvq_torch::capacity_op);
  m.impl("compiled_configs", &kvq_torch::compiled_configs_op);
  m.impl("built_with_cuda", &kvq_torch::built_with_cuda_op);
  m.impl("plan_nbytes", &kvq_torch::plan_nbytes_op);
  m.impl("layer_rotation_seed", &kvq_torch::layer_rotation_seed_op);
}

// `import kvq_torch._C` loads this library, whose static initialisers register the ops above.
#include <Python.h>
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "kvq's PyTorch operators (torch.ops.kvq)", -1,
                                          nullptr};
  return PyModule_Create(&module_def);
}
