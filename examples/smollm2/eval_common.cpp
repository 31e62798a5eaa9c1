// eval_common.cpp - CSV output and helpers shared by the evaluations.
#include <cstdio>
#include <fstream>

#include "eval.hpp"

namespace smollm2 {

std::string format_label(const CacheSpec& spec) { return spec.residual == 0 ? spec.format + "_r0" : spec.format; }

// The technique set in one CSV field: "base" for kvq's scheme as is, else the ablation's and the
// rotation's options joined with '+' (e.g. "rotate+sinks=4").
std::string variant_label(const CacheSpec& spec) {
  std::string v = std::string(spec.rotate ? " rotate" : "") + (spec.rotate && spec.rotate_draw ? "=" + std::to_string(spec.rotate_draw) : "") + (spec.sinks ? " sinks=" + std::to_string(spec.sinks) : "") +
                  (spec.key_clip == kvq::KeyClip::kMse ? " kclip=mse" + std::string(spec.key_clip_from ? "(" + std::to_string(spec.key_clip_from) + "..)" : "") : "") +
                  describe_mix(spec) + describe(spec.ablation);
  if (v.empty()) return "base";
  for (char& c : v)
    if (c == ' ') c = '+';
  return v.substr(1);
}

void append_csv(const std::string& path, const std::string& model, const CacheSpec& spec, const std::vector<CsvRow>& rows) {
  bool fresh = true;
  {
    std::ifstream in(path);
    fresh = !in || in.peek() == std::ifstream::traits_type::eof();
  }
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error("cannot write " + path);
  if (fresh) out << "model,format,gk,gv,residual,metric,context,value,n,variant\n";
  for (const CsvRow& r : rows) {
    char value[64];
    std::snprintf(value, sizeof value, "%.6g", r.value);
    out << model << ',' << format_label(spec) << ',' << (spec.grouped() ? spec.gk : 0) << ',' << (spec.grouped() ? spec.gv : 0) << ','
        << spec.residual << ',' << r.metric << ',' << r.context << ',' << value << ',' << r.n << ',' << variant_label(spec)
        << '\n';
  }
}

void feed(Model& m, int seq, const std::vector<int32_t>& tokens, int chunk, std::vector<float>& last_logits) {
  for (size_t i = 0; i < tokens.size(); i += size_t(chunk)) {
    const size_t e = std::min(tokens.size(), i + size_t(chunk));
    m.forward({SeqTokens{seq, std::vector<int32_t>(tokens.begin() + long(i), tokens.begin() + long(e))}}, false, last_logits);
  }
}

int32_t argmax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

}  // namespace smollm2
