#pragma once
// The state-dict file format underneath nn::save / nn::load (declared in module.h), exposed for tests
// and fuzzers: the byte-level serializer and parser and the checksum they use.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/nn/module.h"

namespace gpulab::nn {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI/ext4): crc32c("123456789") ==
// 0xE3069283. Chain calls by passing the previous result as `crc`.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);

// The bytes save() writes (the current format, v2, checksum included).
std::string serializeStateDict(const StateDict& state);
// Parses a whole file's bytes (v1 or v2); `path` names the file in errors. Throws IOError, never
// returns a partial dict.
StateDict parseStateDict(std::string_view bytes, const std::string& path);

}  // namespace gpulab::nn
