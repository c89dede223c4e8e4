#include "core/cancel.h"

namespace tw {
namespace {
thread_local const std::atomic<bool>* t_flag = nullptr;
}  // namespace

const std::atomic<bool>* cancel_flag() { return t_flag; }

CancelScope::CancelScope(const std::atomic<bool>* flag) : prev_(t_flag) { t_flag = flag; }
CancelScope::~CancelScope() { t_flag = prev_; }

}  // namespace tw
