// Compressed data files, recognized by their first bytes (whatever their
// name) and decompressed into memory before parsing, as `zcat FILE |
// parafab train --train /dev/stdin` would: gzip (Criteo's daily files),
// bzip2 (most of the LIBSVM site's data sets) and xz. Concatenated members
// or streams (pigz, pbzip2, `cat a.gz b.gz`) are read one after another. zstd
// is recognized and refused with the command that decompresses it.
//
//   std::string text;
//   if (Compression c = detect_compression(bytes); c != Compression::kNone)
//     decompress(c, bytes, "day_0.gz", text);   // throws DataError("day_0.gz: ...")
//
// Corrupt data, a file that ends before its compressed stream does (an
// incomplete download) and bytes after the last stream are DataErrors naming
// the file and the compressed byte offset; a decompressed size that does not
// fit in memory is one too.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace parafab::worker {

enum class Compression { kNone, kGzip, kBzip2, kXz, kZstd };

// The compression whose magic number `head` starts with, else kNone.
Compression detect_compression(std::string_view head);
const char* compression_name(Compression c);  // "gzip", "bzip2", ...

// Appends the decompression of all of `data` to `out`. With `limit` > 0 it
// stops once `out` holds at least `limit` bytes (a prefix, for looking at
// the first lines) and reports no truncation. Throws DataError naming `name`.
void decompress(Compression c, std::string_view data, const std::string& name, std::string& out,
                size_t limit = 0);

}  // namespace parafab::worker
