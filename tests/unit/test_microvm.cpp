// The microvm driver's pure parts: the relay's channel bookkeeping, the VMM
// command lines and cloud-hypervisor API requests (checked without the
// binary, against a real unix socket where a peer is needed), and the
// agent's cpio.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/relay_map.hpp"
#include "backends/drivers.hpp"
#include "backends/microvm/guest.hpp"
#include "backends/microvm/vmm.hpp"
#include "core/config.hpp"
#include "core/fsutil.hpp"
#include "core/protocol.hpp"
#include "core/unix_socket.hpp"
#include "tests/unit/helpers.hpp"

using sbx::agent::RelayMap;
using sbx::microvm::ApiRequest;
using sbx::microvm::VmPlan;
namespace proto = sbx::proto;

namespace {

proto::Frame decode_one(const std::string& bytes) {
  proto::Decoder d;
  d.feed(bytes.data(), bytes.size());
  auto f = d.pop();
  REQUIRE(f);
  REQUIRE(d.buffered() == 0);
  return *f;
}

proto::Frame frame(proto::Type t, uint32_t ch, std::string payload = "{}") { return {t, ch, std::move(payload)}; }

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

std::string after(const std::vector<std::string>& v, const std::string& flag) {
  auto it = std::find(v.begin(), v.end(), flag);
  REQUIRE(it != v.end());
  REQUIRE(it + 1 != v.end());
  return *(it + 1);
}

VmPlan sample_plan() {
  VmPlan p;
  p.dir = "/state/sandboxes/sbx_x/vm";
  p.kernel = "/guest/vmlinuz";
  p.initrd = "/state/microvm/initrd-1.img";
  p.disk = "/state/sandboxes/sbx_x/layer.img";
  p.console_log = "/state/sandboxes/sbx_x/console.log";
  p.vcpus = 2;
  p.memory_mb = 608;
  p.cmdline_args = "sbx.workdir=/work sbx.pids=256";
  return p;
}

}  // namespace

TEST_CASE("relay: two clients on the same channel id get disjoint guest channels") {
  RelayMap m;
  auto a = decode_one(*m.from_client(10, frame(proto::Type::exec, 1)));
  auto b = decode_one(*m.from_client(11, frame(proto::Type::exec, 1)));
  CHECK(a.channel != b.channel);
  CHECK(a.type == proto::Type::exec);
  // Output for b's guest channel goes to client 11 under its own id.
  auto out = m.from_guest(frame(proto::Type::stdout_data, b.channel, "hello"));
  REQUIRE(out);
  CHECK(out->first == 11);
  auto back = decode_one(out->second);
  CHECK(back.channel == 1);
  CHECK(back.payload == "hello");
  // stdin follows the request's route.
  auto in = decode_one(*m.from_client(10, frame(proto::Type::stdin_data, 1, "x")));
  CHECK(in.channel == a.channel);
}

TEST_CASE("relay: the final frame of each request kind closes its route") {
  RelayMap m;
  auto ex = decode_one(*m.from_client(1, frame(proto::Type::exec, 1))).channel;
  auto rd = decode_one(*m.from_client(1, frame(proto::Type::file_read, 2))).channel;
  auto pg = decode_one(*m.from_client(1, frame(proto::Type::ping, 3))).channel;
  CHECK(m.open_channels() == 3);
  // file_read: ok (its stat) is not final, end is.
  REQUIRE(m.from_guest(frame(proto::Type::ok, rd)));
  CHECK(m.open_channels() == 3);
  REQUIRE(m.from_guest(frame(proto::Type::end, rd, "")));
  REQUIRE(m.from_guest(frame(proto::Type::ok, pg)));
  REQUIRE(m.from_guest(frame(proto::Type::exit, ex)));
  CHECK(m.open_channels() == 0);
  // Late frames for ended requests are dropped, in both directions.
  CHECK_FALSE(m.from_guest(frame(proto::Type::stdout_data, ex, "late")));
  CHECK_FALSE(m.from_client(1, frame(proto::Type::stdin_eof, 1, "")));
}

TEST_CASE("relay: a vanished client's commands are killed, its other requests forgotten") {
  RelayMap m;
  auto ex = decode_one(*m.from_client(5, frame(proto::Type::exec, 1))).channel;
  m.from_client(5, frame(proto::Type::list, 2));
  m.from_client(6, frame(proto::Type::exec, 1));
  auto kills = m.drop_client(5);
  REQUIRE(kills.size() == 1);
  auto k = decode_one(kills[0]);
  CHECK(k.type == proto::Type::signal);
  CHECK(k.channel == ex);
  CHECK(k.json().at("signal") == SIGKILL);
  CHECK(m.open_channels() == 1);  // client 6's exec
  CHECK_FALSE(m.from_guest(frame(proto::Type::stdout_data, ex, "x")));
}

TEST_CASE("relay: a slow client's commands are paused once and resumed once") {
  RelayMap m;
  auto ex = decode_one(*m.from_client(3, frame(proto::Type::exec, 7))).channel;
  m.from_client(3, frame(proto::Type::file_read, 8));
  auto p = m.pause_client(3, true);
  REQUIRE(p.size() == 1);
  CHECK(decode_one(p[0]).channel == ex);
  CHECK(decode_one(p[0]).json().at("signal") == SIGSTOP);
  CHECK(m.pause_client(3, true).empty());
  auto r = m.pause_client(3, false);
  REQUIRE(r.size() == 1);
  CHECK(decode_one(r[0]).json().at("signal") == SIGCONT);
}

TEST_CASE("relay: a slow attacher (attach, logs -f) is paused like a command, and resumed") {
  RelayMap m;
  auto at = decode_one(*m.from_client(6, frame(proto::Type::proc_attach, 2, R"({"pid": 9})"))).channel;
  auto p = m.pause_client(6, true);
  REQUIRE(p.size() == 1);
  CHECK(decode_one(p[0]).channel == at);
  CHECK(decode_one(p[0]).json().at("signal") == SIGSTOP);
  auto r = m.pause_client(6, false);
  REQUIRE(r.size() == 1);
  CHECK(decode_one(r[0]).json().at("signal") == SIGCONT);
}

TEST_CASE("relay: a TCP connection lives until both ends (or an error), pauses, and is aborted with its client") {
  RelayMap m;
  auto a = decode_one(*m.from_client(4, frame(proto::Type::connect, 1, R"({"port": 80})"))).channel;
  REQUIRE(m.from_guest(frame(proto::Type::ok, a)));
  REQUIRE(m.from_client(4, frame(proto::Type::data, 1, "req")));
  REQUIRE(m.from_client(4, frame(proto::Type::end, 1, "")));
  REQUIRE(m.from_guest(frame(proto::Type::data, a, "resp")));  // the other direction goes on after the client's end
  CHECK(m.open_channels() == 1);
  REQUIRE(m.from_guest(frame(proto::Type::end, a, "")));
  CHECK(m.open_channels() == 0);
  // An error from the client ends it too.
  auto b = decode_one(*m.from_client(4, frame(proto::Type::connect, 2, R"({"port": 80})"))).channel;
  REQUIRE(m.from_client(4, frame(proto::Type::error, 2)));
  CHECK(m.open_channels() == 0);
  CHECK_FALSE(m.from_guest(frame(proto::Type::data, b, "late")));
  // A slow client's connection is paused like a command; a vanished client's is aborted.
  auto c = decode_one(*m.from_client(5, frame(proto::Type::connect, 1, R"({"port": 80})"))).channel;
  auto p = m.pause_client(5, true);
  REQUIRE(p.size() == 1);
  CHECK(decode_one(p[0]).channel == c);
  CHECK(decode_one(p[0]).json().at("signal") == SIGSTOP);
  auto gone = m.drop_client(5);
  REQUIRE(gone.size() == 1);
  CHECK(decode_one(gone[0]).type == proto::Type::error);
  CHECK(decode_one(gone[0]).channel == c);
}

TEST_CASE("qemu: the microvm command line under TCG and under KVM") {
  auto q = sbx::microvm::make_qemu("/usr/bin/qemu-system-x86_64");
  CHECK(q->relayed());
  CHECK(q->boot_requests(sample_plan()).empty());
  auto tcg = q->command_line(sample_plan());
  CHECK(tcg.front() == "/usr/bin/qemu-system-x86_64");
  CHECK(after(tcg, "-M").rfind("microvm,", 0) == 0);
  CHECK(after(tcg, "-accel") == "tcg,tb-size=64");
  CHECK(after(tcg, "-cpu") == "max");
  CHECK(after(tcg, "-m") == "608");
  CHECK(after(tcg, "-smp") == "2");
  CHECK(has(tcg, "-no-reboot"));
  // The guest is told the host's TSC rate, what its TSC runs at under TCG.
  const uint64_t khz = sbx::microvm::host_tsc_khz();
  CHECK(khz > 100'000);  // some hundred MHz at least: it is measured, not guessed
  CHECK(after(tcg, "-append") ==
        "console=ttyS0 quiet panic=-1 tsc_early_khz=" + std::to_string(khz) + " sbx.workdir=/work sbx.pids=256");
  CHECK(after(tcg, "-chardev") == "socket,id=agent,path=/state/sandboxes/sbx_x/vm/serial.sock");
  CHECK(has(tcg, "virtserialport,chardev=agent,name=agent"));
  CHECK(after(tcg, "-drive").find("file=/state/sandboxes/sbx_x/layer.img,format=raw") != std::string::npos);
  CHECK(after(tcg, "-sandbox").find("elevateprivileges=deny") != std::string::npos);
  CHECK_FALSE(has(tcg, "-runas"));
  CHECK_FALSE(has(tcg, "-netdev"));  // --network none: no NIC at all

  VmPlan p = sample_plan();
  p.kvm = true;
  p.runas = "1073807360:1073807360";
  auto kvm = q->command_line(p);
  CHECK(after(kvm, "-accel") == "kvm");
  CHECK(after(kvm, "-cpu") == "host");
  CHECK(after(kvm, "-append").find("tsc_early_khz") == std::string::npos);
  CHECK(after(kvm, "-runas") == "1073807360:1073807360");
  // QEMU calls setuid for -runas after its filter is in: that must stay allowed.
  CHECK(after(kvm, "-sandbox").find("elevateprivileges") == std::string::npos);

  CHECK(q->tap_inherited());
  p.tap_fd = sbx::microvm::kInheritedTapFd;  // --network jail: the jail's tap, already open
  auto net = q->command_line(p);
  CHECK(after(net, "-netdev") == "tap,id=n0,fd=3,vhost=off");
  CHECK(has(net, "virtio-net-device,netdev=n0"));
}

TEST_CASE("cloud-hypervisor: the API socket, vm.create and vm.boot") {
  auto ch = sbx::microvm::make_cloud_hypervisor("/opt/ch/cloud-hypervisor");
  CHECK_FALSE(ch->relayed());
  CHECK(ch->kernel_file() == "vmlinux");
  VmPlan p = sample_plan();
  p.kernel = "/guest/vmlinux";
  p.kvm = true;
  p.cmdline_args += " sbx.vsock=1024";
  CHECK(ch->command_line(p) ==
        std::vector<std::string>{"/opt/ch/cloud-hypervisor", "--api-socket", "path=/state/sandboxes/sbx_x/vm/api.sock"});
  auto reqs = ch->boot_requests(p);
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].method == "PUT");
  CHECK(reqs[0].path == "/api/v1/vm.create");
  auto cfg = nlohmann::json::parse(reqs[0].body);
  CHECK(cfg["cpus"]["boot_vcpus"] == 2);
  CHECK(cfg["memory"]["size"] == uint64_t{608} << 20);
  CHECK(cfg["payload"]["kernel"] == "/guest/vmlinux");
  CHECK(cfg["payload"]["initramfs"] == "/state/microvm/initrd-1.img");
  CHECK(cfg["payload"]["cmdline"] == "console=ttyS0 quiet panic=-1 sbx.workdir=/work sbx.pids=256 sbx.vsock=1024");
  CHECK(cfg["disks"][0]["path"] == "/state/sandboxes/sbx_x/layer.img");
  CHECK(cfg["vsock"]["socket"] == "/state/sandboxes/sbx_x/vm/vsock.sock");
  CHECK(cfg["serial"]["mode"] == "File");
  CHECK_FALSE(cfg.contains("net"));
  CHECK(reqs[1].path == "/api/v1/vm.boot");
  CHECK(reqs[1].body.empty());
  CHECK(reqs[1].fd == -1);
  // --network jail: the tap's fd goes with vm.add-net between create and boot (never in a body).
  CHECK_FALSE(ch->tap_inherited());
  p.tap_fd = 17;
  auto jailed = ch->boot_requests(p);
  REQUIRE(jailed.size() == 3);
  CHECK_FALSE(nlohmann::json::parse(jailed[0].body).contains("net"));
  CHECK(jailed[0].fd == -1);
  CHECK(jailed[1].path == "/api/v1/vm.add-net");
  CHECK(jailed[1].fd == 17);
  CHECK(jailed[1].body.find("fd") == std::string::npos);
  CHECK(jailed[2].path == "/api/v1/vm.boot");

  CHECK(sbx::microvm::http_bytes({"PUT", "/api/v1/vm.boot", ""}) ==
        "PUT /api/v1/vm.boot HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n");
  auto with_body = sbx::microvm::http_bytes({"PUT", "/api/v1/vm.create", "{\"a\":1}"});
  CHECK(with_body.find("Content-Type: application/json\r\nContent-Length: 7\r\n") != std::string::npos);
  CHECK(with_body.substr(with_body.size() - 7) == "{\"a\":1}");
}

TEST_CASE("--image: the image's disk is attached read-only after the writable layer, on both VMMs") {
  VmPlan p = sample_plan();
  CHECK_FALSE(has(sbx::microvm::make_qemu("/q")->command_line(p), "id=image"));
  p.image_disk = "/images/abc/rootfs.ext4";
  auto a = sbx::microvm::make_qemu("/q")->command_line(p);
  auto image = std::find(a.begin(), a.end(), "id=image,file=/images/abc/rootfs.ext4,format=raw,if=none,readonly=on");
  auto layer = std::find_if(a.begin(), a.end(), [](auto& s) { return s.rfind("id=layer,", 0) == 0; });
  REQUIRE(image != a.end());
  CHECK(layer < image);
  CHECK(*(image + 2) == "virtio-blk-device,drive=image");
  p.kvm = true;
  auto cfg = nlohmann::json::parse(sbx::microvm::make_cloud_hypervisor("/ch")->boot_requests(p)[0].body);
  REQUIRE(cfg["disks"].size() == 2);
  CHECK_FALSE(cfg["disks"][0].contains("readonly"));
  CHECK(cfg["disks"][1] == nlohmann::json({{"path", "/images/abc/rootfs.ext4"}, {"readonly", true}}));
}

TEST_CASE("qemu: the layer as inherited descriptors (an fd set, no image locks), and -incoming for a restore") {
  VmPlan p = sample_plan();
  auto plain = sbx::microvm::make_qemu("/q")->command_line(p);
  CHECK_FALSE(has(plain, "-add-fd"));
  CHECK_FALSE(has(plain, "-incoming"));
  p.layer_fds = true;
  p.incoming = true;
  auto a = sbx::microvm::make_qemu("/q")->command_line(p);
  auto rw = std::find(a.begin(), a.end(), "fd=4,set=1");
  auto ro = std::find(a.begin(), a.end(), "fd=5,set=1");
  auto drive = std::find(a.begin(), a.end(),
                         "id=layer,file.filename=/dev/fdset/1,file.driver=file,file.locking=off,format=raw,if=none,cache=unsafe");
  REQUIRE(rw != a.end());
  REQUIRE(ro != a.end());
  REQUIRE(drive != a.end());
  CHECK(*(rw - 1) == "-add-fd");
  CHECK(ro < drive);
  CHECK(*(drive + 2) == "virtio-blk-device,drive=layer");
  auto incoming = std::find(a.begin(), a.end(), "-incoming");
  REQUIRE(incoming != a.end());
  CHECK(*(incoming + 1) == "defer");
  CHECK(sbx::microvm::make_qemu("/q")->layer_by_fd());
  CHECK_FALSE(sbx::microvm::make_cloud_hypervisor("/ch")->layer_by_fd());
}

TEST_CASE("--image: a store entry's disk is cached beside its rootfs, a plain directory's is not") {
  sbx_test::TempDir tmp("microvm-image");
  sbx::make_dirs(tmp.path + "/entry/rootfs/etc");
  sbx::write_file_atomic(tmp.path + "/entry/rootfs/etc/marker", "x\n");
  CHECK(sbx::microvm::image_disk_cache(tmp.path + "/entry/rootfs").empty());
  sbx::write_file_atomic(tmp.path + "/entry/image.json", "{}");
  CHECK(sbx::microvm::image_disk_cache(tmp.path + "/entry/rootfs") == tmp.path + "/entry/rootfs.ext4");
  CHECK(sbx::microvm::image_disk_cache(tmp.path + "/entry/rootfs/") == tmp.path + "/entry/rootfs.ext4");
}

TEST_CASE("cloud-hypervisor: API answers and the vsock CONNECT handshake over real sockets") {
  sbx_test::TempDir tmp("microvm");
  std::string api = tmp.path + "/api.sock";
  sbx::Fd listener = sbx::listen_unix(api);
  // A peer that answers each request with the next status line.
  auto serve = [&](std::vector<std::string> answers, std::vector<std::string>* got) {
    return std::thread([&listener, answers, got] {
      for (auto& a : answers) {
        sbx::Fd c(::accept(listener.get(), nullptr, nullptr));
        char buf[8192];
        ssize_t n = ::read(c.get(), buf, sizeof buf);
        got->emplace_back(buf, n > 0 ? static_cast<size_t>(n) : 0);
        sbx::write_all(c.get(), a);
      }
    });
  };
  std::vector<std::string> got;
  auto t = serve({"HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n\r\nbad kernel path"}, &got);
  sbx::microvm::send_api_request(api, {"PUT", "/api/v1/vm.boot", ""}, 5000);
  auto e = sbx_test::error_of([&] { sbx::microvm::send_api_request(api, {"PUT", "/api/v1/vm.create", "{}"}, 5000); });
  t.join();
  CHECK(std::string(e.what()).find("400 Bad Request") != std::string::npos);
  REQUIRE(got.size() == 2);
  CHECK(got[0].rfind("PUT /api/v1/vm.boot HTTP/1.1\r\n", 0) == 0);

  // vsock: "CONNECT 1024\n" answered "OK <port>\n", then the stream is the agent's.
  std::string vsock = tmp.path + "/vsock.sock";
  sbx::Fd vl = sbx::listen_unix(vsock);
  std::string hello;
  std::thread peer([&] {
    sbx::Fd c(::accept(vl.get(), nullptr, nullptr));
    char buf[64];
    ssize_t n = ::read(c.get(), buf, sizeof buf);
    hello.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
    sbx::write_all(c.get(), "OK 1073741824\nAGENT");
  });
  auto ch = sbx::microvm::make_cloud_hypervisor("/opt/ch/cloud-hypervisor");
  sbx::Fd s = ch->connect(tmp.path);
  char rest[5];
  REQUIRE(sbx::read_exact(s.get(), rest, 5));
  peer.join();
  CHECK(hello == "CONNECT 1024\n");
  CHECK(std::string(rest, 5) == "AGENT");  // nothing after the OK line was swallowed
}

TEST_CASE("cloud-hypervisor: a request's descriptor reaches the API socket's peer (SCM_RIGHTS)") {
  sbx_test::TempDir tmp("microvm");
  std::string api = tmp.path + "/api.sock";
  sbx::Fd listener = sbx::listen_unix(api);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  sbx::Fd rd(p[0]), wr(p[1]);
  std::string got;
  sbx::Fd received;
  std::thread peer([&] {
    sbx::Fd c(::accept(listener.get(), nullptr, nullptr));
    char buf[8192];
    char ctl[CMSG_SPACE(sizeof(int))];
    iovec iov{buf, sizeof buf};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t n = ::recvmsg(c.get(), &m, 0);
    got.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (cmsghdr* h = CMSG_FIRSTHDR(&m); h && h->cmsg_type == SCM_RIGHTS) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h), sizeof fd);
      received.reset(fd);
    }
    sbx::write_all(c.get(), "HTTP/1.1 204 No Content\r\n\r\n");
  });
  sbx::microvm::send_api_request(api, {"PUT", "/api/v1/vm.add-net", "{\"id\":\"n0\"}", wr.get()}, 5000);
  peer.join();
  CHECK(got.rfind("PUT /api/v1/vm.add-net HTTP/1.1\r\n", 0) == 0);
  REQUIRE(received);
  // The peer's copy is the very pipe: what it writes comes out of ours.
  sbx::write_all(received.get(), "tap");
  char buf[3];
  REQUIRE(sbx::read_exact(rd.get(), buf, 3));
  CHECK(std::string(buf, 3) == "tap");
}

TEST_CASE("the agent's cpio is newc, holds /sbin/sbx-agent and is padded for the archive after it") {
  std::string bin = "\x7f" "ELF-not-really";
  std::string c = sbx::microvm::agent_cpio(bin);
  CHECK(c.size() % 512 == 0);
  CHECK(c.rfind("070701", 0) == 0);
  auto pos = c.find("sbin/sbx-agent");
  REQUIRE(pos != std::string::npos);
  // The entry's header: mode 0100755 and the file size, in hex.
  std::string hdr = c.substr(pos - 110, 110);
  CHECK(hdr.substr(14, 8) == "000081ED");
  CHECK(hdr.substr(54, 8) == "0000000F");
  CHECK(c.find(bin) != std::string::npos);
  CHECK(c.find("TRAILER!!!") != std::string::npos);
}

TEST_CASE("microvm: create waits longer for a VM booting under TCG", "[microvm]") {
  // Once over 30 s from a just-built image disk, under load: a TCG boot gets 120 s.
  sbx::Config cfg;
  auto driver = sbx::find_driver(sbx::builtin_drivers(), "microvm")->make(cfg);
  sbx::SandboxRecord rec;
  rec.driver_data["accel"] = "tcg";
  CHECK(driver->ready_timeout_ms(rec) == 120'000);
  rec.driver_data["accel"] = "kvm";
  CHECK(driver->ready_timeout_ms(rec) == 30'000);
  auto subprocess = sbx::find_driver(sbx::builtin_drivers(), "subprocess")->make(cfg);
  CHECK(subprocess->ready_timeout_ms(rec) == 30'000);
}
