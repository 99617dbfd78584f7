// Text for an error message that quotes bytes from a file or the command line: the bytes that must not
// reach a terminal raw (a binary file given by mistake) written as \xNN. Internal.
#pragma once

#include <string>
#include <string_view>

namespace opsnn {

// utf8: control bytes, DEL and bytes that are not valid UTF-8 are escaped; valid UTF-8 (a key written
// with accents) stays as written. ascii: every byte outside printable ASCII is escaped.
enum class Printable { utf8, ascii };

inline std::string printable(std::string_view text, Printable keep = Printable::utf8) {
  std::string out;
  auto escape = [&out](unsigned char byte) {
    static const char* const hex = "0123456789abcdef";
    out += "\\x";
    out += hex[byte >> 4];
    out += hex[byte & 15];
  };
  for (size_t i = 0; i < text.size();) {
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80 ? 1 : (byte >> 5) == 6 ? 2 : (byte >> 4) == 14 ? 3 : (byte >> 3) == 30 ? 4 : 0;
    if (keep == Printable::ascii && length > 1) length = 0;
    bool valid = length > 0 && i + length <= text.size() && (length > 1 || (byte >= 0x20 && byte != 0x7f));
    for (size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) >> 6) == 2;
    if (!valid) {
      escape(byte);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace opsnn
