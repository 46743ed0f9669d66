// gzip decompression (see data_gzip.hpp), zlib's inflate in gzip mode.
#include "data_gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "mxsim/data/fashion_mnist.hpp"

namespace mxsim::data::detail {

namespace {
[[noreturn]] void fail(const std::filesystem::path& f, const std::string& what) {
  throw DataError(f.string() + ": " + what);
}
}  // namespace

std::vector<uint8_t> gunzip(std::span<const uint8_t> gz, const std::filesystem::path& f, uint64_t max_bytes) {
  z_stream z{};
  // 16 + MAX_WBITS: a gzip wrapper only (zlib checks the header, CRC-32 and ISIZE itself).
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail(f, "cannot start gzip decompression (zlib: out of memory)");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  std::vector<uint8_t> out;
  std::size_t fed = 0;  // input bytes handed to zlib so far
  for (;;) {            // one gzip member per pass
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0 && fed < gz.size()) {
        const std::size_t n = std::min<std::size_t>(gz.size() - fed, std::size_t(1) << 30);
        z.next_in = const_cast<Bytef*>(gz.data() + fed);
        z.avail_in = uInt(n);
        fed += n;
      }
      const std::size_t have = out.size();
      if (have >= max_bytes) fail(f, "gzip stream decompresses to more than " + std::to_string(max_bytes >> 20) + " MiB");
      const std::size_t grow = std::min<std::size_t>({std::max<std::size_t>(have, 1 << 16), max_bytes - have, std::size_t(1) << 30});
      try {
        out.resize(have + grow);
      } catch (const std::bad_alloc&) {
        fail(f, "out of memory decompressing (" + std::to_string((have + grow) >> 20) + " MiB)");
      }
      z.next_out = out.data() + have;
      z.avail_out = uInt(grow);
      rc = inflate(&z, Z_NO_FLUSH);
      out.resize(have + (grow - z.avail_out));
      if (rc == Z_DATA_ERROR) {
        const std::string m = z.msg ? z.msg : "invalid data";
        if (m == "incorrect data check") fail(f, "corrupt gzip stream (CRC-32 footer does not match the data)");
        if (m == "incorrect length check")
          fail(f, "corrupt gzip stream (length footer ISIZE does not match the data's length mod 2^32)");
        fail(f, "corrupt gzip stream (zlib: " + m + ")");
      }
      if (rc == Z_MEM_ERROR) fail(f, "out of memory decompressing (zlib)");
      // Output space was given, so no progress means no input left before the member's end.
      if (rc == Z_BUF_ERROR && z.avail_in == 0 && fed == gz.size())
        fail(f, "truncated gzip stream (the file ends before the member's CRC-32 and length footer)");
      if (rc != Z_OK && rc != Z_BUF_ERROR && rc != Z_STREAM_END)
        fail(f, "corrupt gzip stream (zlib error " + std::to_string(rc) + ")");
    }
    const std::size_t used = fed - z.avail_in;
    const auto rest = gz.subspan(used);
    if (rest.empty()) return out;
    // As gzip -t: another member follows, or the rest is zero padding; anything else is not gzip data.
    if (rest.size() >= 2 && rest[0] == 0x1f && rest[1] == 0x8b) {
      if (inflateReset(&z) != Z_OK) fail(f, "cannot restart gzip decompression (zlib)");
      z.avail_in = 0;
      fed = used;
      continue;
    }
    if (std::all_of(rest.begin(), rest.end(), [](uint8_t b) { return b == 0; })) return out;
    fail(f, std::to_string(rest.size()) +
                " bytes after the end of the gzip data are neither zero padding nor another gzip member");
  }
}

}  // namespace mxsim::data::detail
