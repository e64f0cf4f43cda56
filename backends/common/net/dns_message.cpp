#include "backends/common/net/dns_message.hpp"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <resolv.h>

#include <cctype>
#include <cstring>
#include <set>

namespace sbx::net::dns {

namespace {

// Aliases followed at most: a resolver gives up far earlier (glibc: 16 hops).
constexpr size_t kMaxChain = 16;

bool init(const uint8_t* msg, size_t len, ns_msg* m) {
  return len >= NS_HFIXEDSZ && len <= 65535 && ns_initparse(msg, static_cast<int>(len), m) == 0;
}

std::optional<Query> question(ns_msg& m) {
  if (ns_msg_count(m, ns_s_qd) != 1) return std::nullopt;
  ns_rr rr;
  if (ns_parserr(&m, ns_s_qd, 0, &rr) != 0) return std::nullopt;
  Query q;
  q.id = ns_msg_id(m);
  q.name = canonical_name(ns_rr_name(rr));
  q.qtype = static_cast<uint16_t>(ns_rr_type(rr));
  q.qclass = static_cast<uint16_t>(ns_rr_class(rr));
  return q;
}

}  // namespace

std::string canonical_name(const char* name) {
  std::string out;
  for (const char* p = name; *p; ++p) out += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

std::optional<Query> parse_query(const uint8_t* msg, size_t len) {
  ns_msg m;
  if (!init(msg, len, &m)) return std::nullopt;
  if (ns_msg_getflag(m, ns_f_qr) != 0 || ns_msg_getflag(m, ns_f_opcode) != ns_o_query) return std::nullopt;
  auto q = question(m);
  if (!q || q->name.empty()) return std::nullopt;
  return q;
}

std::vector<uint8_t> error_reply(const uint8_t* msg, size_t len, int rcode) {
  std::vector<uint8_t> out;
  if (len < NS_HFIXEDSZ) return out;
  const uint8_t* p = msg + NS_HFIXEDSZ;
  const uint8_t* end = msg + len;
  // The question: its name (as the client wrote it) and type and class.
  if (ns_name_skip(&p, end) != 0 || end - p < 4) return out;
  p += 4;
  out.assign(msg, p);
  uint8_t rd = msg[2] & 0x01;
  out[2] = static_cast<uint8_t>(0x80 | rd);                  // QR, opcode QUERY, RD as asked
  out[3] = static_cast<uint8_t>(0x80 | (rcode & 0x0f));      // RA, the code
  const uint8_t counts[8] = {0, 1, 0, 0, 0, 0, 0, 0};        // one question, nothing else
  std::memcpy(out.data() + 4, counts, sizeof counts);
  return out;
}

std::optional<Answer> chain_answers(const uint8_t* msg, size_t len, const Query& q) {
  ns_msg m;
  if (!init(msg, len, &m) || ns_msg_getflag(m, ns_f_qr) == 0) return std::nullopt;
  auto asked = question(m);
  if (!asked || asked->id != q.id || asked->name != q.name || asked->qtype != q.qtype) return std::nullopt;
  Answer out;
  if (ns_msg_getflag(m, ns_f_rcode) != ns_r_noerror) return out;
  struct Rec {
    std::string owner;
    uint16_t type;
    uint32_t ttl;
    std::string target;  // CNAME
    uint32_t addr = 0;   // A
  };
  std::vector<Rec> recs;
  int n = ns_msg_count(m, ns_s_an);
  for (int i = 0; i < n; ++i) {
    ns_rr rr;
    if (ns_parserr(&m, ns_s_an, i, &rr) != 0) break;
    if (ns_rr_class(rr) != ns_c_in) continue;
    Rec r{canonical_name(ns_rr_name(rr)), static_cast<uint16_t>(ns_rr_type(rr)), ns_rr_ttl(rr), "", 0};
    if (r.type == ns_t_a && ns_rr_rdlen(rr) == 4) {
      uint32_t be;
      std::memcpy(&be, ns_rr_rdata(rr), 4);
      r.addr = ntohl(be);
    } else if (r.type == ns_t_cname) {
      char target[NS_MAXDNAME];
      if (ns_name_uncompress(ns_msg_base(m), ns_msg_end(m), ns_rr_rdata(rr), target, sizeof target) < 0) continue;
      r.target = canonical_name(target);
    } else {
      continue;
    }
    recs.push_back(std::move(r));
  }
  // The chain, in whatever order the records came: follow CNAMEs from the name asked.
  std::set<std::string> chain{q.name};
  for (bool grew = true; grew && chain.size() <= kMaxChain;) {
    grew = false;
    for (auto& r : recs)
      if (r.type == ns_t_cname && chain.count(r.owner) && !r.target.empty() && chain.insert(r.target).second) {
        out.aliases.emplace_back(r.target, r.ttl);
        grew = true;
      }
  }
  for (auto& r : recs)
    if (r.type == ns_t_a && chain.count(r.owner)) out.addrs.push_back({r.addr, r.ttl});
  return out;
}

}  // namespace sbx::net::dns
