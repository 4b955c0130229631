// CHECK macros: abort on broken invariants (programmer errors only, never user input).
#pragma once

#include <cstdio>
#include <cstdlib>

#define LOOM_CHECK(cond)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

// For a Status that can only fail on a broken invariant (e.g. scratch sized from limits that were
// validated at load): prints the status and aborts. Never for user input.
#define LOOM_CHECK_OK(expr)                                                              \
  do {                                                                                   \
    const auto& _loom_st = (expr);                                                       \
    if (!_loom_st.ok()) {                                                                \
      std::fprintf(stderr, "%s:%d: CHECK_OK failed: %s: %s\n", __FILE__, __LINE__, #expr, \
                   _loom_st.message().c_str());                                          \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
