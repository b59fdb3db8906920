// A run directory: config.ini (as resolved), metrics.jsonl (one object per step) and, only once
// the run has finished, summary.json. A run that fails leaves no summary.json, so it never looks
// complete; a stale one from an earlier run in the same directory is removed at the start. Every
// write is checked: a full disk (or a file size limit) stops the run at the write that hit it, with
// the system's reason, instead of leaving a metrics.jsonl found short at the end.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/checkpoint/durable_file.h"
#include "trainer/run/run_summary.h"

namespace pipelane {

class RunDirectory {
 public:
  // Creates the directory, writes config.ini, truncates metrics.jsonl, removes summary.json and
  // the temporary files of writes that were interrupted. Throws FileError.
  RunDirectory(const std::string& path, const std::string& resolved_config_ini);
  void append_metrics(const nlohmann::json& row);  // one line, written through; FileError on failure
  // Written under a temporary name and renamed, so a crash mid-write leaves no partial summary.
  void write_summary(const RunSummary& summary);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  AppendFile metrics_;
};

}  // namespace pipelane
