// The place of a process in a one-process-per-rank run and the unique-id exchange
// (sim/process_group.hpp).
#include "mxsim/sim/process_group.hpp"

#include <charconv>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "mxsim/io/atomic_output.hpp"
#include "mxsim/sim/config.hpp"

namespace mxsim::sim {

namespace {

constexpr const char* kIdFile = "unique-id";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int env_int(const char* name, const std::string& v) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    throw std::invalid_argument(std::string(name) + "='" + v + "': expected an integer");
  return x;
}

}  // namespace

std::optional<ProcessPlace> process_place_from_env() {
  const std::string size = env_or_empty("MXSIM_WORLD_SIZE");
  if (size.empty()) return std::nullopt;
  ProcessPlace p;
  p.size = env_int("MXSIM_WORLD_SIZE", size);
  if (p.size < 1 || p.size > kMaxRanks)
    throw std::invalid_argument("MXSIM_WORLD_SIZE=" + size + ": expected 1 to " + std::to_string(kMaxRanks));
  const std::string rank = env_or_empty("MXSIM_RANK");
  p.rank = env_int("MXSIM_RANK", rank);
  if (p.rank < 0 || p.rank >= p.size)
    throw std::invalid_argument("MXSIM_RANK=" + rank + ": expected 0 to " + std::to_string(p.size - 1) +
                                " (MXSIM_WORLD_SIZE=" + size + ")");
  p.rendezvous = env_or_empty("MXSIM_RENDEZVOUS");
  std::error_code ec;
  if (p.rendezvous.empty() || !std::filesystem::is_directory(p.rendezvous, ec))
    throw std::invalid_argument("MXSIM_RENDEZVOUS='" + p.rendezvous +
                                "': expected the launcher's folder (start the processes with mxsim launch)");
  const std::string t = env_or_empty("MXSIM_RENDEZVOUS_TIMEOUT");
  if (!t.empty()) {
    double s = 0;
    const auto [end, e2] = std::from_chars(t.data(), t.data() + t.size(), s);
    if (e2 != std::errc() || end != t.data() + t.size() || !(s > 0) || !std::isfinite(s))
      throw std::invalid_argument("MXSIM_RENDEZVOUS_TIMEOUT='" + t + "': expected a positive number of seconds");
    p.timeout_s = s;
  }
  return p;
}

void publish_unique_id(const ProcessPlace& at, std::span<const uint8_t> id) {
  if (at.rank != 0) throw std::logic_error("publish_unique_id: rank " + std::to_string(at.rank) + " is not rank 0");
  io::AtomicOutputs out;
  const std::filesystem::path tmp = out.add(std::filesystem::path(at.rendezvous) / kIdFile);
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(id.data()), std::streamsize(id.size()));
    if (!f.flush()) throw std::runtime_error("rank 0: cannot write the unique id into " + at.rendezvous);
  }
  out.commit();
}

std::vector<uint8_t> await_unique_id(const ProcessPlace& at, size_t bytes) {
  const std::filesystem::path f = std::filesystem::path(at.rendezvous) / kIdFile;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(at.timeout_s);
  for (;;) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(f, ec)) {  // renamed into place whole: its size is final
      const uintmax_t n = std::filesystem::file_size(f, ec);
      if (ec || n != bytes)
        throw std::runtime_error("rank " + std::to_string(at.rank) + ": " + f.string() + " holds " +
                                 (ec ? std::string("no readable") : std::to_string(n)) + " bytes; a unique id has " +
                                 std::to_string(bytes));
      std::vector<uint8_t> id(bytes);
      std::ifstream in(f, std::ios::binary);
      if (!in.read(reinterpret_cast<char*>(id.data()), std::streamsize(bytes)))
        throw std::runtime_error("rank " + std::to_string(at.rank) + ": cannot read " + f.string());
      return id;
    }
    if (std::chrono::steady_clock::now() >= until) {
      char s[32];
      std::snprintf(s, sizeof s, "%g", at.timeout_s);
      throw std::runtime_error("rank " + std::to_string(at.rank) + " of " + std::to_string(at.size) +
                               ": no unique id from rank 0 in " + at.rendezvous + " after " + s +
                               " s (MXSIM_RENDEZVOUS_TIMEOUT; did rank 0 fail or not start?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace mxsim::sim
