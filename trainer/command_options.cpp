#include "trainer/command_options.h"

#include <cstdio>
#include <iostream>

namespace pipelane {

namespace po = boost::program_options;

std::optional<int> parse_command_options(const std::string& command, int argc, char** argv,
                                         const po::options_description& options, const std::function<void()>& check,
                                         const po::options_description* hidden,
                                         const po::positional_options_description* positional) {
  try {
    po::options_description all;
    all.add(options);
    if (hidden) all.add(*hidden);
    po::command_line_parser parser(argc, argv);
    parser.options(all);
    if (positional) parser.positional(*positional);
    po::variables_map vm;
    po::store(parser.run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    check();
  } catch (const po::error& e) {
    std::fprintf(stderr, "pipelane %s: %s (see pipelane %s --help)\n", command.c_str(), e.what(), command.c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace pipelane
