// The store's tree inside Pyodide's in-memory file system (Emscripten FS):
// loaded before an exec when stale, and compared afterwards so that only
// what the exec changed goes back to the store.
import type { Changes, Entry } from "./store.ts";

// Pyodide's own trees, never mirrored.
const SYSTEM = new Set(["/dev", "/proc", "/sys", "/lib"]);

interface Sig {
  type: Entry["type"];
  mode: number;
  mtimeMs: number;
  size: number;
  target: string;
}

// deno-lint-ignore no-explicit-any
type EmFS = any;

export class FsMirror {
  private fs: EmFS;
  private known = new Map<string, Sig>();

  attach(fs: EmFS) {
    this.fs = fs;
    this.known = this.scan();
  }

  /// Replaces the mirrored tree with the store's.
  load(tree: Entry[]) {
    const fs = this.fs;
    const paths = [...this.scan().keys()].sort().reverse(); // children before parents
    for (const p of paths) {
      try {
        const st = fs.lstat(p);
        if (fs.isDir(st.mode)) fs.rmdir(p);
        else fs.unlink(p);
      } catch {
        // A directory Pyodide needs (/tmp, /home) may stay; its entry is rewritten below.
      }
    }
    for (const e of tree) {
      try {
        if (e.type === "dir") {
          if (!fs.analyzePath(e.path).exists) fs.mkdir(e.path, e.mode);
          fs.chmod(e.path, e.mode);
        } else if (e.type === "symlink") {
          fs.symlink(e.target ?? "", e.path);
        } else {
          fs.writeFile(e.path, e.data ?? new Uint8Array());
          fs.chmod(e.path, e.mode);
        }
        if (e.type !== "symlink") fs.utime(e.path, e.mtime * 1000, e.mtime * 1000);
      } catch (err) {
        console.error(`sbx: cannot load ${e.path} into the interpreter: ${err}`);
      }
    }
    this.known = this.scan();
  }

  /// What changed since load() or the previous collect().
  collect(): Changes {
    const now = this.scan();
    const put: Entry[] = [];
    const del: string[] = [];
    for (const [p, s] of now) {
      const k = this.known.get(p);
      if (k && k.type === s.type && k.mode === s.mode && k.mtimeMs === s.mtimeMs && k.size === s.size &&
          k.target === s.target) continue;
      const e: Entry = { path: p, type: s.type, mode: s.mode, mtime: Math.floor(s.mtimeMs / 1000) };
      if (s.type === "file") e.data = this.fs.readFile(p);
      if (s.type === "symlink") e.target = s.target;
      put.push(e);
    }
    for (const p of this.known.keys()) if (!now.has(p)) del.push(p);
    this.known = now;
    // A removed directory takes its children along in the store.
    const gone = new Set(del);
    return { put, del: del.filter((p) => !gone.has(p.slice(0, p.lastIndexOf("/")))) };
  }

  private scan(): Map<string, Sig> {
    const out = new Map<string, Sig>();
    const fs = this.fs;
    const walk = (dir: string) => {
      for (const name of fs.readdir(dir)) {
        if (name === "." || name === "..") continue;
        const p = dir === "/" ? "/" + name : dir + "/" + name;
        if (dir === "/" && SYSTEM.has(p)) continue;
        const st = fs.lstat(p);
        const type = fs.isDir(st.mode) ? "dir" : fs.isLink(st.mode) ? "symlink" : fs.isFile(st.mode) ? "file" : null;
        if (!type) continue;
        out.set(p, {
          type,
          mode: st.mode & 0o7777,
          mtimeMs: new Date(st.mtime).getTime(),
          size: type === "file" ? st.size : 0,
          target: type === "symlink" ? fs.readlink(p) : "",
        });
        if (type === "dir") walk(p);
      }
    };
    walk("/");
    return out;
  }
}
