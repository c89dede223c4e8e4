// Reading the example programs' data files: gzip-compressed or plain text, whole.
#pragma once

#include <string>

namespace tw::apps {

// The whole of the file at `path`, decompressed when it is gzip (plain files are read as they
// are). Throws tw::Error naming `what` (the program's data, e.g. "digits") and `env` (the
// variable that names another file) when the file cannot be opened or decompressed.
std::string read_data_file(const std::string& path, const std::string& what,
                           const std::string& env);

}  // namespace tw::apps
