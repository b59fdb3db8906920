#include "datasets/nfc.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include "datasets/data_error.h"

namespace pipelane {

void append_nfc(std::string_view text, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  // ICU owns the instance (immutable, shared by every thread).
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw DataError(std::string("ICU: no NFC normalizer (") + u_errorName(status) + ")");
  const icu::StringPiece piece(text.data(), static_cast<std::int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.append(text);
    return;
  }
  status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  nfc->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) throw DataError(std::string("ICU: NFC normalization failed (") + u_errorName(status) + ")");
}

}  // namespace pipelane
