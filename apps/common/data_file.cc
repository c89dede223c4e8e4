#include "common/data_file.h"

#include <zlib.h>

#include "tensorwire/error.h"

namespace tw::apps {

std::string read_data_file(const std::string& path, const std::string& what,
                           const std::string& env) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (!f) throw Error(what + ": cannot open " + path + " (set " + env + " to a file's path)");
  std::string text;
  char buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(got));
  int err = 0;
  const char* msg = got < 0 ? gzerror(f, &err) : nullptr;
  const std::string zmsg = msg ? msg : "";
  gzclose(f);
  if (got < 0) throw Error(what + ": cannot decompress " + path + ": " + zmsg);
  return text;
}

}  // namespace tw::apps
