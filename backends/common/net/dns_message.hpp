// The DNS messages the jails' forwarder (forwarder.hpp) reads: a sandbox's
// query, and the upstream resolver's answer to it. Parsing is glibc's
// libresolv (ns_initparse and friends, Debian's libc6); what is decided here
// is which of an answer's addresses a query for an allowed name may open.
// Every input is untrusted (tests/fuzz/fuzz_dns_message.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sbx::net::dns {

struct Query {
  uint16_t id = 0;
  std::string name;  ///< lower case, no trailing dot
  uint16_t qtype = 0;
  uint16_t qclass = 0;
};

/// A standard query (QR 0, opcode QUERY) of exactly one question; nullopt for anything else.
std::optional<Query> parse_query(const uint8_t* msg, size_t len);

/// A reply to query `msg` (parse_query accepted it) carrying only its header
/// and question, with response code rcode (ns_r_refused, ns_r_servfail, ...).
std::vector<uint8_t> error_reply(const uint8_t* msg, size_t len, int rcode);

struct Grant {
  uint32_t addr = 0;  ///< host byte order
  uint32_t ttl = 0;   ///< seconds
};

struct Answer {
  std::vector<Grant> addrs;                              ///< A records of the name or its aliases
  std::vector<std::pair<std::string, uint32_t>> aliases;  ///< CNAME targets reached from the name, with TTLs
};

/// The A records of an upstream response to query q that belong to q.name or
/// to the CNAME chain starting at it; records of any other owner open
/// nothing. nullopt when it is not a response to q (id, question).
std::optional<Answer> chain_answers(const uint8_t* msg, size_t len, const Query& q);

/// Lower case, without the trailing dot.
std::string canonical_name(const char* name);

}  // namespace sbx::net::dns
