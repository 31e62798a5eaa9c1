// kvq/dispatch/dispatch.hpp - map a runtime ConfigKey to one of a list of compiled configurations.
//
//   using Instances = kvq::ConfigList<CfgA, CfgB, CfgC>;   // exactly what your .cu files instantiate
//   Status st = kvq::dispatch(Instances{}, key, [&](auto tag) {
//     using Cfg = typename decltype(tag)::type;
//     return kvq::append<Cfg>(...);
//   });
//
// A key matching no entry returns Status::kNotInstantiated; nothing falls back to another config.
#pragma once

#include "kvq/cache/config.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

template <class... Cfgs>
struct ConfigList {
  static constexpr int size = int(sizeof...(Cfgs));
};

template <class Cfg>
struct ConfigTag {
  using type = Cfg;
};

template <class... Cfgs, class F>
Status dispatch(ConfigList<Cfgs...>, const ConfigKey& key, F&& f) {
  Status result = Status::kNotInstantiated;
  bool found = false;
  // Fold over the list; the first configuration whose key matches is called, once.
  ((!found && key == key_of<Cfgs>() ? (found = true, result = f(ConfigTag<Cfgs>{}), 0) : 0), ...);
  return result;
}

// Whether a key is in the list (for capability queries before any call).
template <class... Cfgs>
constexpr bool contains(ConfigList<Cfgs...>, const ConfigKey& key) {
  return ((key == key_of<Cfgs>()) || ... || false);
}

KVQ_NAMESPACE_END
