// Reading the IDX format (big-endian magic and dimensions, then raw unsigned bytes), optionally
// gzip-compressed as Debian ships it.
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/core/errors.h"
#include "engine/data/dataset.h"

namespace gpulab::data {

const char* const kFashionMnistClasses[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

namespace {

constexpr float kMean = 0.2860f, kStd = 0.3530f;

std::vector<unsigned char> readMaybeGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) throw IOError("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<unsigned char> data;
  unsigned char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || err < 0) throw IOError("'" + path + "' is corrupt: " + (msg ? msg : "read error"));
  return data;
}

std::uint32_t bigEndian(const std::vector<unsigned char>& d, std::size_t at) {
  return (std::uint32_t{d[at]} << 24) | (std::uint32_t{d[at + 1]} << 16) | (std::uint32_t{d[at + 2]} << 8) | d[at + 3];
}

// Returns the dimensions and the offset of the payload; checks magic and size.
std::vector<std::uint32_t> idxHeader(const std::vector<unsigned char>& d, const std::string& path, unsigned expectDims) {
  if (d.size() < 4 || d[0] != 0 || d[1] != 0 || d[2] != 0x08 || d[3] != expectDims) {
    throw IOError("'" + path + "' is not an IDX file of unsigned bytes with " + std::to_string(expectDims) + " dimensions");
  }
  if (d.size() < 4 + 4 * expectDims) throw IOError("'" + path + "' is truncated (header)");
  std::vector<std::uint32_t> dims;
  std::size_t total = 1;
  for (unsigned i = 0; i < expectDims; ++i) {
    dims.push_back(bigEndian(d, 4 + 4 * i));
    total *= dims.back();
  }
  if (d.size() != 4 + 4 * expectDims + total) {
    throw IOError("'" + path + "' has " + std::to_string(d.size()) + " bytes, expected " + std::to_string(4 + 4 * expectDims + total));
  }
  return dims;
}

std::string findFile(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {dir + "/" + stem + ".gz", dir + "/" + stem}) {
    if (std::filesystem::exists(candidate)) return candidate;
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
  const auto images = readMaybeGzip(imagesPath);
  const auto labels = readMaybeGzip(labelsPath);
  const auto imageDims = idxHeader(images, imagesPath, 3);
  const auto labelDims = idxHeader(labels, labelsPath, 1);
  if (imageDims[0] != labelDims[0]) {
    throw IOError("'" + imagesPath + "' holds " + std::to_string(imageDims[0]) + " images but '" + labelsPath + "' " +
                  std::to_string(labelDims[0]) + " labels");
  }
  const std::int64_t n = imageDims[0], h = imageDims[1], w = imageDims[2];
  Tensor x = Tensor::empty({n, 1, h, w}, kFloat32);
  Tensor y = Tensor::empty({n}, kInt64);
  float* xp = x.data<float>();
  const unsigned char* px = images.data() + 16;
  for (std::int64_t i = 0; i < n * h * w; ++i) xp[i] = (static_cast<float>(px[i]) / 255.0f - kMean) / kStd;
  std::int64_t* yp = y.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    yp[i] = labels[8 + static_cast<std::size_t>(i)];
    if (yp[i] > 9) throw IOError("'" + labelsPath + "' holds label " + std::to_string(yp[i]) + " at index " + std::to_string(i) + " (expected 0-9)");
  }
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace gpulab::data
