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
