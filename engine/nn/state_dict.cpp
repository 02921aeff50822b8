// The state-dict file format (little-endian).
//
// Version 2 (written since issue 8):
//   "GPULABSD" magic, u32 version (2), u32 entry count, u64 body bytes, then per entry:
//   u32 name length, name bytes, u8 dtype, u32 ndim, i64 sizes[ndim], the raw element bytes;
//   and last a u32 CRC-32C of every byte before it (header and body).
// Version 1 (still read): the same without the body length and the checksum.
//
// Why a checksum: a flipped bit in a payload (bad disk, bad copy, a torn write on a filesystem
// that does not order data and rename) used to load silently as slightly wrong weights. Now any
// change to the file (a flipped bit, truncation, trailing bytes) fails with "... is corrupt:
// checksum mismatch" before anything is parsed, and load() returns nothing, so the model that
// would receive the dict is never touched.
//
// Why fsync: the file is written to "<path>.tmp", fsync'ed, renamed over <path>, and the directory
// is fsync'ed, so after a crash or power loss <path> is either the old file or the complete new one.
#include "engine/nn/state_dict.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "engine/core/errors.h"

namespace gpulab::nn {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'U', 'L', 'A', 'B', 'S', 'D'};
constexpr std::uint32_t kVersion = 2;
constexpr std::uint32_t kMaxDims = 16;
constexpr std::size_t kMaxNameBytes = 4096;  // load() refuses longer names, so save() does too
constexpr std::size_t kV1Header = 8 + 4 + 4;        // magic, version, count
constexpr std::size_t kV2Header = kV1Header + 8;    // + body bytes
constexpr std::size_t kTrailer = 4;                 // CRC-32C

constexpr std::array<std::uint32_t, 256> makeCrcTable() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kCrcTable = makeCrcTable();

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// A bounds-checked cursor over the file's bytes: every read names what it was reading when the
// bytes ran out.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  template <class T>
  T get(const char* what) {
    T v{};
    need(sizeof v, what);
    std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string_view take(std::size_t n, const std::string& what) {
    need(n, what);
    std::string_view s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  std::size_t remaining() const { return bytes_.size() - at_; }

 private:
  void need(std::size_t n, const std::string& what) const {
    if (n > remaining()) throw IOError("'" + path_ + "' is truncated (while reading " + what + ")");
  }
  std::string_view bytes_;
  const std::string& path_;
  std::size_t at_ = 0;
};

// The entries of either version; `r` is positioned after the header and must end exactly at the end.
StateDict parseEntries(Reader& r, std::uint32_t count, const std::string& path) {
  StateDict out;
  for (std::uint32_t e = 0; e < count; ++e) {
    const std::string entry = "entry " + std::to_string(e);
    const auto nameLen = r.get<std::uint32_t>("a name length");
    if (nameLen > kMaxNameBytes) throw IOError("'" + path + "' is corrupt: " + entry + " has a name of " + std::to_string(nameLen) + " bytes");
    std::string name(r.take(nameLen, entry + "'s name"));
    const auto dtypeCode = r.get<std::uint8_t>("a dtype");
    if (dtypeCode > static_cast<std::uint8_t>(kLastDType)) throw IOError("'" + path + "': entry '" + name + "' has unknown dtype code " + std::to_string(dtypeCode));
    const auto ndim = r.get<std::uint32_t>("a rank");
    if (ndim > kMaxDims) throw IOError("'" + path + "': entry '" + name + "' claims " + std::to_string(ndim) + " dimensions");
    Shape shape(ndim);
    std::int64_t numel = 1;  // the product of the sizes, each counted as at least 1, so it never overflows below
    for (auto& s : shape) {
      s = r.get<std::int64_t>("a size");
      if (s < 0) throw IOError("'" + path + "': entry '" + name + "' has a negative size");
      if (__builtin_mul_overflow(numel, std::max<std::int64_t>(s, 1), &numel)) {
        throw IOError("'" + path + "' is corrupt: entry '" + name + "' has an impossible shape");
      }
    }
    for (auto s : shape)
      if (s == 0) numel = 0;
    const DType dtype = static_cast<DType>(dtypeCode);
    const auto elem = static_cast<std::uint64_t>(elementSize(dtype));
    if (static_cast<std::uint64_t>(numel) > r.remaining() / elem) {
      throw IOError("'" + path + "' is truncated (entry '" + name + "' needs " + std::to_string(static_cast<std::uint64_t>(numel) * elem) +
                    " bytes, " + std::to_string(r.remaining()) + " are left)");
    }
    const std::size_t bytes = static_cast<std::size_t>(numel) * elem;
    const std::string_view data = r.take(bytes, "the data of entry '" + name + "'");
    Tensor t = Tensor::empty(shape, dtype, kCPU);
    if (bytes) std::memcpy(t.data_ptr(), data.data(), bytes);
    out.emplace_back(std::move(name), std::move(t));
  }
  if (r.remaining() != 0) {
    throw IOError("'" + path + "' is corrupt: " + std::to_string(r.remaining()) + " unexpected bytes after the last entry");
  }
  return out;
}

void writeAll(int fd, const std::string& bytes, const std::string& tmp) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IOError("writing '" + tmp + "' failed: " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < size; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string serializeStateDict(const StateDict& state) {
  std::string out;
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(out, kVersion);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(state.size()));
  put<std::uint64_t>(out, 0);  // body bytes, patched below
  for (const auto& [name, t] : state) {
    if (name.size() > kMaxNameBytes) {
      throw IOError("cannot save state dict entry '" + name.substr(0, 64) + "...': names are limited to " + std::to_string(kMaxNameBytes) + " bytes");
    }
    // Only what needs it is copied: an empty tensor has no bytes to order (and Tensor::is_contiguous
    // calls some empty shapes non-contiguous, whose clone would fail for dtypes without a CPU copy).
    Tensor host = t.detach();
    if (host.numel() > 0 && !host.is_contiguous()) host = host.contiguous();
    if (host.device() != kCPU) host = host.cpu();
    put<std::uint32_t>(out, static_cast<std::uint32_t>(name.size()));
    out.append(name);
    put<std::uint8_t>(out, static_cast<std::uint8_t>(host.dtype()));
    put<std::uint32_t>(out, static_cast<std::uint32_t>(host.dim()));
    for (std::int64_t s : host.sizes()) put<std::int64_t>(out, s);
    if (host.nbytes() > 0) out.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  const std::uint64_t body = out.size() - kV2Header;
  std::memcpy(out.data() + kV1Header, &body, sizeof body);
  put<std::uint32_t>(out, crc32c(out.data(), out.size()));
  return out;
}

StateDict parseStateDict(std::string_view bytes, const std::string& path) {
  if (bytes.size() < kV1Header) {
    if (bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0) {
      throw IOError("'" + path + "' is truncated (" + std::to_string(bytes.size()) + " bytes)");
    }
    throw IOError("'" + path + "' is not a GPU Lab state dict (bad magic)");
  }
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof kMagic, sizeof version);
  if (version == 2) {
    // The checksum first: nothing of a corrupt file is interpreted, not even its magic.
    if (bytes.size() < kV2Header + kTrailer) {
      throw IOError("'" + path + "' is corrupt: truncated to " + std::to_string(bytes.size()) + " bytes");
    }
    std::uint32_t stored = 0;
    std::memcpy(&stored, bytes.data() + bytes.size() - kTrailer, sizeof stored);
    const std::uint32_t computed = crc32c(bytes.data(), bytes.size() - kTrailer);
    if (stored != computed) {
      // A hint from the (unverified) header: a size that disagrees with it explains the mismatch.
      std::uint64_t body = 0;
      std::memcpy(&body, bytes.data() + kV1Header, sizeof body);
      std::string hint;
      if (body <= std::numeric_limits<std::uint64_t>::max() - kV2Header - kTrailer) {
        const std::uint64_t promised = kV2Header + body + kTrailer;
        if (bytes.size() < promised) {
          hint = "; the file looks truncated (" + std::to_string(bytes.size()) + " of " + std::to_string(promised) + " bytes)";
        } else if (bytes.size() > promised) {
          hint = "; the file has " + std::to_string(bytes.size() - promised) + " unexpected trailing bytes";
        }
      }
      throw IOError("'" + path + "' is corrupt: checksum mismatch (expected " + hex32(stored) + ", found " + hex32(computed) + ")" + hint);
    }
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) throw IOError("'" + path + "' is not a GPU Lab state dict (bad magic)");
  if (version != 1 && version != 2) {
    throw IOError("'" + path + "' has format version " + std::to_string(version) + "; this build reads versions 1 and 2");
  }
  Reader r(version == 2 ? bytes.substr(0, bytes.size() - kTrailer) : bytes, path);
  r.get<std::uint64_t>("the magic");
  r.get<std::uint32_t>("the version");
  const auto count = r.get<std::uint32_t>("the entry count");
  if (version == 2) {
    const auto body = r.get<std::uint64_t>("the body length");
    if (body != r.remaining()) {
      throw IOError("'" + path + "' is corrupt: the header promises " + std::to_string(body) + " bytes of entries, the file holds " +
                    std::to_string(r.remaining()));
    }
  }
  return parseEntries(r, count, path);
}

void save(const StateDict& state, const std::string& path) {
  const std::string bytes = serializeStateDict(state);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IOError("cannot write '" + tmp + "': " + std::strerror(errno));
  try {
    writeAll(fd, bytes, tmp);
    if (::fsync(fd) != 0) throw IOError("writing '" + tmp + "' failed (fsync): " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw IOError("writing '" + tmp + "' failed (disk full?): " + std::strerror(err));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw IOError("cannot replace '" + path + "': " + ec.message());
  }
  // Make the rename itself durable. A filesystem that cannot fsync a directory is not an error.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

StateDict load(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) throw IOError("cannot open '" + path + "': " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  if (is.bad()) throw IOError("cannot read '" + path + "': " + std::strerror(errno));
  return parseStateDict(bytes, path);
}

}  // namespace gpulab::nn
