// Reading the IDX format (big-endian magic and dimensions, then raw unsigned bytes), optionally
// gzip-compressed as Debian ships it.
//
// The reader trusts nothing it is pointed at: only regular files are opened (a FIFO would block,
// /dev/zero never ends, a directory is no data), the header is read first and the payload it
// announces must be plausible for an IDX image/label file before anything is allocated, exactly that
// many bytes are read, and zlib's messages are copied before the stream is closed (gzclose frees
// them). Every failure is an IOError that names the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/core/errors.h"
#include "engine/data/dataset.h"

namespace gpulab::data {

const char* const kFashionMnistClasses[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

namespace {

constexpr float kMean = 0.2860f, kStd = 0.3530f;

// The largest payload accepted: 256 MiB, over five times Fashion-MNIST's training images (60,000 x
// 28 x 28 = 47 MB) and room for MNIST-shaped sets of the same kind; as float32 it is already 1 GiB.
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{256} << 20;

struct IdxFile {
  std::vector<std::uint32_t> dims;
  std::vector<unsigned char> payload;  // the bytes after the header
};

std::string fileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Opens `path` for reading through zlib (which reads plain files too), refusing anything but a
// regular file (symbolic links are followed, so the link's target is what is checked).
GzFile openRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; for a regular file it changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw IOError("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IOError("cannot read '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IOError("'" + path + "' is not a regular file (it is " + fileKind(st.st_mode) + "); expected an IDX data file");
  }
  gzFile f = gzdopen(fd, "rb");  // owns fd from here
  if (!f) {
    ::close(fd);
    throw IOError("cannot read '" + path + "': out of memory");
  }
  return GzFile(f);
}

// Reads up to `count` bytes into `out`; returns how many were read (fewer only at the end of the
// file). A read error or corrupt compressed data throws, with zlib's message copied while the
// stream is still open.
std::size_t readBytes(gzFile f, const std::string& path, unsigned char* out, std::size_t count) {
  std::size_t done = 0;
  while (done < count) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(count - done, std::size_t{1} << 20));
    const int n = gzread(f, out + done, chunk);
    int err = Z_OK;
    const char* msg = n > 0 ? nullptr : gzerror(f, &err);
    // A truncated stream reads as 0 bytes with Z_BUF_ERROR ("unexpected end of file"), not as -1.
    if (n < 0 || err != Z_OK) {
      if (err == Z_ERRNO) throw IOError("cannot read '" + path + "': " + std::strerror(errno));
      std::string reason = msg && *msg ? msg : "read error";
      // zlib prefixes its message with "<fd:N>: " (the stream was opened from a descriptor); the
      // IOError names the file instead.
      if (reason.starts_with("<fd:")) {
        if (const auto colon = reason.find(">: "); colon != std::string::npos) reason = reason.substr(colon + 3);
      }
      throw IOError("'" + path + "' is corrupt: " + reason);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

std::uint32_t bigEndian(const unsigned char* d) {
  return (std::uint32_t{d[0]} << 24) | (std::uint32_t{d[1]} << 16) | (std::uint32_t{d[2]} << 8) | d[3];
}

// Reads an IDX file of unsigned bytes with `expectDims` dimensions: the header first, then exactly
// the payload it announces (within kMaxPayloadBytes), then checks that nothing follows.
IdxFile readIdx(const std::string& path, unsigned expectDims) {
  GzFile f = openRegularFile(path);
  const std::size_t headerBytes = 4 + 4 * std::size_t{expectDims};
  std::vector<unsigned char> header(headerBytes);
  const std::size_t got = readBytes(f.get(), path, header.data(), headerBytes);
  if (got < 4 || header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] != expectDims) {
    throw IOError("'" + path + "' is not an IDX file of unsigned bytes with " + std::to_string(expectDims) + " dimensions");
  }
  if (got < headerBytes) throw IOError("'" + path + "' is truncated (header)");
  IdxFile idx;
  std::uint64_t total = 1;
  for (unsigned i = 0; i < expectDims; ++i) {
    idx.dims.push_back(bigEndian(header.data() + 4 + 4 * i));
    total *= idx.dims.back();  // each factor < 2^32 and the product is checked at every step
    if (total > kMaxPayloadBytes) {
      std::string shape;
      for (unsigned j = 0; j < expectDims; ++j) shape += (j ? " x " : "") + std::to_string(bigEndian(header.data() + 4 + 4 * j));
      throw IOError("'" + path + "' is too large: its header announces " + shape + " bytes, more than the " +
                    std::to_string(kMaxPayloadBytes >> 20) + " MiB an IDX file of this data set can hold");
    }
  }
  const std::uint64_t expected = headerBytes + total;
  // Grown as the data arrives, not to what the header announces: a tiny file claiming 256 MiB costs
  // only what it really holds.
  std::size_t payloadBytes = 0;
  while (payloadBytes < total) {
    const std::size_t step = std::min<std::size_t>(static_cast<std::size_t>(total) - payloadBytes, std::size_t{16} << 20);
    idx.payload.resize(payloadBytes + step);
    const std::size_t n = readBytes(f.get(), path, idx.payload.data() + payloadBytes, step);
    payloadBytes += n;
    if (n < step) break;
  }
  idx.payload.resize(payloadBytes);
  if (payloadBytes < total) {
    throw IOError("'" + path + "' has " + std::to_string(headerBytes + payloadBytes) + " bytes, expected " + std::to_string(expected));
  }
  unsigned char extra[4096];
  if (const std::size_t more = readBytes(f.get(), path, extra, sizeof extra); more > 0) {
    throw IOError("'" + path + "' has more than " + std::to_string(expected) + " bytes, expected " + std::to_string(expected) +
                  " (the size its header announces)");
  }
  return idx;
}

std::string findFile(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {dir + "/" + stem + ".gz", dir + "/" + stem}) {
    std::error_code ec;  // a dangling link or an unreadable folder counts as "not found"
    if (std::filesystem::exists(candidate, ec)) return candidate;
  }
  throw IOError("Fashion-MNIST file '" + stem + "(.gz)' not found in " + dir +
                ". Install the data set with: sudo apt-get install dataset-fashion-mnist "
                "(or point GPULAB_FASHION_MNIST_DIR at a folder holding the IDX files)");
}

}  // namespace

std::string fashionMnistDirectory() {
  const char* env = std::getenv("GPULAB_FASHION_MNIST_DIR");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

std::shared_ptr<TensorDataset> loadFashionMnist(bool train, const std::string& root) {
  const std::string dir = root.empty() ? fashionMnistDirectory() : root;
  const std::string prefix = train ? "train" : "t10k";
  const std::string imagesPath = findFile(dir, prefix + "-images-idx3-ubyte");
  const std::string labelsPath = findFile(dir, prefix + "-labels-idx1-ubyte");
  const IdxFile images = readIdx(imagesPath, 3);
  const IdxFile labels = readIdx(labelsPath, 1);
  const auto& imageDims = images.dims;
  const auto& labelDims = labels.dims;
  if (imageDims[0] != labelDims[0]) {
    throw IOError("'" + imagesPath + "' holds " + std::to_string(imageDims[0]) + " images but '" + labelsPath + "' " +
                  std::to_string(labelDims[0]) + " labels");
  }
  // An empty set would train for 0 steps or evaluate to 0/0: refuse it where it is read.
  if (imageDims[0] == 0) throw IOError("'" + imagesPath + "' holds no images: the data set is empty");
  if (imageDims[1] == 0 || imageDims[2] == 0) {
    throw IOError("'" + imagesPath + "' holds images of " + std::to_string(imageDims[1]) + " x " + std::to_string(imageDims[2]) + " pixels");
  }
  const std::int64_t n = imageDims[0], h = imageDims[1], w = imageDims[2];
  Tensor x = Tensor::empty({n, 1, h, w}, kFloat32);
  Tensor y = Tensor::empty({n}, kInt64);
  float* xp = x.data<float>();
  const unsigned char* px = images.payload.data();
  for (std::int64_t i = 0; i < n * h * w; ++i) xp[i] = (static_cast<float>(px[i]) / 255.0f - kMean) / kStd;
  std::int64_t* yp = y.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    yp[i] = labels.payload[static_cast<std::size_t>(i)];
    if (yp[i] > 9) throw IOError("'" + labelsPath + "' holds label " + std::to_string(yp[i]) + " at index " + std::to_string(i) + " (expected 0-9)");
  }
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace gpulab::data
