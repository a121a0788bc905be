// Writing a file so that a reader (or a crash) sees the old contents or the
// new, never a part: write to PATH.tmp, fsync, rename over PATH, fsync the
// directory.
//
//   ps::write_file_atomically(path, {header_bytes, payload_bytes});
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace parafab::ps {

// Writes the pieces in order. Throws std::runtime_error naming the file and
// the failing step (create, write, fsync, rename) with strerror's text; the
// temporary file is removed on failure.
void write_file_atomically(const std::string& path, std::initializer_list<std::string_view> pieces);

}  // namespace parafab::ps
