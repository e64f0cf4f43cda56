// Where the deno driver's pieces are on this host: the Deno binary and
// Pyodide (npm packages, pinned in agent-deno/package.json and installed by
// scripts/setup-deno.sh), the agent's TypeScript sources, and the per-host
// Pyodide memory snapshot that cuts an interpreter's start from ~2 s to ~0.2 s.
#pragma once

#include <sys/types.h>

#include <string>

namespace sbx::deno {

struct Runtime {
  std::string home;     ///< the npm prefix holding node_modules/{deno,pyodide}
  std::string deno;     ///< the deno executable
  std::string pyodide;  ///< Pyodide's directory, with a trailing slash
  std::string agent;    ///< directory of agent.ts and its modules
  std::string version;  ///< "deno X, pyodide Y" for doctor
};

/// Finds every piece; throws not_found naming what is missing and how to install it.
/// The runtime: $SBX_DENO_HOME, else the install default (SBX_DENO_HOME at build time).
/// The agent: $SBX_DENO_AGENT, else sbx-agent-deno/ beside sbx, else the install's libexec.
Runtime find_runtime();

/// The Pyodide memory snapshot for this runtime under `cache_dir`, made on
/// first use (a few seconds, once per host and runtime version). Returns ""
/// when it cannot be made; the agent then loads Pyodide the slow way.
std::string ensure_snapshot(const Runtime& rt, const std::string& cache_dir, std::string* why = nullptr);

/// The agent's modules transpiled once per host, agent and Deno (`deno cache`
/// into a DENO_DIR of its own, made on first use): a directory to link at
/// gen/file in each sandbox's own DENO_DIR, read by every sandbox and written
/// by none, so a new agent starts without transpiling its TypeScript. Returns
/// "" when it cannot be made; the agent then transpiles for itself.
std::string ensure_transpiled(const Runtime& rt, const std::string& cache_dir, std::string* why = nullptr);

/// V8's compiled code of the agent, its Workers and Pyodide's JavaScript,
/// made once per host, agent, snapshot and V8 flag set by a warm-up run of the
/// agent on the host (`--exit-when-warm`, Python loaded): a directory of
/// DENO_DIR cache files that seed_code_cache copies into each sandbox's own
/// DENO_DIR, so that its agent compiles none of it again (~200 ms of a Python
/// one-shot). V8 refuses code made under other flags (the wasm memory cap
/// among them), hence one per flag set. Returns "" when it cannot be made.
std::string ensure_code_cache(const Runtime& rt, const std::string& cache_dir, const std::string& snapshot,
                              const std::string& v8_flags, std::string* why = nullptr);

/// Copies the cache files of ensure_code_cache's `from` into the DENO_DIR
/// `to`, owned by `uid`: a copy, since each sandbox's agent writes its own.
void seed_code_cache(const std::string& from, const std::string& to, uid_t uid);

/// The per-host cache: $SBX_DENO_CACHE, else /var/cache/sbx/deno (root) or
/// ~/.cache/sbx/deno. World-readable, written only by whoever runs sbx.
std::string cache_dir();

/// A copy of the agent's sources in the cache, named by their content, so
/// that a sandbox's unprivileged uid can read them wherever sbx itself lives.
std::string stage_agent(const Runtime& rt, const std::string& cache);

}  // namespace sbx::deno
