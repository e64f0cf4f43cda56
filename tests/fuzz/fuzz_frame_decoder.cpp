// The host's side of the agent protocol (core/protocol.hpp): frames from an
// agent inside a sandbox, which sandboxed code may have replaced. The bytes
// arrive in pieces of any size; every frame popped re-encodes to the same
// bytes. (fuzz_agent_client.cpp drives what the host makes of them.)
#include <cstdint>
#include <cstdlib>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "core/error.hpp"
#include "core/protocol.hpp"

namespace proto = sbx::proto;


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  proto::Decoder dec;
  try {
    while (in.remaining_bytes() > 0) {
      std::string piece = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(1, 64));
      dec.feed(piece.data(), piece.size());
      while (auto f = dec.pop()) {
        std::string again = proto::encode(f->type, f->channel, f->payload);
        proto::Decoder check;
        check.feed(again.data(), again.size());
        auto g = check.pop();
        if (!g || g->type != f->type || g->channel != f->channel || g->payload != f->payload || check.buffered())
          std::abort();
      }
    }
  } catch (const sbx::Error& e) {
    if (e.code() != sbx::Errc::protocol) std::abort();
  }
  return 0;
}
