// The dispatch of a backend whose kernels are one class with a run(const ir::X&) overload per op
// it executes (the vulkan and cuda backends' Kernels): which op codes it supports, from the op
// list, and the call of the op's overload, or the refusal naming op and backend for an op
// without one. Adding an overload is all it takes to support an op.
#pragma once
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "backend/table_backend.h"
#include "ir/ops.h"

namespace tw {

template <class K, class Op>
concept HasKernel = requires(const Op& op, K& k) {
  k.run(op);
};

// Which op codes K has an overload for, indexed by code.
template <class K>
const std::vector<bool>& kernel_codes() {
  static const std::vector<bool> codes = [] {
    std::vector<bool> v(256, false);
#define TW_KERNEL_CODE(Name, code, since) v[code] = HasKernel<K, ir::Name>;
    TW_OP_LIST(TW_KERNEL_CODE)
#undef TW_KERNEL_CODE
    return v;
  }();
  return codes;
}

// Runs `op` through K's overload (which gives the op's one output, or all of them for an op
// with several), or refuses it naming op and `backend`.
template <class T, class K>
Result<std::vector<T>> run_kernel(K& kernels, const ir::Op& op, const std::string& backend) {
  return std::visit(
      [&](const auto& o) -> Result<std::vector<T>> {
        using O = std::decay_t<decltype(o)>;
        if constexpr (HasKernel<K, O>) {
          auto r = kernels.run(o);
          if constexpr (std::is_same_v<decltype(r), Result<std::vector<T>>>) {
            return r;
          } else {
            if (!r.ok()) return r.status();
            std::vector<T> v;
            v.push_back(std::move(r).value());
            return v;
          }
        } else {
          return unsupported_op(ir::op_name(op), backend);
        }
      },
      op);
}

}  // namespace tw
