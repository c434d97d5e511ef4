// Number options checked for range before CLI11 converts them.
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>

#include "command.hpp"

namespace moestat::cli {
namespace {

/// Whether `text` names an integer beyond the 64-bit type's bounds. CLI11 converts with
/// strtoll / strtoull, which saturate on overflow (so `--seed 18446744073709551616` ran as
/// 2^64 - 1) and, unsigned, wrap a minus sign (`-1` ran as 2^64 - 1): refuse both here.
/// Anything that is not a number at all is left to CLI11's own message.
std::string range_error(const std::string& text, bool is_unsigned) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (is_unsigned) {
    std::strtoull(begin, &end, 0);
  } else {
    std::strtoll(begin, &end, 0);
  }
  if (end != begin + text.size()) return "";  // not a whole number: CLI11 reports it
  const std::size_t first = text.find_first_not_of(" \t");
  const bool negative = first != std::string::npos && text[first] == '-';
  if (errno != ERANGE && !(is_unsigned && negative)) return "";
  return is_unsigned
             ? "Value " + text + " is out of range: an integer from 0 to 18446744073709551615"
             : "Value " + text +
                   " is out of range: an integer from -9223372036854775808 to "
                   "9223372036854775807";
}

CLI::Validator integer_range(bool is_unsigned) {
  return CLI::Validator([is_unsigned](std::string& text) { return range_error(text, is_unsigned); },
                        "");
}

/// The type part of CLI11's type name ("UINT:NONNEGATIVE" -> "UINT").
std::string base_type(const CLI::Option& option) {
  const std::string name = option.get_type_name();
  return name.substr(0, name.find(':'));
}

/// A validator refusing numbers for which `accept` is false with "must be <what>, got <text>".
CLI::Validator number_check(std::function<bool(long double)> accept, const char* what,
                            const char* name) {
  return CLI::Validator(
      [accept = std::move(accept), what](std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        const long double value = std::strtold(begin, &end);
        if (end == begin || *end != '\0') return "";  // not a number: CLI11 says so
        return accept(value) ? "" : std::string("must be ") + what + ", got " + text;
      },
      name, name);  // the description is what --help shows after the type (UINT:POSITIVE)
}

}  // namespace

const CLI::Validator kPositive =
    number_check([](long double value) { return value > 0; }, "greater than 0", "POSITIVE");
const CLI::Validator kNonNegative =
    number_check([](long double value) { return value >= 0; }, "0 or more", "NONNEGATIVE");

void refuse_out_of_range_integers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = base_type(*option);
    if (type == "INT" || type == "UINT") option->check(integer_range(type == "UINT"));
  }
  // Option groups are subcommands without a name, so this reaches their options too.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    refuse_out_of_range_integers(*sub);
  }
}

}  // namespace moestat::cli
