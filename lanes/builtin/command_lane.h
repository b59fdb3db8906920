// command: any external program as a lane, time-sliced with job-control signals (the coarse,
// imperative alternative to writing a step()).
//
// [lane.command] options
//   command = ...     run as /bin/sh -c '...' in its own process group (required)
//   slice_ms = 5      how long one step() lets it run            [1, 60000]
//   workdir = DIR     its working directory (default: the trainer's)
//
// setup() forks a child that puts itself in a new process group and stops itself before exec,
// so nothing of the command runs before the first step. step() sends SIGCONT to the group, sleeps
// slice_ms (returning early if it exits), sends SIGSTOP to the group and waits (at most 50 ms)
// until the shell reports stopped; it returns the CPU milliseconds the process tree used in the slice. Work unit:
// cpu_ms. CPU time is utime+stime (+cutime+cstime of reaped children) from /proc/PID/stat, summed
// over the live process tree, so it has clock-tick resolution (10 ms): one slice reads 0 or 10,
// the sums are right. report() also gives the CPU the tree used between steps (outside gaps),
// which should stay 0 since it is stopped. stdin is /dev/null, stdout/stderr go to
// OUTPUT_DIR/stdout.txt and stderr.txt, file descriptors above 2 are closed; the child gets
// SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG).
// finished() once the shell exited (reaped; exit code or signal in report(); any processes it
// left in its group are killed). teardown() SIGKILLs the group if still running and reaps it.
// save()/load(): the counters and, once it finished, the exit status; a process cannot be
// restored, so after load() an unfinished command starts over, a finished one is not rerun.
#pragma once
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_command_lane();

}  // namespace pipelane
