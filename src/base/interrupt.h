// InterruptibleSection: Ctrl-C / SIGTERM during work that must clean up (a checkpoint's writes).
#pragma once

#include <string>

#include "base/status.h"

namespace loom {

// While one is alive, SIGINT, SIGTERM and SIGHUP are only noted: the work polls Interrupted()
// at its checkpoints (a tensor, a copied chunk), returns InterruptedError, removes what it wrote,
// and the command then ends as the signal would have ended it (RaiseNotedSignal). Outside a
// section these signals take their default action at once, as before. `loom merge` and `loom
// quantize` left their gigabytes-large temporary folder behind when interrupted mid-write.
// A signal the process ignores (nohup, a shell's background job) stays ignored. Sections nest
// (the outermost one's handlers stand); one thread creates them (the CLI's). Not for `loom
// serve`, which handles these signals itself.
class InterruptibleSection {
 public:
  InterruptibleSection();
  ~InterruptibleSection();
  InterruptibleSection(const InterruptibleSection&) = delete;
  InterruptibleSection& operator=(const InterruptibleSection&) = delete;
};

// A signal arrived while a section was alive (async-signal-safe flag; cheap to poll).
bool Interrupted();
// kUnavailable naming `what` and the signal: what the interrupted work returns.
Status InterruptedError(const std::string& what);
// After the section: when a signal was noted, take its default action now (the exit status a
// shell expects from Ctrl-C); otherwise nothing.
void RaiseNotedSignal();

}  // namespace loom
