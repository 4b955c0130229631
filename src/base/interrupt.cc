// InterruptibleSection: SIGINT/SIGTERM/SIGHUP noted while work that must clean up runs.
#include "base/interrupt.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace loom {

namespace {
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<bool> g_active{false};
std::atomic<int> g_noted{0};  // the signal that arrived in a section, or 0
int g_depth = 0;              // sections alive (nested ones share the outermost's handlers)
struct sigaction g_previous[3];
bool g_installed[3] = {};     // whether OnInterrupt replaced g_previous[i]

extern "C" void OnInterrupt(int sig) {
  if (!g_active.load(std::memory_order_relaxed)) {
    // Between sections: the default action, as if no handler had been installed.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  int expected = 0;
  g_noted.compare_exchange_strong(expected, sig);
}
}  // namespace

InterruptibleSection::InterruptibleSection() {
  if (g_depth++ > 0) return;  // nested: the outer section's handlers and noted signal stand
  g_noted.store(0);
  g_active.store(true);
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a write(2) in progress completes; the work polls the flag
  for (size_t i = 0; i < 3; ++i) {
    // A signal the process ignores stays ignored (nohup, a shell's background job: SIGHUP or
    // SIGINT must not start to end a merge that survived them before).
    g_installed[i] = false;
    if (::sigaction(kSignals[i], nullptr, &g_previous[i]) != 0) continue;
    if (g_previous[i].sa_handler == SIG_IGN) continue;
    g_installed[i] = ::sigaction(kSignals[i], &sa, nullptr) == 0;
  }
}

InterruptibleSection::~InterruptibleSection() {
  if (--g_depth > 0) return;
  for (size_t i = 0; i < 3; ++i) {
    if (g_installed[i]) ::sigaction(kSignals[i], &g_previous[i], nullptr);
    g_installed[i] = false;
  }
  g_active.store(false);
}

bool Interrupted() { return g_noted.load(std::memory_order_relaxed) != 0; }

Status InterruptedError(const std::string& what) {
  const int sig = g_noted.load();
  return Unavailable(what + ": interrupted (" + (sig != 0 ? ::strsignal(sig) : "a signal") +
                     "); what was written so far is removed");
}

void RaiseNotedSignal() {
  const int sig = g_noted.exchange(0);
  if (sig == 0) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace loom
