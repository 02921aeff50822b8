// The state-dict file format (little-endian):
//   "GPULABSD" magic, u32 version (1), u32 entry count, then per entry:
//   u32 name length, name bytes, u8 dtype, u32 ndim, i64 sizes[ndim], the raw element bytes.
// Files are written to "<path>.tmp" and renamed over <path>, so a crash never leaves half a file.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/errors.h"
#include "engine/nn/module.h"

namespace gpulab::nn {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'U', 'L', 'A', 'B', 'S', 'D'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxDims = 16;

template <class T>
void put(std::ostream& os, T v) {
  os.write(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(std::istream& is, const std::string& path, const char* what) {
  T v{};
  if (!is.read(reinterpret_cast<char*>(&v), sizeof v)) throw IOError("'" + path + "' is truncated (while reading " + what + ")");
  return v;
}

}  // namespace

void save(const StateDict& state, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw IOError("cannot write '" + tmp + "': " + std::strerror(errno));
    os.write(kMagic, sizeof kMagic);
    put<std::uint32_t>(os, kVersion);
    put<std::uint32_t>(os, static_cast<std::uint32_t>(state.size()));
    for (const auto& [name, t] : state) {
      Tensor host = t.detach().contiguous().cpu();
      put<std::uint32_t>(os, static_cast<std::uint32_t>(name.size()));
      os.write(name.data(), static_cast<std::streamsize>(name.size()));
      put<std::uint8_t>(os, static_cast<std::uint8_t>(host.dtype()));
      put<std::uint32_t>(os, static_cast<std::uint32_t>(host.dim()));
      for (std::int64_t s : host.sizes()) put<std::int64_t>(os, s);
      os.write(static_cast<const char*>(host.data_ptr()), static_cast<std::streamsize>(host.nbytes()));
    }
    os.flush();
    if (!os) {
      os.close();
      std::remove(tmp.c_str());
      throw IOError("writing '" + tmp + "' failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw IOError("cannot replace '" + path + "': " + ec.message());
  }
}

StateDict load(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) throw IOError("cannot open '" + path + "': " + std::strerror(errno));
  char magic[sizeof kMagic];
  if (!is.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
    throw IOError("'" + path + "' is not a GPU Lab state dict (bad magic)");
  }
  const auto version = get<std::uint32_t>(is, path, "the version");
  if (version != kVersion) throw IOError("'" + path + "' has format version " + std::to_string(version) + "; this build reads version 1");
  const auto count = get<std::uint32_t>(is, path, "the entry count");
  const auto fileSize = std::filesystem::file_size(path);
  StateDict out;
  for (std::uint32_t e = 0; e < count; ++e) {
    const auto nameLen = get<std::uint32_t>(is, path, "a name length");
    if (nameLen > 4096) throw IOError("'" + path + "' is corrupt: entry " + std::to_string(e) + " has a name of " + std::to_string(nameLen) + " bytes");
    std::string name(nameLen, '\0');
    if (!is.read(name.data(), nameLen)) throw IOError("'" + path + "' is truncated (in entry " + std::to_string(e) + "'s name)");
    const auto dtypeCode = get<std::uint8_t>(is, path, "a dtype");
    if (dtypeCode > static_cast<std::uint8_t>(DType::BFloat16)) throw IOError("'" + path + "': entry '" + name + "' has unknown dtype code " + std::to_string(dtypeCode));
    const auto ndim = get<std::uint32_t>(is, path, "a rank");
    if (ndim > kMaxDims) throw IOError("'" + path + "': entry '" + name + "' claims " + std::to_string(ndim) + " dimensions");
    Shape shape(ndim);
    std::uint64_t numel = 1;
    for (auto& s : shape) {
      s = get<std::int64_t>(is, path, "a size");
      if (s < 0) throw IOError("'" + path + "': entry '" + name + "' has a negative size");
      numel *= static_cast<std::uint64_t>(s);
    }
    const DType dtype = static_cast<DType>(dtypeCode);
    const std::uint64_t bytes = numel * elementSize(dtype);
    if (bytes > fileSize) throw IOError("'" + path + "' is truncated (entry '" + name + "' needs " + std::to_string(bytes) + " bytes)");
    Tensor t = Tensor::empty(shape, dtype, kCPU);
    if (!is.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes))) {
      throw IOError("'" + path + "' is truncated (in the data of entry '" + name + "')");
    }
    out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

}  // namespace gpulab::nn
