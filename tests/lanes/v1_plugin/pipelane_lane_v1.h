/* FROZEN COPY of lanes/pipelane_lane.h as it shipped at lane ABI version 1, so that
 * v1_plugin.c is built exactly as a version-1 plugin was. Never edit: it is the old ABI. */
/* pipelane lane plugins: the versioned C ABI.
 *
 * A plugin is a shared library that exports ONE symbol:
 *
 *     const pipelane_lane_plugin* pipelane_lane_plugin_v1(void);
 *
 * returning a pointer to a static description of the lane (valid until the library is unloaded,
 * which pipelane never does while a lane of it exists). pipelane reads abi_version first and
 * refuses the plugin unless it equals PIPELANE_LANE_ABI_VERSION; only then are the other fields
 * read. Everything crosses the boundary as plain C: no exceptions, no C++ types, no ownership of
 * host memory. Errors come back as a message written into the caller's `err` buffer (at most
 * `errlen` bytes including the terminating NUL).
 *
 * Calls on one handle never overlap (a stage runs its lanes on its own thread), but handles of
 * different stages may live in one process at once: keep no mutable global state.
 *
 * Memory: create() receives an allocator bound to the lane's arena (a hard quota). Allocate
 * working memory through it; it returns zero-filled memory, or NULL when the quota is exhausted
 * (pipelane then quarantines the lane after the call returns, whatever the call reports). There is
 * no free: the arena is released when the lane ends. Small bookkeeping (the handle itself, a
 * report string) may use malloc.
 *
 * Pure C (C99), so a plugin can be written in C, C++ (extern "C"), Rust, Zig, ...
 */
#ifndef PIPELANE_LANE_H
#define PIPELANE_LANE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PIPELANE_LANE_ABI_VERSION 1
#define PIPELANE_LANE_PLUGIN_SYMBOL "pipelane_lane_plugin_v1"

typedef struct pipelane_lane_allocator {
  /* Zero-filled memory of `bytes` bytes from the lane's arena, or NULL over quota. */
  void* (*allocate)(void* context, size_t bytes, const char* what);
  void* context; /* pass back as the first argument */
} pipelane_lane_allocator;

typedef struct pipelane_lane_create_args {
  /* The [lane.NAME] section: option_count pairs, keys and values NUL-terminated. If the plugin
   * lists its keys in pipelane_lane_plugin.option_keys, unknown keys were already rejected by
   * pipelane (with the config file, section and key in the message). */
  size_t option_count;
  const char* const* option_keys;
  const char* const* option_values;
  const char* output_dir; /* the lane's own directory, already created */
  int rank;               /* world rank */
  uint64_t seed;          /* per lane and rank */
  pipelane_lane_allocator allocator;
} pipelane_lane_create_args;

typedef struct pipelane_lane_plugin {
  uint32_t abi_version;  /* PIPELANE_LANE_ABI_VERSION the plugin was built against; FIRST field */
  const char* name;      /* lane name, as used in [lanes] enabled and [lane.NAME] */
  const char* work_unit; /* what step() counts: "bytes", "edges", "images", ... */
  /* NULL-terminated list of the option keys the plugin accepts, or NULL to validate them itself. */
  const char* const* option_keys;

  /* Reads options, allocates, opens inputs. Returns the lane's handle, or NULL with err set. */
  void* (*create)(const pipelane_lane_create_args* args, char* err, size_t errlen);
  /* One bounded unit of work. Returns the work units done (>= 0), or a negative value with err set. */
  double (*step)(void* handle, char* err, size_t errlen);
  /* Non-zero once there is no work left. */
  int (*finished)(const void* handle);
  /* Progress that survives a restart: *data receives a buffer the plugin allocated, released by
   * pipelane with free_buffer; *size its length in bytes (binary allowed). Returns 0 on success,
   * non-zero with err set. */
  int (*save)(const void* handle, char** data, size_t* size, char* err, size_t errlen);
  void (*free_buffer)(char* data);
  /* Restores what save() produced (called after create, before any step). 0 on success. */
  int (*load)(void* handle, const char* data, size_t size, char* err, size_t errlen);
  /* A JSON object describing what the work achieved. The string stays valid until the next call
   * on this handle. May be NULL (no report). */
  const char* (*report_json)(void* handle);
  /* Ends the lane: write outputs, close files, free what malloc gave. The handle is gone after. */
  void (*destroy)(void* handle);
} pipelane_lane_plugin;

typedef const pipelane_lane_plugin* (*pipelane_lane_plugin_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* PIPELANE_LANE_H */
