/* word_count: an example pipelane lane plugin, in plain C against lanes/pipelane_lane.h.
 *
 * Counts the words, lines and bytes of a text file, one chunk per step, so the gap scheduler can
 * fit the work into pipeline bubbles. Progress (offset and counts) survives a restart through
 * save/load; when the last chunk is counted the totals are written to <output_dir>/word_count.json.
 *
 *   [lanes]
 *   enabled = word_count
 *   plugins = build/lanes/examples/libpipelane_example_lane.so
 *
 *   [lane.word_count]
 *   input = data/some.txt      ; required
 *   chunk_bytes = 65536        ; bytes read per step (from the lane's arena), 1 .. 64 MiB
 *
 * A word is a maximal run of non-whitespace bytes; a word split between two chunks counts once.
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
  long long offset; /* bytes counted so far */
  long long words;
  long long lines;
  int in_word; /* the byte before `offset` was part of a word */
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
  fprintf(out, "{\"file\": \"%s\", \"bytes\": %lld, \"words\": %lld, \"lines\": %lld}\n",
          json_text(wc->input, file, sizeof file), wc->offset, wc->words, wc->lines);
  fclose(out);
  wc->written = 1;
  return 0;
}

static void* wc_create(const pipelane_lane_create_args* args, char* err, size_t errlen) {
  word_count* wc;
  const char* input = NULL;
  long long chunk = 65536;
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
  fseek(wc->file, 0, SEEK_SET);
  return wc;
}

static double wc_step(void* handle, char* err, size_t errlen) {
  word_count* wc = (word_count*)handle;
  size_t n, i;
  if (wc->offset >= wc->file_size) return 0;
  if (fseek(wc->file, (long)wc->offset, SEEK_SET) != 0) {
    set_error(err, errlen, "cannot seek '%s' to %lld", wc->input, wc->offset);
    return -1;
  }
  n = fread(wc->chunk, 1, wc->chunk_bytes, wc->file);
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
  if (wc->offset >= wc->file_size && write_totals(wc, err, errlen) != 0) return -1;
  return (double)n;
}

static int wc_finished(const void* handle) {
  const word_count* wc = (const word_count*)handle;
  return wc->offset >= wc->file_size;
}

static int wc_save(const void* handle, char** data, size_t* size, char* err, size_t errlen) {
  const word_count* wc = (const word_count*)handle;
  char* text = (char*)malloc(128);
  if (!text) {
    set_error(err, errlen, "out of memory");
    return -1;
  }
  *size = (size_t)snprintf(text, 128, "word_count v1 %lld %lld %lld %d", wc->offset, wc->words, wc->lines, wc->in_word);
  *data = text;
  return 0;
}

static void wc_free_buffer(char* data) { free(data); }

static int wc_load(void* handle, const char* data, size_t size, char* err, size_t errlen) {
  word_count* wc = (word_count*)handle;
  char text[128];
  long long offset, words, lines;
  int in_word;
  if (size >= sizeof text) size = sizeof text - 1;
  memcpy(text, data, size);
  text[size] = '\0';
  if (sscanf(text, "word_count v1 %lld %lld %lld %d", &offset, &words, &lines, &in_word) != 4 || offset < 0 ||
      offset > wc->file_size) {
    set_error(err, errlen, "saved state '%s' does not fit input '%s' (%lld bytes)", text, wc->input, wc->file_size);
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
           "{\"file\": \"%s\", \"bytes_counted\": %lld, \"file_bytes\": %lld, \"words\": %lld, \"lines\": %lld}",
           json_text(wc->input, file, sizeof file), wc->offset, wc->file_size, wc->words, wc->lines);
  return wc->report;
}

static void wc_destroy(void* handle) {
  word_count* wc = (word_count*)handle;
  if (wc->file) fclose(wc->file);
  free(wc); /* the chunk belongs to the arena */
}

static const char* const wc_option_keys[] = {"input", "chunk_bytes", NULL};

static const pipelane_lane_plugin wc_plugin = {
    PIPELANE_LANE_ABI_VERSION,
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
