#include "core/oci.hpp"

#include "core/error.hpp"

namespace sbx::oci {

ImageConfig unpack(const std::string& src, const std::string&, const std::string&) {
  throw Error(Errc::unavailable, "importing OCI images is not built yet: " + src);
}

}  // namespace sbx::oci
