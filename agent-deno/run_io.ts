// What an exec's runner (py_pool.ts, js_pool.ts) gets from the agent's Exec:
// where its output goes, how it is stopped, its input.
export interface RunIO {
  out: (fd: number, b: Uint8Array, outflow?: Int32Array) => void;
  setKiller: (k: (sig: number) => void) => void;
  /// Gets the exec's input: bytes, an empty array (one end of input, from a
  /// terminal's Ctrl-D) or null (the end).
  setStdinSink: (s: (b: Uint8Array | null) => void) => void;
  allStdin: () => Promise<Uint8Array>;
  /// What the terminal's Ctrl-C does for this exec.
  setInterrupter: (i: () => void) => void;
  kill: (sig: number) => void;
  tty: boolean;
  otherDrivers: string;
}
