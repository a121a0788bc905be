#include "worker/feature_hashing.h"

#include <xxhash.h>

namespace parafab::worker {

uint64_t hash_token(uint32_t ns, std::string_view token) {
  return XXH64(token.data(), token.size(), XXH64_hash_t{ns});
}

}  // namespace parafab::worker
