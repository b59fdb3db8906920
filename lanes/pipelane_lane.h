/* pipelane lane plugins: the versioned C ABI (version 2).
 *
 * A plugin is a shared library that exports ONE symbol:
 *
 *     const pipelane_lane_plugin* pipelane_lane_plugin_v1(void);
 *
 * (the entry point keeps this name in every ABI version, so that any pipelane can read a plugin's
 * abi_version and say which version it was built for). It returns a pointer to a static
 * description of the lane, valid until the library is unloaded (pipelane never unloads it while a
 * lane of it exists). pipelane reads abi_version first and refuses the plugin unless it lies
 * between PIPELANE_LANE_ABI_OLDEST and PIPELANE_LANE_ABI_VERSION; only then are the other fields
 * read. Everything crosses the boundary as plain C: no exceptions, no C++ types, no ownership of
 * host memory. Errors come back as a message written into the caller's `err` buffer (at most
 * `errlen` bytes including the terminating NUL).
 *
 * Versions. 2 added struct_size to both structs (so later versions append fields and each side
 * reads only what the other one has), the device the lane runs on, and where this lane instance
 * sits in the job (world size, instance index and count). A version-1 plugin still loads: it gets
 * version-1 create arguments and runs on the host CPU, whatever device training uses.
 *
 * Steps. The scheduler fits steps into measured pipeline bubbles by their measured cost, so a
 * step must do a bounded and roughly constant amount of work: a fixed-size slice (a chunk of a
 * file, a batch of edges), never "everything done so far again". A lane with 3 steps among its
 * last 16 that took more than 10x their predicted cost is quarantined (torn down, training
 * carries on); a step whose cost keeps growing with progress gets there sooner or later. Keep steps to a few
 * milliseconds: a lane can only fill a bubble longer than its step.
 *
 * Sharding. The same [lanes] configuration runs one instance of the lane on every rank of every
 * stage that runs lanes. An instance that should do its share of one job (count one file, not
 * the whole file once per rank) splits the work by instance_index / instance_count.
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

#define PIPELANE_LANE_ABI_VERSION 2 /* what this header describes */
#define PIPELANE_LANE_ABI_OLDEST 1  /* the oldest version pipelane still loads */
#define PIPELANE_LANE_PLUGIN_SYMBOL "pipelane_lane_plugin_v1"

typedef struct pipelane_lane_allocator {
  /* Zero-filled memory of `bytes` bytes from the lane's arena, or NULL over quota. */
  void* (*allocate)(void* context, size_t bytes, const char* what);
  void* context; /* pass back as the first argument */
} pipelane_lane_allocator;

typedef enum pipelane_lane_device_kind {
  PIPELANE_LANE_DEVICE_CPU = 0, /* host memory, the calling thread */
  PIPELANE_LANE_DEVICE_CUDA = 1
} pipelane_lane_device_kind;

/* The device the lane's stage trains on, and the lane's own stream there. */
typedef struct pipelane_lane_device {
  int32_t kind;  /* a pipelane_lane_device_kind */
  int32_t index; /* device ordinal (the CUDA device number); 0 on the CPU */
  /* Opaque native handle of the lane's low-priority stream: a cudaStream_t on CUDA, NULL on the
   * CPU (there the calling thread is the stream). Work queued on it must be complete when step()
   * returns: the step's cost is what the scheduler measures. */
  void* stream;
} pipelane_lane_device;

typedef struct pipelane_lane_create_args {
  /* sizeof(pipelane_lane_create_args) of the pipelane that calls create(): a field exists only if
   * it ends within struct_size (PIPELANE_LANE_ARGS_HAVE). FIRST field. */
  size_t struct_size;
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
  /* --- version 2 --- */
  pipelane_lane_device device;
  int world_size;     /* ranks in the job */
  int instance_index; /* this instance of the lane among all of the job, 0 .. instance_count-1 */
  int instance_count; /* instances of this lane in the job (one per rank of a stage that runs lanes) */
} pipelane_lane_create_args;

/* Non-zero when `args` (a const pipelane_lane_create_args*) has `field`. */
#define PIPELANE_LANE_ARGS_HAVE(args, field) \
  ((args)->struct_size >= offsetof(pipelane_lane_create_args, field) + sizeof((args)->field))

typedef struct pipelane_lane_plugin {
  uint32_t abi_version; /* PIPELANE_LANE_ABI_VERSION the plugin was built against; FIRST field */
  /* sizeof(pipelane_lane_plugin) as the plugin was built: pipelane reads no field past it. */
  uint32_t struct_size;
  const char* name;      /* lane name, as used in [lanes] enabled and [lane.NAME] */
  const char* work_unit; /* what step() counts: "bytes", "edges", "images", ... */
  /* NULL-terminated list of the option keys the plugin accepts, or NULL to validate them itself. */
  const char* const* option_keys;

  /* Reads options, allocates, opens inputs. Returns the lane's handle, or NULL with err set. */
  void* (*create)(const pipelane_lane_create_args* args, char* err, size_t errlen);
  /* One bounded unit of work (see "Steps" above). Returns the work units done (>= 0), or a
   * negative value with err set. */
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
