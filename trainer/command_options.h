// Option parsing shared by the subcommands around a model (eval, generate, import, report):
// Boost.Program_options with --help, then the command's own checks, and one line on stderr for a
// bad option ("pipelane eval: --model and --data are required (see pipelane eval --help)").
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <boost/program_options.hpp>

namespace pipelane {

// Parses argv (argv[0] is the command's name) against `options` (printed by --help) plus `hidden`
// ones and `positional` arguments (both optional), then calls `check`, which throws
// boost::program_options::error for a bad combination. nullopt: go on; otherwise the exit code
// to return (0 after --help, 2 after a bad option).
std::optional<int> parse_command_options(const std::string& command, int argc, char** argv,
                                         const boost::program_options::options_description& options,
                                         const std::function<void()>& check,
                                         const boost::program_options::options_description* hidden = nullptr,
                                         const boost::program_options::positional_options_description* positional = nullptr);

}  // namespace pipelane
