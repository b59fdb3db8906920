#include "trainer/cli/devices_command.h"

#include <cstdio>

#include "runtime/backend_registry.h"
#include "trainer/cli/command_options.h"

namespace pipelane {

int devices_command(int argc, char** argv) {
  SubcommandOptions options("devices", "",
                            "Lists every compute backend this build has and the devices each can use here;\n"
                            "[runtime] backend = NAME (or NAME:INDEX) picks one for training.");
  if (const auto code = options.parse(argc, argv)) return *code;
  for (const BackendDevices& d : BackendRegistry::with_builtins().devices()) {
    if (!d.available) {
      std::printf("%s: unavailable: %s\n", d.backend.c_str(), d.reason.c_str());
      continue;
    }
    for (std::size_t i = 0; i < d.devices.size(); ++i) std::printf("%s:%zu: %s\n", d.backend.c_str(), i, d.devices[i].c_str());
  }
  return 0;
}

}  // namespace pipelane
