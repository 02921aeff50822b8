#include "engine/core/generator.h"

namespace gpulab {

Generator& defaultGenerator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(std::uint64_t seed) { defaultGenerator().manual_seed(seed); }

}  // namespace gpulab
