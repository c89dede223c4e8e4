#include "core/cancel.h"

namespace tw {
namespace {
thread_local const std::atomic<bool>* t_flag = nullptr;
std::atomic<int> g_long_work{0};
}  // namespace

LongWorkScope::LongWorkScope() { g_long_work.fetch_add(1); }
LongWorkScope::~LongWorkScope() { g_long_work.fetch_sub(1); }
int long_work_running() { return g_long_work.load(); }

const std::atomic<bool>* cancel_flag() { return t_flag; }

CancelScope::CancelScope(const std::atomic<bool>* flag) : prev_(t_flag) { t_flag = flag; }
CancelScope::~CancelScope() { t_flag = prev_; }

}  // namespace tw
