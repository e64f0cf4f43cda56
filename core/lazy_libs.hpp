// C libraries that only some commands need are loaded on first use, not at
// start: linked normally, libarchive alone (with libxml2 and ICU behind it)
// added ~1.5 ms to every sbx call, which is most of a warm exec.
// Only C APIs are loaded this way, so no C++ exception crosses a dlopen edge.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <stddef.h>
// curl.h turns curl_easy_setopt into a type-checking macro under GCC, which
// would also expand `api.curl_easy_setopt(...)`; the function table needs the plain names.
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>
#include <libmnl/libmnl.h>
#include <nftables/libnftables.h>
#include <sqlite3.h>

namespace sbx {

// A table of one library's functions, each a pointer of its own declared type.
#define SBX_API_ENTRY(name) decltype(&::name) name = nullptr;
#define SBX_API_TABLE(Api, LIST) \
  struct Api {                   \
    LIST(SBX_API_ENTRY)          \
  }

#define SBX_ARCHIVE_FUNCTIONS(X) \
  X(archive_entry_filetype) \
  X(archive_entry_free) \
  X(archive_entry_gid) \
  X(archive_entry_hardlink) \
  X(archive_entry_hardlink_utf8) \
  X(archive_entry_mtime) \
  X(archive_entry_mtime_nsec) \
  X(archive_entry_new) \
  X(archive_entry_pathname) \
  X(archive_entry_pathname_utf8) \
  X(archive_entry_perm) \
  X(archive_entry_set_filetype) \
  X(archive_entry_set_gid) \
  X(archive_entry_set_hardlink) \
  X(archive_entry_set_mtime) \
  X(archive_entry_set_pathname) \
  X(archive_entry_set_perm) \
  X(archive_entry_set_rdev) \
  X(archive_entry_set_size) \
  X(archive_entry_set_symlink) \
  X(archive_entry_set_uid) \
  X(archive_entry_size) \
  X(archive_entry_size_is_set) \
  X(archive_entry_symlink) \
  X(archive_entry_symlink_utf8) \
  X(archive_entry_uid) \
  X(archive_errno) \
  X(archive_error_string) \
  X(archive_read_data) \
  X(archive_read_disk_can_descend) \
  X(archive_read_disk_descend) \
  X(archive_read_disk_new) \
  X(archive_read_disk_open) \
  X(archive_read_disk_set_standard_lookup) \
  X(archive_read_disk_set_symlink_physical) \
  X(archive_read_free) \
  X(archive_read_new) \
  X(archive_read_next_header) \
  X(archive_read_open) \
  X(archive_read_open_fd) \
  X(archive_read_support_filter_all) \
  X(archive_read_support_filter_gzip) \
  X(archive_read_support_filter_xz) \
  X(archive_read_support_filter_zstd) \
  X(archive_read_support_format_all) \
  X(archive_read_support_format_raw) \
  X(archive_read_support_format_tar) \
  X(archive_write_add_filter_gzip) \
  X(archive_write_add_filter_zstd) \
  X(archive_write_close) \
  X(archive_write_data) \
  X(archive_write_disk_new) \
  X(archive_write_disk_set_options) \
  X(archive_write_disk_set_standard_lookup) \
  X(archive_write_finish_entry) \
  X(archive_write_free) \
  X(archive_write_header) \
  X(archive_write_new) \
  X(archive_write_open_fd) \
  X(archive_write_set_bytes_in_last_block) \
  X(archive_write_set_format_pax_restricted)

/// The libarchive functions sbx uses, resolved from libarchive.so.13.
SBX_API_TABLE(ArchiveApi, SBX_ARCHIVE_FUNCTIONS);

/// Loads libarchive once (thread-safe); throws unavailable with an install hint when it is missing.
const ArchiveApi& archive_api();

#define SBX_CURL_FUNCTIONS(X) \
  X(curl_global_init) X(curl_easy_init) X(curl_easy_setopt) X(curl_easy_perform) X(curl_easy_getinfo) \
  X(curl_easy_cleanup) X(curl_easy_strerror) X(curl_slist_append) X(curl_slist_free_all) X(curl_easy_escape) \
  X(curl_free) X(curl_easy_send) X(curl_easy_recv)

/// The libcurl functions the remote driver uses, resolved from libcurl.so.4.
SBX_API_TABLE(CurlApi, SBX_CURL_FUNCTIONS);

/// Loads libcurl once and runs curl_global_init; throws unavailable with an install hint.
const CurlApi& curl_api();

#define SBX_MHD_FUNCTIONS(X) \
  X(MHD_start_daemon) X(MHD_stop_daemon) X(MHD_quiesce_daemon) X(MHD_create_response_from_buffer) \
  X(MHD_create_response_from_callback) X(MHD_create_response_from_fd64) X(MHD_add_response_header) \
  X(MHD_queue_response) X(MHD_destroy_response) X(MHD_lookup_connection_value) X(MHD_get_connection_info) \
  X(MHD_get_connection_values) X(MHD_create_response_for_upgrade) X(MHD_upgrade_action)

/// The libmicrohttpd functions sbx serve uses, resolved from libmicrohttpd.so.12.
SBX_API_TABLE(MhdApi, SBX_MHD_FUNCTIONS);

/// Loads libmicrohttpd once; throws unavailable with an install hint.
const MhdApi& mhd_api();

// The network jail's: linked, libnftables (with libnftnl, libxtables, libjansson,
// libgmp behind it) and libmnl added ~0.8 ms to every call, jailed or not.
#define SBX_NFT_FUNCTIONS(X) \
  X(nft_ctx_new) X(nft_ctx_free) X(nft_ctx_buffer_output) X(nft_ctx_buffer_error) X(nft_ctx_set_dry_run) \
  X(nft_run_cmd_from_buffer) X(nft_ctx_get_error_buffer) X(nft_ctx_get_output_buffer)

/// The libnftables functions the jail's filter uses, resolved from libnftables.so.1.
SBX_API_TABLE(NftApi, SBX_NFT_FUNCTIONS);

/// Loads libnftables once; throws unavailable with an install hint.
const NftApi& nft_api();

#define SBX_MNL_FUNCTIONS(X) \
  X(mnl_nlmsg_put_header) X(mnl_nlmsg_put_extra_header) X(mnl_socket_open2) X(mnl_socket_bind) \
  X(mnl_socket_close) X(mnl_socket_sendto) X(mnl_socket_get_portid) X(mnl_socket_recvfrom) X(mnl_cb_run) \
  X(mnl_attr_put_strz) X(mnl_attr_put_u32) X(mnl_attr_nest_start) X(mnl_attr_nest_end)

/// The libmnl functions the jail's rtnetlink uses, resolved from libmnl.so.0.
SBX_API_TABLE(MnlApi, SBX_MNL_FUNCTIONS);

/// Loads libmnl once; throws unavailable with an install hint.
const MnlApi& mnl_api();

// Only the deno driver's snapshots copy its SQLite store (the backup API).
#define SBX_SQLITE_FUNCTIONS(X) \
  X(sqlite3_open_v2) X(sqlite3_close_v2) X(sqlite3_db_config) X(sqlite3_errmsg) X(sqlite3_errstr) X(sqlite3_exec) \
  X(sqlite3_busy_timeout) X(sqlite3_backup_init) X(sqlite3_backup_step) X(sqlite3_backup_finish)

/// The SQLite functions sbx uses, resolved from libsqlite3.so.0.
SBX_API_TABLE(SqliteApi, SBX_SQLITE_FUNCTIONS);

/// Loads libsqlite3 once; throws unavailable with an install hint.
const SqliteApi& sqlite_api();

/// The SHA-256 functions of libcrypto (OpenSSL 3's EVP API, ABI-stable), used to
/// verify image blobs. Declared here rather than through <openssl/evp.h> so a
/// build needs no libssl-dev: the library itself ships with libcurl4.
struct CryptoApi {
  void* (*EVP_MD_CTX_new)() = nullptr;
  void (*EVP_MD_CTX_free)(void* ctx) = nullptr;
  const void* (*EVP_sha256)() = nullptr;
  int (*EVP_DigestInit_ex)(void* ctx, const void* md, void* engine) = nullptr;
  int (*EVP_DigestUpdate)(void* ctx, const void* data, size_t n) = nullptr;
  int (*EVP_DigestFinal_ex)(void* ctx, unsigned char* out, unsigned int* n) = nullptr;
};

/// Loads libcrypto.so.3 once; throws unavailable with an install hint.
const CryptoApi& crypto_api();

}  // namespace sbx
