// libFuzzer target: the state-dict parser behind gpulab::nn::load (engine/nn/state_dict.cpp).
// Input: one flag byte, then a file's bytes. A v2 file is protected by a CRC-32C, so random
// mutations would almost never get past the checksum; when bit 0 of the flag is set and the file
// is long enough, the target rewrites the trailing CRC so the parser behind it is fuzzed too.
// Errors must be gpulab::Error; a parsed dict must round-trip through serializeStateDict.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "engine/core/errors.h"
#include "engine/nn/state_dict.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool fixChecksum = data[0] & 1;
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (fixChecksum && bytes.size() >= 28) {
    const std::uint32_t crc = gpulab::nn::crc32c(bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  }
  gpulab::nn::StateDict sd;
  try {
    sd = gpulab::nn::parseStateDict(bytes, "fuzz.gpulab");
  } catch (const gpulab::Error&) {
    return 0;
  }
  // Whatever parsed must serialize and parse back to the same names and shapes.
  const std::string again = gpulab::nn::serializeStateDict(sd);
  const gpulab::nn::StateDict back = gpulab::nn::parseStateDict(again, "again.gpulab");
  if (back.size() != sd.size()) __builtin_trap();
  for (std::size_t i = 0; i < sd.size(); ++i) {
    if (back[i].first != sd[i].first || back[i].second.sizes() != sd[i].second.sizes()) __builtin_trap();
    if (std::memcmp(back[i].second.data_ptr(), sd[i].second.data_ptr(), sd[i].second.nbytes()) != 0) __builtin_trap();
  }
  return 0;
}
