/* A lane plugin that misbehaves on purpose, to show that nothing a lane does can hurt training.
 * It does `good_steps` honest steps (each spinning `step_us` microseconds), then, depending on
 * `mode`:
 *   none            keeps behaving
 *   segfault        writes through a null pointer
 *   abort           calls abort()
 *   exit0           calls exit(0) (the process ends "successfully")
 *   spin            never returns from the step (a busy loop)
 *   block_read      never returns from the step (blocks reading an empty pipe)
 *   heap_overflow   writes far past the end of a 16-byte malloc block
 *   arena_overflow  writes far past the end of its arena block
 *   child           forks a child that spins forever, and returns
 *   setsid_child    double-forks a grandchild in a new session (setsid) that spins forever
 *   fesetround      switches rounding to FE_UPWARD and turns flush-to-zero/denormals-are-zero off
 *   threads         sets the OpenMP and OpenBLAS thread counts to 1
 *   malloc          mallocs `malloc_mb` (2) MiB every step and never frees it (no NULL check); with
 *                   malloc_touch = 1 (the default) it writes every byte, with 0 only the first
 *   slow            every other step spins `slow_factor` x step_us
 * The lane's pid and the pids of processes it starts are appended to <output_dir>/pids.txt so a
 * test can check that none is left. The lane's name is HOSTILE_LANE_NAME (several copies of the
 * library, each with its own name, can run in one job).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fenv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "lanes/pipelane_lane.h"

#ifndef HOSTILE_LANE_NAME
#define HOSTILE_LANE_NAME "hostile"
#endif

typedef struct {
  char mode[32];
  long good_steps;
  long step_us;
  long slow_factor;
  long malloc_mb;
  long malloc_touch;
  long steps;
  char pids_path[4096];
  volatile char* arena_block;
  void* leaked;
} hostile;

static const char* const keys[] = {"mode", "good_steps", "step_us", "slow_factor", "malloc_mb", "malloc_touch", NULL};

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void spin_us(double us) {
  const double end = now_us() + us;
  while (now_us() < end) {
  }
}

static void note_pid(const hostile* h, pid_t pid) {
  if (!h->pids_path[0]) return;
  FILE* f = fopen(h->pids_path, "a");
  if (!f) return;
  fprintf(f, "%d\n", (int)pid);
  fclose(f);
}

static void* create(const pipelane_lane_create_args* args, char* err, size_t errlen) {
  hostile* h = calloc(1, sizeof *h);
  if (!h) return NULL;
  strcpy(h->mode, "none");
  h->good_steps = 3;
  h->step_us = 200;
  h->slow_factor = 200;
  h->malloc_mb = 2;
  h->malloc_touch = 1;
  for (size_t i = 0; i < args->option_count; ++i) {
    const char* k = args->option_keys[i];
    const char* v = args->option_values[i];
    if (!strcmp(k, "mode")) snprintf(h->mode, sizeof h->mode, "%s", v);
    else if (!strcmp(k, "good_steps")) h->good_steps = atol(v);
    else if (!strcmp(k, "step_us")) h->step_us = atol(v);
    else if (!strcmp(k, "slow_factor")) h->slow_factor = atol(v);
    else if (!strcmp(k, "malloc_mb")) h->malloc_mb = atol(v);
    else if (!strcmp(k, "malloc_touch")) h->malloc_touch = atol(v);
  }
  if (args->output_dir && *args->output_dir)
    snprintf(h->pids_path, sizeof h->pids_path, "%s/pids.txt", args->output_dir);
  h->arena_block = args->allocator.allocate(args->allocator.context, 64, "hostile block");
  if (!h->arena_block) {
    snprintf(err, errlen, "no arena");
    free(h);
    return NULL;
  }
  note_pid(h, getpid());
  return h;
}

static void spin_forever(void) {
  for (;;) {
  }
}

static void misbehave(hostile* h) {
  const char* m = h->mode;
  if (!strcmp(m, "segfault")) {
    volatile int* nothing = NULL;
    *nothing = 1;
  } else if (!strcmp(m, "abort")) {
    abort();
  } else if (!strcmp(m, "exit0")) {
    exit(0);
  } else if (!strcmp(m, "spin")) {
    spin_forever();
  } else if (!strcmp(m, "block_read")) {
    int fds[2];
    char c;
    if (pipe(fds) == 0) (void)!read(fds[0], &c, 1);
  } else if (!strcmp(m, "heap_overflow")) {
    volatile char* p = malloc(16);
    for (size_t i = 0; i < ((size_t)1 << 32); ++i) p[i] = (char)0xAB;
  } else if (!strcmp(m, "arena_overflow")) {
    for (size_t i = 0; i < ((size_t)1 << 32); ++i) h->arena_block[i] = (char)0xAB;
  } else if (!strcmp(m, "child")) {
    const pid_t pid = fork();
    if (pid == 0) spin_forever();
    if (pid > 0) note_pid(h, pid);
  } else if (!strcmp(m, "setsid_child")) {
    int fds[2];
    if (pipe(fds) != 0) return;
    const pid_t pid = fork();
    if (pid == 0) {
      setsid();
      const pid_t grandchild = fork();
      if (grandchild == 0) {
        const pid_t me = getpid();
        (void)!write(fds[1], &me, sizeof me);
        spin_forever();
      }
      _exit(0);
    }
    pid_t grandchild = 0;
    if (pid > 0 && read(fds[0], &grandchild, sizeof grandchild) == (ssize_t)sizeof grandchild) {
      note_pid(h, grandchild);
      waitpid(pid, NULL, 0);  /* the grandchild is an orphan now */
    }
    close(fds[0]);
    close(fds[1]);
  } else if (!strcmp(m, "fesetround")) {
    fesetround(FE_UPWARD);
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() & ~0x8040u); /* FTZ (bit 15) and DAZ (bit 6) off */
#endif
  } else if (!strcmp(m, "threads")) {
    void (*omp_set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    void (*blas_set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    if (omp_set) omp_set(1);
    if (blas_set) blas_set(1);
  } else if (!strcmp(m, "malloc")) {
    const size_t bytes = (size_t)h->malloc_mb << 20;
    void** p = malloc(bytes);
    if (h->malloc_touch) memset(p, 1, bytes);
    *p = h->leaked; /* kept reachable, so the compiler cannot drop the allocation */
    h->leaked = p;
  } else if (!strcmp(m, "slow")) {
    if (h->steps % 2) spin_us((double)h->step_us * (double)h->slow_factor);
  }
}

static double step(void* handle, char* err, size_t errlen) {
  (void)err;
  (void)errlen;
  hostile* h = handle;
  spin_us((double)h->step_us);
  if (h->steps >= h->good_steps) misbehave(h);
  ++h->steps;
  return 1.0;
}

static int finished(const void* handle) {
  (void)handle;
  return 0;
}

static int save(const void* handle, char** data, size_t* size, char* err, size_t errlen) {
  (void)err;
  (void)errlen;
  const hostile* h = handle;
  *data = malloc(32);
  if (!*data) return 1;
  *size = (size_t)snprintf(*data, 32, "%ld", h->steps);
  return 0;
}

static void free_buffer(char* data) { free(data); }

static int load(void* handle, const char* data, size_t size, char* err, size_t errlen) {
  hostile* h = handle;
  char text[32] = {0};
  if (size >= sizeof text) {
    snprintf(err, errlen, "bad state");
    return 1;
  }
  memcpy(text, data, size);
  h->steps = atol(text);
  return 0;
}

static const char* report_json(void* handle) {
  static __thread char text[128];
  const hostile* h = handle;
  snprintf(text, sizeof text, "{\"mode\": \"%s\", \"steps\": %ld}", h->mode, h->steps);
  return text;
}

static void destroy(void* handle) { free(handle); }

static const pipelane_lane_plugin plugin = {
    .abi_version = PIPELANE_LANE_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(pipelane_lane_plugin),
    .name = HOSTILE_LANE_NAME,
    .work_unit = "steps",
    .option_keys = keys,
    .create = create,
    .step = step,
    .finished = finished,
    .save = save,
    .free_buffer = free_buffer,
    .load = load,
    .report_json = report_json,
    .destroy = destroy,
};

__attribute__((visibility("default"))) const pipelane_lane_plugin* pipelane_lane_plugin_v1(void) { return &plugin; }
