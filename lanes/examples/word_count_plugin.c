/* word_count: an example pipelane lane plugin, in plain C against lanes/pipelane_lane.h (ABI 2).
 *
 * Counts the words, lines and bytes of a text file, one fixed-size chunk per step (a step's cost
 * stays bounded and constant, which is what the gap scheduler needs to fit it into pipeline
 * bubbles). Every rank that runs lanes runs an instance of this lane; with `shard = true` (the
 * default) instance i of n counts bytes [size*i/n, size*(i+1)/n) of the file, so the instances'
 * counts add up to the file's, however many ranks there are. Progress (shard, offset and counts)
 * survives a restart through save/load; when the shard's last chunk is counted its totals are
 * written to <output_dir>/word_count.json.
 *
 *   [lanes]
 *   enabled = word_count
 *   plugins = build/lanes/examples/libpipelane_example_lane.so
 *
 *   [lane.word_count]
 *   input = data/some.txt      ; required
 *   chunk_bytes = 65536        ; bytes read per step (from the lane's arena), 1 .. 64 MiB
 *   shard = true               ; false: every instance counts the whole file
 *
 * A word is a maximal run of non-whitespace bytes, counted where it starts: a word split between
 * two chunks, or two shards, counts once.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanes/pipelane_lane.h"

typedef struct word_count {
  char input[4096];
  char output_path[4096];
  FILE* file;
  long long file_size;
  long long start, end; /* this instance's shard of the file: bytes [start, end) */
  long long offset;     /* bytes before it are counted (start <= offset <= end) */
  long long words;
  long long lines;
  int in_word; /* the byte before `offset` was part of a word (a word continuing into the shard) */
  int instance, instances;
  char device[32]; /* where the stage trains, e.g. "cpu" or "cuda:1" (this lane computes on the host) */
  int written; /* totals written to output_path */
  size_t chunk_bytes;
  unsigned char* chunk; /* from the lane's arena */
  char report[16384];
} word_count;

static void set_error(char* err, size_t errlen, const char* format, ...) {
  va_list args;
  if (!err || errlen == 0) return;
  va_start(args, format);
  vsnprintf(err, errlen, format, args);
  va_end(args);
}

/* `text` as a JSON string body (quotes and backslashes escaped, control bytes dropped). */
static const char* json_text(const char* text, char* out, size_t size) {
  size_t j = 0;
  for (; *text && j + 2 < size; ++text) {
    if (*text == '"' || *text == '\\') out[j++] = '\\';
    if ((unsigned char)*text >= 0x20) out[j++] = *text;
  }
  out[j] = '\0';
  return out;
}

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static int write_totals(word_count* wc, char* err, size_t errlen) {
  FILE* out;
  if (wc->written || wc->output_path[0] == '\0') return 0;
  out = fopen(wc->output_path, "w");
  if (!out) {
    set_error(err, errlen, "cannot write %s", wc->output_path);
    return -1;
  }
  char file[8192];
  fprintf(out, "{\"file\": \"%s\", \"start\": %lld, \"bytes\": %lld, \"words\": %lld, \"lines\": %lld}\n",
          json_text(wc->input, file, sizeof file), wc->start, wc->end - wc->start, wc->words, wc->lines);
  fclose(out);
  wc->written = 1;
  return 0;
}

static void* wc_create(const pipelane_lane_create_args* args, char* err, size_t errlen) {
  word_count* wc;
  const char* input = NULL;
  long long chunk = 65536;
  int shard = 1;
  size_t i;
  for (i = 0; i < args->option_count; ++i) {
    if (strcmp(args->option_keys[i], "input") == 0) {
      input = args->option_values[i];
    } else if (strcmp(args->option_keys[i], "chunk_bytes") == 0) {
      char* end = NULL;
      chunk = strtoll(args->option_values[i], &end, 10);
      if (!*args->option_values[i] || *end != '\0' || chunk < 1 || chunk > (64LL << 20)) {
        set_error(err, errlen, "chunk_bytes = '%s': expected an integer in [1, 67108864]", args->option_values[i]);
        return NULL;
      }
    } else if (strcmp(args->option_keys[i], "shard") == 0) {
      const char* v = args->option_values[i];
      if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) {
        shard = 1;
      } else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) {
        shard = 0;
      } else {
        set_error(err, errlen, "shard = '%s': expected true or false", v);
        return NULL;
      }
    }
  }
  if (!input || !*input) {
    set_error(err, errlen, "[lane.word_count] input is required (the text file to count)");
    return NULL;
  }
  wc = (word_count*)calloc(1, sizeof *wc);
  if (!wc) {
    set_error(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(wc->input, sizeof wc->input, "%s", input);
  if (args->output_dir && *args->output_dir)
    snprintf(wc->output_path, sizeof wc->output_path, "%s/word_count.json", args->output_dir);
  wc->chunk_bytes = (size_t)chunk;
  wc->chunk = (unsigned char*)args->allocator.allocate(args->allocator.context, wc->chunk_bytes, "word_count chunk");
  if (!wc->chunk) {
    set_error(err, errlen, "chunk of %lld bytes does not fit the lane's memory quota", chunk);
    free(wc);
    return NULL;
  }
  wc->file = fopen(input, "rb");
  if (!wc->file) {
    set_error(err, errlen, "cannot open input '%s'", input);
    free(wc);
    return NULL;
  }
  fseek(wc->file, 0, SEEK_END);
  wc->file_size = ftell(wc->file);
  /* Fields of ABI 2 exist only if the calling pipelane has them (struct_size). */
  wc->instance = 0;
  wc->instances = 1;
  snprintf(wc->device, sizeof wc->device, "cpu");
  if (PIPELANE_LANE_ARGS_HAVE(args, device) && args->device.kind == PIPELANE_LANE_DEVICE_CUDA)
    snprintf(wc->device, sizeof wc->device, "cuda:%d", (int)args->device.index);
  if (shard && PIPELANE_LANE_ARGS_HAVE(args, instance_count) && args->instance_count > 1) {
    wc->instance = args->instance_index;
    wc->instances = args->instance_count;
  }
  wc->start = wc->file_size * wc->instance / wc->instances;
  wc->end = wc->file_size * (wc->instance + 1) / wc->instances;
  wc->offset = wc->start;
  if (wc->start > 0) { /* a word that began in the shard before is that shard's */
    fseek(wc->file, (long)(wc->start - 1), SEEK_SET);
    wc->in_word = !is_space((unsigned char)fgetc(wc->file));
  }
  return wc;
}

static double wc_step(void* handle, char* err, size_t errlen) {
  word_count* wc = (word_count*)handle;
  size_t n, i, want = wc->chunk_bytes;
  if (wc->offset >= wc->end) return 0;
  if ((long long)want > wc->end - wc->offset) want = (size_t)(wc->end - wc->offset);
  if (fseek(wc->file, (long)wc->offset, SEEK_SET) != 0) {
    set_error(err, errlen, "cannot seek '%s' to %lld", wc->input, wc->offset);
    return -1;
  }
  n = fread(wc->chunk, 1, want, wc->file);
  if (n == 0) {
    set_error(err, errlen, "cannot read '%s' at %lld (file shrank?)", wc->input, wc->offset);
    return -1;
  }
  for (i = 0; i < n; ++i) {
    const unsigned char c = wc->chunk[i];
    if (c == '\n') ++wc->lines;
    if (is_space(c)) {
      wc->in_word = 0;
    } else if (!wc->in_word) {
      wc->in_word = 1;
      ++wc->words;
    }
  }
  wc->offset += (long long)n;
  if (wc->offset >= wc->end && write_totals(wc, err, errlen) != 0) return -1;
  return (double)n;
}

static int wc_finished(const void* handle) {
  const word_count* wc = (const word_count*)handle;
  return wc->offset >= wc->end;
}

static int wc_save(const void* handle, char** data, size_t* size, char* err, size_t errlen) {
  const word_count* wc = (const word_count*)handle;
  char* text = (char*)malloc(128);
  if (!text) {
    set_error(err, errlen, "out of memory");
    return -1;
  }
  *size = (size_t)snprintf(text, 128, "word_count v2 %lld %lld %lld %lld %lld %d", wc->start, wc->end, wc->offset,
                           wc->words, wc->lines, wc->in_word);
  *data = text;
  return 0;
}

static void wc_free_buffer(char* data) { free(data); }

static int wc_load(void* handle, const char* data, size_t size, char* err, size_t errlen) {
  word_count* wc = (word_count*)handle;
  char text[128];
  long long start, end, offset, words, lines;
  int in_word;
  if (size >= sizeof text) size = sizeof text - 1;
  memcpy(text, data, size);
  text[size] = '\0';
  if (sscanf(text, "word_count v2 %lld %lld %lld %lld %lld %d", &start, &end, &offset, &words, &lines, &in_word) != 6 ||
      offset < start || offset > end) {
    set_error(err, errlen, "saved state '%s' is not this lane's", text);
    return -1;
  }
  if (start != wc->start || end != wc->end) {
    set_error(err, errlen, "saved state counts bytes [%lld, %lld) of '%s', this instance bytes [%lld, %lld)", start,
              end, wc->input, wc->start, wc->end);
    return -1;
  }
  wc->offset = offset;
  wc->words = words;
  wc->lines = lines;
  wc->in_word = in_word;
  return 0;
}

static const char* wc_report(void* handle) {
  word_count* wc = (word_count*)handle;
  char file[4096 * 2 + 8];
  snprintf(wc->report, sizeof wc->report,
           "{\"file\": \"%s\", \"bytes_counted\": %lld, \"file_bytes\": %lld, \"words\": %lld, \"lines\": %lld, "
           "\"instance\": %d, \"instances\": %d, \"device\": \"%s\"}",
           json_text(wc->input, file, sizeof file), wc->offset - wc->start, wc->file_size, wc->words, wc->lines,
           wc->instance, wc->instances, wc->device);
  return wc->report;
}

static void wc_destroy(void* handle) {
  word_count* wc = (word_count*)handle;
  if (wc->file) fclose(wc->file);
  free(wc); /* the chunk belongs to the arena */
}

static const char* const wc_option_keys[] = {"input", "chunk_bytes", "shard", NULL};

static const pipelane_lane_plugin wc_plugin = {
    PIPELANE_LANE_ABI_VERSION,
    (uint32_t)sizeof(pipelane_lane_plugin),
    "word_count",
    "bytes",
    wc_option_keys,
    wc_create,
    wc_step,
    wc_finished,
    wc_save,
    wc_free_buffer,
    wc_load,
    wc_report,
    wc_destroy,
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const pipelane_lane_plugin* pipelane_lane_plugin_v1(void) {
  return &wc_plugin;
}
