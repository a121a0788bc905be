// The error every data reader throws: it names the file, the 1-based line and
// byte column, and what was wrong, as "train.svm:17:9: bad feature index 'x'".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace parafab::worker {

class DataError : public std::runtime_error {
 public:
  DataError(std::string file, uint64_t line, uint64_t column, const std::string& what)
      : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(column) +
                           ": " + what),
        file_(std::move(file)), line_(line), column_(column) {}
  // For errors that concern a whole file (cannot open, bad cache header).
  DataError(std::string file, const std::string& what)
      : std::runtime_error(file + ": " + what), file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  uint64_t line() const { return line_; }      // 0 when not about one line
  uint64_t column() const { return column_; }  // 0 when not about one column

 private:
  std::string file_;
  uint64_t line_ = 0;
  uint64_t column_ = 0;
};

}  // namespace parafab::worker
