// Loading a page in headless Chromium from tests: the DOM after its scripts ran, every console
// message it printed, and a screenshot. Chromium comes from Debian's `chromium` package
// (scripts/setup.sh); tests skip with a message where it is absent.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pipelane::test_support {

// PIPELANE_CHROMIUM, else the first of chromium / chromium-browser / google-chrome on PATH; "" if none.
inline std::string find_chromium() {
  if (const char* env = std::getenv("PIPELANE_CHROMIUM")) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      const std::filesystem::path candidate = std::filesystem::path(dir) / name;
      std::error_code ec;
      if (std::filesystem::exists(candidate, ec)) return candidate.string();
    }
  return "";
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct BrowserResult {
  int exit_code = -1;
  std::string dom;                            // --dump-dom: the document after its scripts ran
  std::vector<std::string> console_messages;  // "CONSOLE" lines of Chromium's log (any level)
  std::string log;                            // Chromium's whole stderr, for failure messages
};

// Loads `page` (a file) headless, without GPU or sandbox (containers run as root), in a window of
// `width` x `height` (the DOM dump too, so a page's script sees that width); writes a screenshot
// to `screenshot` when not empty. `scratch` holds the profile.
inline BrowserResult load_in_chromium(const std::string& chromium, const std::string& page,
                                      const std::string& scratch, const std::string& screenshot,
                                      int width = 1100, int height = 3400) {
  const std::string base = chromium + " --headless --disable-gpu --no-sandbox --no-first-run --hide-scrollbars"
                           " --enable-logging=stderr --v=0 --user-data-dir=" + scratch + "/profile --window-size=" +
                           std::to_string(width) + "," + std::to_string(height);
  const std::string url = "file://" + std::filesystem::absolute(page).string();
  BrowserResult r;
  const std::string dom_cmd = "timeout 120 " + base + " --dump-dom '" + url + "' > " + scratch + "/dom.html 2> " +
                              scratch + "/dom.log";
  const int status = std::system(dom_cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.dom = slurp(scratch + "/dom.html");
  r.log = slurp(scratch + "/dom.log");
  std::stringstream lines(r.log);
  for (std::string line; std::getline(lines, line);)
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos)
      r.console_messages.push_back(line);
  if (!screenshot.empty()) {
    const std::string shot_cmd = "timeout 120 " + base + " --screenshot=" + screenshot + " '" + url + "' > " +
                                 scratch + "/shot.log 2>&1";
    if (std::system(shot_cmd.c_str()) != 0) r.log += slurp(scratch + "/shot.log");
  }
  return r;
}

// Where a test leaves files for a person to look at: $PIPELANE_BUILD_DIR/test-output/NAME/.
inline std::string test_output_dir(const std::string& name) {
  const char* build = std::getenv("PIPELANE_BUILD_DIR");
  const std::filesystem::path dir = std::filesystem::path(build ? build : "build") / "test-output" / name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace pipelane::test_support
