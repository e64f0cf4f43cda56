// The sandbox's files: one SQLite database in its state directory. Every
// path is absolute and clean ("/work/a.txt"); "/" is an implicit directory.
// An exec's changes land in one transaction after it ends, so a killed exec
// or a crashed agent never leaves half of them behind.
import { DatabaseSync } from "node:sqlite";
import { ProtoError } from "./protocol.ts";

export interface Entry {
  path: string;
  type: "file" | "dir" | "symlink";
  mode: number;
  mtime: number; // seconds since the epoch
  data?: Uint8Array; // files only
  target?: string; // symlinks only
  size?: number;
}

/// One exec's effect on the tree: entries written (whole) and paths removed.
export interface Changes {
  put: Entry[];
  del: string[];
}

/// Resolves "." and "..", never above "/" (like a chroot).
export function cleanPath(p: string, cwd = "/"): string {
  const parts: string[] = [];
  for (const s of (p.startsWith("/") ? p : cwd + "/" + p).split("/")) {
    if (s === "" || s === ".") continue;
    if (s === "..") parts.pop();
    else parts.push(s);
  }
  return "/" + parts.join("/");
}

export function parentOf(p: string): string {
  const i = p.lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}

const ROOT: Entry = { path: "/", type: "dir", mode: 0o755, mtime: 0 };

export class Store {
  private db: DatabaseSync;
  /// Bumped on every change, so a worker knows when its copy of the tree is stale.
  generation = 1;

  constructor(file: string) {
    this.db = new DatabaseSync(file);
    this.db.exec(`PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
      CREATE TABLE IF NOT EXISTS entries (path TEXT PRIMARY KEY, type TEXT NOT NULL, mode INTEGER NOT NULL,
        mtime INTEGER NOT NULL, data BLOB, target TEXT)`);
  }

  get(path: string): Entry | null {
    if (path === "/") return { ...ROOT };
    const r = this.db.prepare("SELECT path, type, mode, mtime, length(data) AS size, target FROM entries WHERE path = ?")
      .get(path) as Record<string, unknown> | undefined;
    return r ? rowEntry(r) : null;
  }

  read(path: string): Uint8Array {
    const r = this.db.prepare("SELECT type, data FROM entries WHERE path = ?").get(path) as
      | { type: string; data: Uint8Array | null }
      | undefined;
    if (!r) throw new ProtoError("not_found", `${path}: No such file or directory`);
    if (r.type !== "file") throw new ProtoError("invalid_argument", `${path} is a ${r.type}, not a regular file`);
    return r.data ?? new Uint8Array();
  }

  /// Children of a directory (every descendant when recursive), without file data.
  children(path: string, recursive: boolean): Entry[] {
    const prefix = path === "/" ? "/" : path + "/";
    const rows = this.db.prepare(
      "SELECT path, type, mode, mtime, length(data) AS size, target FROM entries WHERE substr(path, 1, ?) = ? ORDER BY path",
    ).all(prefix.length, prefix) as Record<string, unknown>[];
    const out = rows.map(rowEntry);
    return recursive ? out : out.filter((e) => !e.path.slice(prefix.length).includes("/"));
  }

  /// Every entry with its data: what a worker loads into its file system.
  dump(): Entry[] {
    const rows = this.db.prepare("SELECT path, type, mode, mtime, data, target FROM entries ORDER BY path").all() as
      Record<string, unknown>[];
    return rows.map((r) => ({ ...rowEntry(r), data: (r.data as Uint8Array | null) ?? undefined }));
  }

  /// Applies one upload or one exec's changes atomically.
  apply(ch: Changes) {
    if (ch.put.length === 0 && ch.del.length === 0) return;
    const del = this.db.prepare("DELETE FROM entries WHERE path = ? OR substr(path, 1, ?) = ?");
    const put = this.db.prepare(
      "INSERT OR REPLACE INTO entries (path, type, mode, mtime, data, target) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.db.exec("BEGIN IMMEDIATE");
    try {
      for (const p of ch.del) del.run(p, p.length + 1, p + "/");
      for (const e of ch.put) {
        put.run(e.path, e.type, e.mode & 0o7777, Math.trunc(e.mtime), e.type === "file" ? (e.data ?? new Uint8Array()) : null,
          e.type === "symlink" ? e.target ?? "" : null);
      }
      this.db.exec("COMMIT");
    } catch (err) {
      this.db.exec("ROLLBACK");
      throw err;
    }
    this.generation++;
  }

  /// Checks that an upload to `path` of `kind` may go ahead, as the native agent does.
  checkWrite(path: string, kind: string) {
    if (path === "/") throw new ProtoError("conflict", "/ exists and is a directory");
    const parent = this.get(parentOf(path));
    if (!parent) throw new ProtoError("not_found", `${parentOf(path)}: No such file or directory`);
    if (parent.type !== "dir") throw new ProtoError("not_found", `${parentOf(path)}: Not a directory`);
    const cur = this.get(path);
    if (kind === "dir" && cur && cur.type !== "dir") throw new ProtoError("conflict", `${path} exists and is not a directory`);
    if (kind !== "dir" && cur?.type === "dir") throw new ProtoError("conflict", `${path} exists and is a directory`);
  }

  /// mkdir -p, for the workdir at start.
  ensureDir(path: string) {
    const put: Entry[] = [];
    for (let p = path; p !== "/"; p = parentOf(p)) {
      if (this.get(p)) break;
      put.unshift({ path: p, type: "dir", mode: 0o755, mtime: Math.floor(Date.now() / 1000) });
    }
    this.apply({ put, del: [] });
  }

  close() {
    this.db.close();
  }
}

function rowEntry(r: Record<string, unknown>): Entry {
  const e: Entry = {
    path: r.path as string,
    type: r.type as Entry["type"],
    mode: Number(r.mode),
    mtime: Number(r.mtime),
  };
  if (e.type === "file") e.size = Number(r.size ?? (r.data as Uint8Array | null)?.length ?? 0);
  if (e.type === "symlink") e.target = (r.target as string) ?? "";
  return e;
}
