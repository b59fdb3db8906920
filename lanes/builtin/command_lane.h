// command: any external program as a lane, time-sliced with job-control signals (the coarse,
// imperative alternative to writing a step()).
//
// [lane.command] options
//   command = ...     run as /bin/sh -c '...' in its own process group (required)
//   slice_ms = 2      how long one step() lets it run            [1, 60000]; short slices fit
//                     more of a pipeline gap (2 ms: 74% harvested in the pp2 bench, 5 ms: 64%)
//   workdir = DIR     its working directory (default: the trainer's)
//
// setup() vforks a child that puts itself in a new process group and execs a shell that stops
// itself before running the command, so nothing of the command runs before the first step (and
// the trainer's memory is never shared copy-on-write, which fork would do). step() sends SIGCONT
// to the group, sleeps slice_ms (returning early if it exits), sends SIGSTOP to the group and
// waits (at most 50 ms) until the shell reports stopped; it returns the CPU milliseconds the
// process tree used in the slice. Work unit: cpu_ms, from each live thread's
// /proc/.../schedstat (nanoseconds) plus reaped children's cutime+cstime (clock ticks), summed
// over the live process tree. report() also gives the CPU the tree used between steps (outside
// gaps), which should stay 0 since it is stopped. stdin is /dev/null, stdout/stderr go to
// OUTPUT_DIR/stdout.txt and stderr.txt, file descriptors above 2 are closed; the child gets
// SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG).
// finished() once the shell exited (reaped; exit code or signal in report(); any processes it
// left in its group are killed). teardown() SIGKILLs the group if still running and reaps it.
// In a lane worker (isolation = process, the default for this lane), which adopts every orphan, a
// process that leaves the group (setsid) is found below the worker: it is stopped and continued
// with the group and killed with it. In the trainer (isolation = thread) it escapes once its
// parent exits. The worker also caps every file the command writes at [lanes] output_mb.
// save()/load(): the counters and, once it finished, the exit status; a process cannot be
// restored, so after load() an unfinished command starts over, a finished one is not rerun.
#pragma once
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_command_lane();

}  // namespace pipelane
