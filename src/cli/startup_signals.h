// Ends `loom serve` at once on SIGTERM / SIGINT while it starts up (loading a model can take
// minutes); once serving, the main thread's sigwait takes them and drains.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

namespace loom::cli {

// The signals serve drains on (SIGTERM, SIGINT): blocked in every thread, taken by sigwait.
inline sigset_t ServeSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

// The signals are blocked in every thread (serve's sigwait wants them), so before this a Ctrl-C
// or a supervisor's SIGTERM during start-up waited until the server said ready. This thread
// takes them until Stop(): nothing is being served yet, so the process ends as the signal's
// default action ends it (status 128 + signal), after saying why.
class StartupSignalWatcher {
 public:
  explicit StartupSignalWatcher(const sigset_t& signals)
      : signals_(signals), thread_([this] { Run(); }) {}
  ~StartupSignalWatcher() { Stop(); }
  StartupSignalWatcher(const StartupSignalWatcher&) = delete;
  StartupSignalWatcher& operator=(const StartupSignalWatcher&) = delete;

  // Hands the signals back (a signal arriving from here on stays pending for sigwait).
  void Stop() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    const timespec tick{0, 50 * 1000 * 1000};
    while (!done_.load()) {
      const int sig = sigtimedwait(&signals_, nullptr, &tick);
      if (sig <= 0) continue;
      std::fprintf(stderr, "loom: %s during start-up: exiting\n",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT");
      std::fflush(stderr);
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);  // unblocked in this thread, default action: the process ends here
      std::_Exit(128 + sig);
    }
  }

  sigset_t signals_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace loom::cli
