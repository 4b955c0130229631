"""Scheduling helpers shared by the benchmark drivers (bench_core.py, serve/run_loom.py)."""
import os


def enter_priority_session(priority):
    """Moves the calling process into a session of its own whose scheduler autogroup gets niceness
    `priority` (with autogroups, a plain nice value only orders processes within one session),
    and sets its own niceness too. Needs root; 0 leaves priorities alone; failures are ignored."""
    if not priority:
        return
    try:
        os.setsid()
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(priority))
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, priority)
    except OSError:
        pass
