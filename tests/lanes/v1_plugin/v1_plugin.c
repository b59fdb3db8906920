/* A lane plugin built against lane ABI version 1 (the frozen header next to it), as a plugin
 * compiled before version 2 existed is: pipelane must still load it and hand it version-1 create
 * arguments. Lane "v1_counter" counts `steps` steps (one unit each), takes `bytes` from its arena
 * and reports what create() received, so the test can check every field arrived intact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipelane_lane_v1.h"

typedef struct counter {
  long long steps, done;
  char report[8192];
  char output_dir[4096];
  int rank;
  unsigned long long seed;
  int got_memory;
} counter;

static void* v1_create(const pipelane_lane_create_args* args, char* err, size_t errlen) {
  counter* c = (counter*)calloc(1, sizeof *c);
  long long bytes = 64;
  size_t i;
  if (!c) return NULL;
  c->steps = 3;
  for (i = 0; i < args->option_count; ++i) {
    if (strcmp(args->option_keys[i], "steps") == 0) c->steps = atoll(args->option_values[i]);
    if (strcmp(args->option_keys[i], "bytes") == 0) bytes = atoll(args->option_values[i]);
  }
  snprintf(c->output_dir, sizeof c->output_dir, "%s", args->output_dir ? args->output_dir : "");
  c->rank = args->rank;
  c->seed = (unsigned long long)args->seed;
  c->got_memory = args->allocator.allocate(args->allocator.context, (size_t)bytes, "v1 buffer") != NULL;
  if (!c->got_memory) {
    snprintf(err, errlen, "no memory for %lld bytes", bytes);
    free(c);
    return NULL;
  }
  return c;
}

static double v1_step(void* handle, char* err, size_t errlen) {
  counter* c = (counter*)handle;
  (void)err;
  (void)errlen;
  if (c->done >= c->steps) return 0;
  ++c->done;
  return 1;
}

static int v1_finished(const void* handle) { return ((const counter*)handle)->done >= ((const counter*)handle)->steps; }

static int v1_save(const void* handle, char** data, size_t* size, char* err, size_t errlen) {
  char* text = (char*)malloc(32);
  (void)err;
  (void)errlen;
  if (!text) return -1;
  *size = (size_t)snprintf(text, 32, "%lld", ((const counter*)handle)->done);
  *data = text;
  return 0;
}

static void v1_free(char* data) { free(data); }

static int v1_load(void* handle, const char* data, size_t size, char* err, size_t errlen) {
  char text[32];
  if (size >= sizeof text) {
    snprintf(err, errlen, "bad state");
    return -1;
  }
  memcpy(text, data, size);
  text[size] = '\0';
  ((counter*)handle)->done = atoll(text);
  return 0;
}

static const char* v1_report(void* handle) {
  counter* c = (counter*)handle;
  snprintf(c->report, sizeof c->report, "{\"done\": %lld, \"rank\": %d, \"seed\": %llu, \"output_dir\": \"%s\"}", c->done,
           c->rank, c->seed, c->output_dir);
  return c->report;
}

static void v1_destroy(void* handle) { free(handle); }

static const char* const v1_keys[] = {"steps", "bytes", NULL};

static const pipelane_lane_plugin v1_plugin = {
    PIPELANE_LANE_ABI_VERSION, /* 1, from the frozen header */
    "v1_counter", "steps", v1_keys, v1_create, v1_step, v1_finished, v1_save, v1_free, v1_load, v1_report, v1_destroy,
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const pipelane_lane_plugin* pipelane_lane_plugin_v1(void) {
  return &v1_plugin;
}
