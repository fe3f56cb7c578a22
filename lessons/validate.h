// Validators for command-line options: every number is finite and in range, every output file can
// be written, and the message shows the value as the user typed it (never a 309-digit bound).
// CLI11 prefixes the option name: "--lr: 'nan' is not a finite number".
#pragma once
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace mgpu::lessons {

// A finite number > 0 (replaces CLI::PositiveNumber, which lets nan through).
extern const CLI::Validator Positive;
// A count of at least one `unit`, the unit named in the message ("--steps: 0 must be at least 1
// step").
CLI::Validator AtLeastOne(const std::string& unit);
// A finite number >= 0.
extern const CLI::Validator NonNegative;
// A finite number <= `max`, shown as typed ("--comm-timeout: 1e300 is above 86400").
CLI::Validator AtMost(double max);
// A finite number from `lo` to `hi` (inclusive) in `unit`, the unit named in the message
// ("--comm-timeout: 1e-9 must be from 0.1 to 86400 s").
CLI::Validator InRange(double lo, double hi, const std::string& unit);
// A size as parse_size reads it, from `lo` bytes to 4 EiB ("--capacity: '0' is below 1KiB").
CLI::Validator SizeAtLeast(int64_t lo, const std::string& lo_text);
// An integer option that must not start with '-' (CLI11 wraps "-1" to 2^64-1 for unsigned).
extern const CLI::Validator Unsigned;
// A number a float holds (the optimizer's --lr and --weight-decay are floats: 1e300 would become
// inf and the first step would diverge).
extern const CLI::Validator FloatRange;
// A switch: on | off (also true | false, yes | no, 1 | 0). CLI11 alone reads any negative number
// as off.
extern const CLI::Validator Switch;
// A file the run will write (--checkpoint, --trace): checked before any work is done.
extern const CLI::Validator OutputFile;
// A file the run will read (--data, --resume): a regular file of at most `max_bytes`
// (core/runtime/input_file.h), checked before any work is done; "" is refused.
CLI::Validator InputFile(int64_t max_bytes);

// A size such as "2GiB", "512MiB" or "1e9" in bytes; std::invalid_argument with one line when it
// is not a size, not finite, or above 2^62 bytes.
int64_t parse_size(const std::string& text);

}  // namespace mgpu::lessons
