// The job token: a shared secret every node of one job is started with (from
// a flag, the environment or a file; apps/ decides which). It never crosses
// the wire: nodes prove they hold it with HMAC-SHA256 over the scheduler's
// fresh nonce (challenge-response, ps/proto/control.proto), so a node of
// another job, or one without the token, cannot join, and a recorded
// registration cannot be replayed.
//
//   ps::JobToken token = ps::JobToken::from_file("/run/parafab/token");
//   ps::Mac mac = ps::hmac_sha256(token, message_bytes);
//   if (!ps::macs_equal(mac, received)) refuse();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace parafab::ps {

class JobToken {
 public:
  // Throws std::invalid_argument when secret is empty.
  explicit JobToken(std::string secret);
  // The file's content without trailing whitespace; throws std::runtime_error
  // naming the file when it cannot be read or is empty.
  static JobToken from_file(const std::filesystem::path& path);
  // 32 random bytes from the OS CSPRNG, hex-encoded (for `parafab launch`).
  static JobToken generate();

  const std::string& secret() const { return secret_; }
  // First 8 hex digits of SHA-256(secret): safe to log, tells two tokens apart.
  std::string fingerprint() const;

 private:
  std::string secret_;
};

using Mac = std::array<uint8_t, 32>;

Mac hmac_sha256(const JobToken& token, std::span<const uint8_t> message);
// Constant-time comparison (CRYPTO_memcmp); false when sizes differ.
bool macs_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);
// Cryptographically random bytes (RAND_bytes); throws std::runtime_error if
// the generator fails.
std::vector<uint8_t> random_bytes(size_t n);
uint64_t random_u64();

// Builds the byte string a MAC covers: fixed-width little-endian integers and
// length-prefixed strings, so no two different field lists encode alike.
class MacInput {
 public:
  explicit MacInput(std::string_view domain) { add(domain); }
  MacInput& add(std::string_view s);
  MacInput& add(std::span<const uint8_t> bytes);
  MacInput& add_u64(uint64_t v);
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace parafab::ps
