// The typed dispatcher (dispatch/dispatch.hpp): runtime ConfigKey -> one compiled configuration.
#include <kvq/dispatch/dispatch.hpp>

#include "test_util.hpp"

namespace {

using namespace kvq_test;

using List = kvq::ConfigList<CfgInt2, CfgK4V2, CfgFp16Int2, CfgP16K4V2D64, CfgNone>;

template <class Cfg>
int index_of() {
  return std::is_same<Cfg, CfgInt2>::value         ? 0
         : std::is_same<Cfg, CfgK4V2>::value       ? 1
         : std::is_same<Cfg, CfgFp16Int2>::value   ? 2
         : std::is_same<Cfg, CfgP16K4V2D64>::value ? 3
         : std::is_same<Cfg, CfgNone>::value       ? 4
                                                   : 99;
}

// Dispatches `key` over List; counts the calls per configuration.
Status run(const kvq::ConfigKey& key, std::vector<int>& calls, Status result = Status::kSuccess) {
  calls.assign(5, 0);
  return kvq::dispatch(List{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    ++calls[size_t(index_of<Cfg>())];
    CHECK(kvq::key_of<Cfg>() == key);  // the called configuration is the one asked for
    return result;
  });
}

TEST_CASE("dispatch: a key in the list calls exactly that configuration, once, and returns its status") {
  CHECK(List::size == 5);
  std::vector<int> calls;
  CHECK(run(kvq::key_of<CfgInt2>(), calls) == Status::kSuccess);
  CHECK(calls == std::vector<int>{1, 0, 0, 0, 0});
  CHECK(run(kvq::key_of<CfgK4V2>(), calls) == Status::kSuccess);
  CHECK(calls == std::vector<int>{0, 1, 0, 0, 0});
  CHECK(run(kvq::key_of<CfgFp16Int2>(), calls, Status::kInvalidLength) == Status::kInvalidLength);
  CHECK(calls == std::vector<int>{0, 0, 1, 0, 0});
  CHECK(run(kvq::key_of<CfgP16K4V2D64>(), calls, Status::kCudaError) == Status::kCudaError);
  CHECK(calls == std::vector<int>{0, 0, 0, 1, 0});
  // a key built by hand at run time (what an engine has), not through key_of
  const kvq::ConfigKey none{kvq::DType::kBF16, 128, 64, kvq::kDescNone, kvq::kDescNone};
  CHECK(run(none, calls) == Status::kSuccess);
  CHECK(calls == std::vector<int>{0, 0, 0, 0, 1});
  // the callee can use the configuration's types and constants
  const Status st = kvq::dispatch(List{}, kvq::key_of<CfgP16K4V2D64>(), [](auto tag) {
    using Cfg = typename decltype(tag)::type;
    return Cfg::record_bytes == 1152 && Cfg::page == 16 ? Status::kSuccess : Status::kConfigMismatch;
  });
  CHECK(st == Status::kSuccess);
}

TEST_CASE("dispatch: a key not in the list returns kNotInstantiated and calls nothing, contains() agrees, repeats called once") {
  SUBCASE("a key not in the list returns kNotInstantiated and calls nothing") {
    std::vector<int> calls;
    const kvq::ConfigKey base = kvq::key_of<CfgInt2>();
    std::vector<kvq::ConfigKey> missing;
    kvq::ConfigKey k = base;
    k.dtype = kvq::DType::kFP16, k.k = kvq::desc_int4(), k.v = kvq::desc_int2();  // fp16 k4v2: not compiled
    missing.push_back(k);
    k = base, k.head_dim = 64;
    missing.push_back(k);
    k = base, k.head_dim = 256;
    missing.push_back(k);
    k = base, k.page = 32;
    missing.push_back(k);
    k = base, k.k = kvq::desc_int2(16);  // same bits, other group
    missing.push_back(k);
    k = base, k.v = kvq::desc_int4();
    missing.push_back(k);
    k = base, k.k = kvq::kDescInt8, k.v = kvq::kDescInt8;
    missing.push_back(k);
    k = kvq::key_of<CfgNone>(), k.dtype = kvq::DType::kFP16;
    missing.push_back(k);
    for (const kvq::ConfigKey& key : missing) {
      CAPTURE(key.head_dim);
      CAPTURE(key.page);
      CHECK(run(key, calls) == Status::kNotInstantiated);
      CHECK(calls == std::vector<int>{0, 0, 0, 0, 0});
      CHECK_FALSE(kvq::contains(List{}, key));
    }
    // an empty list contains nothing
    int called = 0;
    CHECK(kvq::dispatch(kvq::ConfigList<>{}, base, [&](auto) {
            ++called;
            return Status::kSuccess;
          }) == Status::kNotInstantiated);
    CHECK(called == 0);
    CHECK_FALSE(kvq::contains(kvq::ConfigList<>{}, base));
  }
  SUBCASE("contains() agrees with dispatch; a repeated entry is still called once") {
    CHECK(kvq::contains(List{}, kvq::key_of<CfgInt2>()));
    CHECK(kvq::contains(List{}, kvq::key_of<CfgNone>()));
    CHECK_FALSE(kvq::contains(List{}, kvq::key_of<CfgInt8>()));
    static_assert(kvq::contains(List{}, kvq::key_of<CfgK4V2>()), "contains is a compile-time query");
    int first = 0, second = 0, other = 0;
    const Status st = kvq::dispatch(kvq::ConfigList<CfgInt4, CfgInt2, CfgInt2>{}, kvq::key_of<CfgInt2>(), [&](auto tag) {
      using Cfg = typename decltype(tag)::type;
      if (std::is_same<Cfg, CfgInt2>::value) (first + second == 0 ? first : second) += 1;
      else ++other;
      return Status::kSuccess;
    });
    CHECK(st == Status::kSuccess);
    CHECK(first == 1);
    CHECK(second == 0);
    CHECK(other == 0);
  }
}

}  // namespace
