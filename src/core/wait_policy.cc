// OpenMP's wait policy for every program that links libtensorwire.so: a short spin, then sleep,
// unless the user chose a policy (docs/remote.md, after the list of variables).
//
// The intra-op pool and oneDNN run on libgomp's threads. By default libgomp lets a thread that
// finished its part of a parallel region spin for GOMP_SPINCOUNT (300,000) pause instructions
// before it sleeps, which is cheap on an idle machine and ruinous on a busy one: a team waits at
// its barrier for a thread whose core another program holds, while its own threads spin on the
// cores that program wants (train_digits beside one `yes` ran 44 ms/step against 0.69 passive;
// issue 50). Sleeping at once (OMP_WAIT_POLICY=PASSIVE) is best under load but costs the small
// kernels a futex wake each (tw_bench_kernels 1.09x slower by geometric mean on a quiet machine,
// depthwise and sum rows 1.3-1.4x). A spin of 10,000 pauses (tens of microseconds) covers the gap
// between the kernels of one step: measured side by side on a quiet machine it is as fast as the
// 300,000 default (geomean 0.98x), and beside a busy core train_digits stays within 1.4x of its
// time alone (bench/busy_core.sh, bench/results/busy_core.md).
//
// libgomp reads the policy once, in its own ELF constructor, with getenv. A constructor of ours
// cannot set the variable first: libtensorwire.so depends on libgomp, so the loader runs libgomp's
// constructor before ours, and the order among libraries that do not depend on each other is the
// loader's choice (a helper library marked DF_1_INITFIRST runs too early: libc's own start-up
// then resets the environment, and the variable is lost). What the ELF rules do fix is symbol
// lookup: a call from any library to getenv binds to the first definition in the global scope,
// the executable and then its libraries in load order, and libtensorwire.so comes before
// libc.so.6 in every program linked with -ltensorwire. So the library defines getenv: it reads
// the environment as libc does, and answers "10000" for GOMP_SPINCOUNT when neither it nor
// OMP_WAIT_POLICY is set. libgomp's constructor asks it, and so does anything else that asks, so
// the answer matches the policy in effect; the environment itself is unchanged (child processes
// see what the user set).
//
// A library loaded with dlopen (the Python extension) comes after libc in that scope; there
// tensorwire/__init__.py sets OMP_WAIT_POLICY=PASSIVE before it loads the extension (a Python
// program usually hosts its server in-process, where sleeping at once measured best under load;
// docs/remote.md). A test checks the count libgomp took (tests/unit/cpu/wait_policy_test.cc).
#include <cstring>

extern "C" char** environ;  // NOLINT: POSIX

namespace {

// The value of `name` in the environment, as libc's getenv finds it.
const char* find_variable(const char* name) {
  const size_t n = std::strlen(name);
  char** env = environ;
  if (env == nullptr) return nullptr;
  for (; *env != nullptr; ++env) {
    if (std::strncmp(*env, name, n) == 0 && (*env)[n] == '=') return *env + n + 1;
  }
  return nullptr;
}

}  // namespace

// Declared by <stdlib.h> (noexcept in C++: glibc's __THROW); defined with the same signature.
extern "C" __attribute__((visibility("default"))) char* getenv(const char* name) noexcept {
  const char* value = find_variable(name);
  if (value == nullptr && std::strcmp(name, "GOMP_SPINCOUNT") == 0 &&
      find_variable("OMP_WAIT_POLICY") == nullptr) {
    static char spin_count[] = "10000";  // kept in step with python/tensorwire/__init__.py
    return spin_count;
  }
  return const_cast<char*>(value);
}
