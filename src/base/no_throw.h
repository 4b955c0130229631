// NoThrow: runs a Status/StatusOr-returning function so that no exception leaves a public API.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "base/status.h"

namespace loom {

// Runs `f` (returning a Status or StatusOr): an allocation failure becomes kResourceExhausted,
// any other exception kInternal, both naming `what` (what was being done).
template <typename F>
auto NoThrow(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(what + ": out of memory");
  } catch (const std::exception& e) {
    return Internal(what + ": unexpected error: " + e.what());
  }
}

}  // namespace loom
