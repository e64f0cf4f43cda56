// Makes the Pyodide memory snapshot the agent's interpreters start from
// (~0.2 s instead of ~2 s of loading). Run once per host by the deno driver.
// Usage: deno run --allow-read=PYODIDE_DIR --allow-write=OUT_DIR snapshot.ts PYODIDE_DIR OUT_FILE
const [indexURL, out] = Deno.args;
const { loadPyodide } = await import(new URL("pyodide.mjs", "file://" + indexURL.replace(/\/?$/, "/")).href);
const py = await loadPyodide({ indexURL: indexURL.replace(/\/?$/, "/"), _makeSnapshot: true });
// What nearly every exec imports anyway, loaded once here.
py.runPython("import sys, os, builtins, traceback, runpy, json, re, code, socket, errno");
const snap: Uint8Array = py.makeMemorySnapshot();
const tmp = `${out}.tmp-${Deno.pid}`;
Deno.writeFileSync(tmp, snap, { mode: 0o644 });
Deno.renameSync(tmp, out);
