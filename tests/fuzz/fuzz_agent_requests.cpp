// The agent's side of the protocol: frames from the host decoded and the file
// requests (read, list, write, data, end) served as agent/server.cpp does,
// against a planted root whose symlinks point out of it. Nothing the frames
// ask may touch the directory beside the root.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "agent/files.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/protocol.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace proto = sbx::proto;

namespace {

void plant(const sbx_fuzz::TempDir& t) {
  sbx_fuzz::plant_outside(t, "root");
  if (::mkdir((t / "root/dir").c_str(), 0755) != 0) std::abort();
  sbx_fuzz::write_text(t / "root/dir/file", "content");
  if (::symlink("../../outside", (t / "root/dir/up").c_str()) != 0) std::abort();
  if (::symlink((t / "outside").c_str(), (t / "root/abs").c_str()) != 0) std::abort();
  if (::symlink("/proc/self/cwd", (t / "root/magic").c_str()) != 0) std::abort();
}

// One host's frames, as Server::handle serves the file requests.
struct Host {
  explicit Host(int r) : root(r) {}
  int root;
  std::map<uint32_t, sbx::agent::Upload> uploads;
  std::map<uint32_t, sbx::Fd> reads;
  size_t sent = 0;
  sbx::agent::Send send = [this](const std::string& b) { sent += b.size(); };

  void handle(const proto::Frame& f) {
    switch (f.type) {
      case proto::Type::file_read: {
        reads[f.channel] = sbx::agent::open_file_request(root, f.channel, f.json(), send);
        while (sbx::agent::send_file_chunk(reads[f.channel].get(), f.channel, send)) {
        }
        reads.erase(f.channel);
        break;
      }
      case proto::Type::list: sbx::agent::list_request(root, f.channel, f.json(), send); break;
      case proto::Type::file_write: {
        sbx::agent::Upload up(root, f.json());
        uploads.erase(f.channel);
        if (up.awaits_data()) uploads.emplace(f.channel, std::move(up));
        break;
      }
      case proto::Type::data: {
        auto it = uploads.find(f.channel);
        if (it == uploads.end()) break;
        try {
          it->second.data(f.payload);
        } catch (...) {
          uploads.erase(it);
          throw;
        }
        break;
      }
      case proto::Type::end: {
        auto it = uploads.find(f.channel);
        if (it == uploads.end()) break;
        sbx::agent::Upload up = std::move(it->second);
        uploads.erase(it);
        up.finish();
        break;
      }
      default: break;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sbx_fuzz::TempDir t;
  plant(t);
  {
    sbx::Fd root(::open((t / "root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    Host host(root.get());
    proto::Decoder dec;
    dec.feed(reinterpret_cast<const char*>(data), size);
    try {
      while (auto f = dec.pop()) {
        try {
          host.handle(*f);
        } catch (const std::exception&) {
          // Server::handle answers every exception with an error frame and goes on.
        }
      }
    } catch (const sbx::Error&) {
      // Garbage on the stream: the agent drops the connection.
    }
  }
  sbx_fuzz::check_outside(t, "root");
  return 0;
}
