/* A lane plugin written as a hostile plugin author would (issue: lanes as untrusted code). It
 * does `good_steps` honest steps, then, depending on `mode`, one attack per step:
 *   none         keeps behaving
 *   killer       SIGTERM, SIGUSR1 and SIGKILL to every process it can see, to every ancestor found
 *                by walking /proc/PID/stat (the way up to the trainer and mpirun), to its process
 *                group and, last, kill(-1, SIGKILL)
 *   spinner      starts a thread in create() that spins forever (and otherwise behaves)
 *   daemon       fork, setsid, fork: a daemon that appends to <output_dir>/daemon.txt every 10 ms
 *   memfd        3 x memfd_create, 200 MiB allocated in each (shared memory RLIMIT_AS cannot see);
 *                fallocate, not write: it reaches the cgroup's limit in about a fifth of the time
 *                (0.14 s against 0.63 s for 336 MiB here), well inside a step's 0.5 s deadline
 *   forkbomb     forks until fork fails; the children wait forever
 *   tamper       pwrites a digit into <output_dir>/../../../metrics.jsonl, flips a bit in every
 *                checkpoint file it finds below <output_dir>/../../../checkpoints, writes into /etc,
 *                the plugin's own directory and $HOME; counts what succeeded ("tampered")
 *   bigstate     save() returns `state_mb` (30) MiB
 *   hugeframe    writes a frame header claiming 1 GiB on the worker's socket (fd 3)
 *   forged       writes, from inside step(), a well-formed step reply in the worker's place: units
 *                NaN, finished, 2^60 bytes of memory
 *   forked       a forked copy of the worker writes an error message as a step reply on the socket
 * The lane's name is ATTACK_LANE_NAME (several copies of the library run in one job).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lanes/pipelane_lane.h"

#ifndef ATTACK_LANE_NAME
#define ATTACK_LANE_NAME "attack"
#endif

typedef struct {
  char mode[32];
  long good_steps;
  long state_mb;
  long steps;
  long tampered;  /* attacks on training's files or the system that succeeded */
  long signalled; /* processes it could signal */
  char output_dir[4096];
} attack;

static const char* const keys[] = {"mode", "good_steps", "state_mb", NULL};

static void* spin(void* unused) {
  (void)unused;
  for (;;) {
  }
  return NULL;
}

static void* create(const pipelane_lane_create_args* args, char* err, size_t errlen) {
  (void)err;
  (void)errlen;
  attack* a = calloc(1, sizeof *a);
  if (!a) return NULL;
  strcpy(a->mode, "none");
  a->good_steps = 4;
  a->state_mb = 30;
  for (size_t i = 0; i < args->option_count; ++i) {
    const char* k = args->option_keys[i];
    const char* v = args->option_values[i];
    if (!strcmp(k, "mode")) snprintf(a->mode, sizeof a->mode, "%s", v);
    else if (!strcmp(k, "good_steps")) a->good_steps = atol(v);
    else if (!strcmp(k, "state_mb")) a->state_mb = atol(v);
  }
  snprintf(a->output_dir, sizeof a->output_dir, "%s", args->output_dir ? args->output_dir : "");
  if (!strcmp(a->mode, "spinner")) {
    pthread_t thread;
    pthread_create(&thread, NULL, spin, NULL);
    pthread_detach(thread);
  }
  return a;
}

static int parent_of(int pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  const int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  const char* close = ok ? strrchr(line, ')') : NULL;
  int ppid = 0;
  if (close) sscanf(close + 2, "%*c %d", &ppid);
  return ppid;
}

static void killer(attack* a) {
  const int me = getpid();
  for (int pid = parent_of(me); pid > 0; pid = parent_of(pid))  /* up to mpirun */
    if (kill(pid, SIGKILL) == 0) ++a->signalled;
  DIR* proc = opendir("/proc");
  for (struct dirent* e; proc && (e = readdir(proc));) {
    const int pid = atoi(e->d_name);
    if (pid <= 0 || pid == me) continue;
    const int sigs[] = {SIGTERM, SIGUSR1, SIGKILL};
    for (int i = 0; i < 3; ++i)
      if (kill(pid, sigs[i]) == 0) ++a->signalled;
  }
  if (proc) closedir(proc);
  kill(0, SIGUSR1);
  kill(-1, SIGKILL);
}

static void daemonize(const attack* a) {
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) {
      char path[4200];
      snprintf(path, sizeof path, "%s/daemon.txt", a->output_dir);
      for (;;) {
        FILE* f = fopen(path, "a");
        if (f) {
          fputs("alive\n", f);
          fclose(f);
        }
        usleep(10000);
      }
    }
    _exit(0);
  }
  if (child > 0) waitpid(child, NULL, 0);
}

static void memfd_hog(void) {
  static char chunk[1 << 20];
  memset(chunk, 7, sizeof chunk);
  for (int i = 0; i < 3; ++i) {
    const int fd = memfd_create("hog", 0);
    if (fd >= 0 && fallocate(fd, 0, 0, (off_t)200 << 20) == 0) continue;
    for (int mb = 0; fd >= 0 && mb < 200; ++mb)  /* a kernel without fallocate on memfd */
      if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) break;
    /* kept open: the memory stays */
  }
}

static void fork_bomb(void) {
  for (int i = 0; i < 100000; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    if (pid < 0) break;
  }
}

static void flip_files_below(attack* a, const char* dir, int depth) {
  DIR* d = opendir(dir);
  for (struct dirent* e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_type == DT_DIR && depth < 4) {
      flip_files_below(a, path, depth + 1);
      continue;
    }
    const int fd = open(path, O_RDWR);
    unsigned char byte = 0;
    if (fd >= 0 && pread(fd, &byte, 1, 100) == 1) {
      byte ^= 1;
      if (pwrite(fd, &byte, 1, 100) == 1) ++a->tampered;
    }
    if (fd >= 0) close(fd);
  }
  if (d) closedir(d);
}

static void tamper(attack* a) {
  char path[8192];
  snprintf(path, sizeof path, "%s/../../../metrics.jsonl", a->output_dir);
  int fd = open(path, O_WRONLY);
  if (fd >= 0 && pwrite(fd, "1", 1, 30) == 1) ++a->tampered;
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "%s/../../../checkpoints", a->output_dir);
  flip_files_below(a, path, 0);
  const char* home = getenv("HOME");
  const char* targets[] = {"/etc/pipelane_lane_was_here", "/usr/pipelane_lane_was_here", home ? home : "/root"};
  for (int i = 0; i < 3; ++i) {
    snprintf(path, sizeof path, "%s%s", targets[i], i == 2 ? "/pipelane_lane_was_here" : "");
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
      ++a->tampered;
      close(fd);
      unlink(path);
    }
  }
}

/* The worker's frame header (lanes/isolation/worker_protocol.cpp). */
typedef struct {
  uint32_t op, sequence;
  uint64_t size;
} frame_header;
typedef struct {
  double units, wall_s, cpu_s;
  int64_t involuntary_switches;
  double waiting_s;
  uint64_t memory_bytes;
  uint8_t finished;
} step_result;

/* Inside step() the worker is not reading the socket, so a reply written here is the one the trainer
 * reads, every time (a thread racing the worker for the next request won on some machines and never
 * on others). Then it waits to be killed, so that the worker's own reply never follows and the forged
 * one is judged for what it says, not as "more than one reply". The sequence number is the one the
 * trainer waits for when the lane only ever got setup (1) and steps (2, 3, ...); any other guess is
 * refused as "a reply to another request". */
static void forge(const attack* a) {
  step_result r = {NAN, 0.001, 0.001, 0, -1, (uint64_t)1 << 60, 1};
  frame_header reply = {100, (uint32_t)(a->steps + 2), sizeof r};
  (void)!write(3, &reply, sizeof reply);
  (void)!write(3, &r, sizeof r);
  sleep(60);
}

static void misbehave(attack* a) {
  const char* m = a->mode;
  if (!strcmp(m, "killer")) killer(a);
  else if (!strcmp(m, "daemon")) daemonize(a);
  else if (!strcmp(m, "memfd")) memfd_hog();
  else if (!strcmp(m, "forkbomb")) fork_bomb();
  else if (!strcmp(m, "tamper")) tamper(a);
  else if (!strcmp(m, "hugeframe")) {
    frame_header h = {100, 0, (uint64_t)1 << 30};
    (void)!write(3, &h, sizeof h);
  } else if (!strcmp(m, "forged") && a->steps == a->good_steps) {
    forge(a);
  } else if (!strcmp(m, "forked")) {
    const pid_t pid = fork();
    if (pid == 0) {
      const char message[] = "LlThis error message is read as a step result by a trusting trainer";
      frame_header h = {100, 0, sizeof(step_result)};
      (void)!write(3, &h, sizeof h);
      (void)!write(3, message, sizeof(step_result));
      _exit(0);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
  }
}

static double step(void* handle, char* err, size_t errlen) {
  (void)err;
  (void)errlen;
  attack* a = handle;
  if (a->steps >= a->good_steps) misbehave(a);
  ++a->steps;
  return 1.0;
}

static int finished(const void* handle) {
  (void)handle;
  return 0;
}

static int save(const void* handle, char** data, size_t* size, char* err, size_t errlen) {
  (void)err;
  (void)errlen;
  const attack* a = handle;
  const size_t bytes = !strcmp(a->mode, "bigstate") ? (size_t)a->state_mb << 20 : 32;
  *data = malloc(bytes);
  if (!*data) return 1;
  memset(*data, 'x', bytes);
  *size = !strcmp(a->mode, "bigstate") ? bytes : (size_t)snprintf(*data, 32, "%ld", a->steps);
  return 0;
}

static void free_buffer(char* data) { free(data); }

static int load(void* handle, const char* data, size_t size, char* err, size_t errlen) {
  attack* a = handle;
  char text[32] = {0};
  if (size >= sizeof text) {
    snprintf(err, errlen, "bad state");
    return 1;
  }
  memcpy(text, data, size);
  a->steps = atol(text);
  return 0;
}

static const char* report_json(void* handle) {
  static __thread char text[192];
  const attack* a = handle;
  snprintf(text, sizeof text, "{\"mode\": \"%s\", \"steps\": %ld, \"tampered\": %ld, \"signalled\": %ld}", a->mode,
           a->steps, a->tampered, a->signalled);
  return text;
}

static void destroy(void* handle) { free(handle); }

static const pipelane_lane_plugin plugin = {
    .abi_version = PIPELANE_LANE_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(pipelane_lane_plugin),
    .name = ATTACK_LANE_NAME,
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
