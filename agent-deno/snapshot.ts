// Makes the Pyodide memory snapshot the agent's interpreters start from
// (~0.2 s instead of ~2 s of loading). Run once per host by the deno driver.
// Usage: deno run --allow-read=PYODIDE_DIR --allow-write=OUT_DIR snapshot.ts PYODIDE_DIR OUT_FILE
import { RUNNER } from "./py_runner.ts";

const [indexURL, out] = Deno.args;
const { loadPyodide } = await import(new URL("pyodide.mjs", "file://" + indexURL.replace(/\/?$/, "/")).href);
const py = await loadPyodide({ indexURL: indexURL.replace(/\/?$/, "/"), _makeSnapshot: true });
// What nearly every exec imports anyway, loaded once here. importlib.metadata
// is what the runner's importlib.invalidate_caches() imports on every exec
// (~90 ms under the CPU cap, ~360 ms for an interpreter's first one).
py.runPython("import sys, os, builtins, traceback, runpy, json, re, code, socket, errno, importlib, importlib.metadata");
// The exec runner too (~60 ms of each interpreter's load): it holds no JS
// objects, only Python, so it survives the snapshot. py_worker.ts runs it
// itself when the interpreter has none.
py.runPython(RUNNER);
const snap: Uint8Array = py.makeMemorySnapshot();
const tmp = `${out}.tmp-${Deno.pid}`;
Deno.writeFileSync(tmp, snap, { mode: 0o644 });
Deno.renameSync(tmp, out);
