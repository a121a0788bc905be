#include "ps/job_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace parafab::ps {

namespace {
std::string to_hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}
}  // namespace

JobToken::JobToken(std::string secret) : secret_(std::move(secret)) {
  if (secret_.empty()) throw std::invalid_argument("job token: the token is empty");
}

JobToken JobToken::from_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("job token: cannot read " + path.string());
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  if (s.empty()) throw std::runtime_error("job token: " + path.string() + " is empty");
  return JobToken(std::move(s));
}

JobToken JobToken::generate() {
  const std::vector<uint8_t> b = random_bytes(32);
  return JobToken(to_hex(b.data(), b.size()));
}

std::string JobToken::fingerprint() const {
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(secret_.data(), secret_.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("job token: SHA-256 failed");
  }
  return to_hex(digest, 4);
}

Mac hmac_sha256(const JobToken& token, std::span<const uint8_t> message) {
  Mac mac{};
  unsigned int len = 0;
  const std::string& key = token.secret();
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(), mac.data(),
           &len) == nullptr ||
      len != mac.size()) {
    throw std::runtime_error("job token: HMAC-SHA256 failed");
  }
  return mac;
}

bool macs_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> out(n);
  if (n > 0 && RAND_bytes(out.data(), static_cast<int>(n)) != 1) {
    throw std::runtime_error("RAND_bytes failed to produce " + std::to_string(n) + " random bytes");
  }
  return out;
}

uint64_t random_u64() {
  const std::vector<uint8_t> b = random_bytes(8);
  uint64_t v = 0;
  std::memcpy(&v, b.data(), 8);
  return v;
}

MacInput& MacInput::add(std::string_view s) {
  add_u64(s.size());
  bytes_.insert(bytes_.end(), s.begin(), s.end());
  return *this;
}

MacInput& MacInput::add(std::span<const uint8_t> bytes) {
  add_u64(bytes.size());
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
  return *this;
}

MacInput& MacInput::add_u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

}  // namespace parafab::ps
