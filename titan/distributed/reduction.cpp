#include "titan/distributed/reduction.h"

#include <algorithm>
#include <cstring>

#include "titan/core/error.h"
#include "titan/core/thread_pool.h"

namespace titan::distributed {

namespace {

template <class T, class Acc, class Load, class Store>
void combine(const std::vector<const void*>& pieces, int64_t count, void* out, ReduceOp op, Load load,
             Store store) {
  const int n = static_cast<int>(pieces.size());
  // Element i is combined by one task, always left to right over the pieces, so the
  // thread split does not change the bits.
  parallel_for_grain(count, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Acc acc = load(static_cast<const T*>(pieces[0])[i]);
      for (int r = 1; r < n; ++r) {
        const Acc v = load(static_cast<const T*>(pieces[r])[i]);
        switch (op) {
          case ReduceOp::sum: acc = acc + v; break;
          case ReduceOp::max: acc = std::max(acc, v); break;
          case ReduceOp::min: acc = std::min(acc, v); break;
        }
      }
      static_cast<T*>(out)[i] = store(acc);
    }
  });
}

template <class U>
U wrap_add(U a, U b) {
  using Un = std::make_unsigned_t<U>;
  return static_cast<U>(static_cast<Un>(a) + static_cast<Un>(b));
}

}  // namespace

void reduce_pieces(DType dtype, const std::vector<const void*>& pieces, int64_t count, void* out,
                   ReduceOp op) {
  TITAN_CHECK(!pieces.empty(), "reduce_pieces: no pieces");
  if (count == 0) return;
  auto id = [](auto v) { return v; };
  switch (dtype) {
    case DType::f32:
      combine<float, float>(pieces, count, out, op, id, id);
      return;
    case DType::bf16:
      // Widening is exact, so max/min in f32 are max/min of the bf16 values.
      combine<uint16_t, float>(pieces, count, out, op, bf16_to_f32, f32_to_bf16);
      return;
    case DType::i32:
    case DType::i64: {
      const int n = static_cast<int>(pieces.size());
      auto run = [&](auto tag) {
        using T = decltype(tag);
        parallel_for_grain(count, 1 << 14, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            T acc = static_cast<const T*>(pieces[0])[i];
            for (int r = 1; r < n; ++r) {
              const T v = static_cast<const T*>(pieces[r])[i];
              acc = op == ReduceOp::sum ? wrap_add(acc, v) : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
            }
            static_cast<T*>(out)[i] = acc;
          }
        });
      };
      if (dtype == DType::i32) run(int32_t{}); else run(int64_t{});
      return;
    }
    default:
      fail("collective reduction: dtype {} is not supported (f32, bf16, i32, i64)", dtype_name(dtype));
  }
}

}  // namespace titan::distributed
