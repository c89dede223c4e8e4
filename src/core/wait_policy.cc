// OpenMP's wait policy for every program that links libtensorwire.so: passive unless the user
// chose one (docs/remote.md, after the list of variables).
//
// The intra-op pool and oneDNN run on libgomp's threads. By default libgomp lets a thread that
// finished its part of a parallel region spin for GOMP_SPINCOUNT (300,000) pause instructions
// before it sleeps, which is cheap on an idle machine and ruinous on a busy one: a team waits at
// its barrier for a thread whose core another program holds, while its own threads spin on the
// cores that program wants (train_digits beside one `yes` ran 44 ms/step against 0.69 passive;
// issue 50). OMP_WAIT_POLICY=PASSIVE makes them sleep at once.
//
// libgomp reads the policy once, in its own ELF constructor, with getenv. A constructor of ours
// cannot set the variable first: libtensorwire.so depends on libgomp, so the loader runs libgomp's
// constructor before ours, and the order among libraries that do not depend on each other is the
// loader's choice (a helper library marked DF_1_INITFIRST runs too early: libc's own start-up
// then resets the environment, and the variable is lost). What the ELF rules do fix is symbol
// lookup: a call from any library to getenv binds to the first definition in the global scope,
// the executable and then its libraries in load order, and libtensorwire.so comes before
// libc.so.6 in every program linked with -ltensorwire. So the library defines getenv: it reads
// the environment as libc does, and answers "PASSIVE" for OMP_WAIT_POLICY when neither it nor
// GOMP_SPINCOUNT is set. libgomp's constructor asks it, and so does anything else that asks, so
// the answer matches the policy in effect; the environment itself is unchanged (child processes
// see what the user set).
//
// A library loaded with dlopen (the Python extension) comes after libc in that scope; there
// tensorwire/__init__.py sets the variable before it loads the extension. A test checks the
// policy libgomp took (tests/unit/cpu/wait_policy_test.cc).
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
  if (value == nullptr && std::strcmp(name, "OMP_WAIT_POLICY") == 0 &&
      find_variable("GOMP_SPINCOUNT") == nullptr) {
    static char passive[] = "PASSIVE";
    return passive;
  }
  return const_cast<char*>(value);
}
