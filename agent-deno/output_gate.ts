// Back-pressure for an exec's output, as a pipe gives a native command: a
// Worker's writes block while more than HIGH_WATER bytes of its output are
// still on their way to the host, so code that prints without end holds
// itself back instead of filling the agent's memory.
//
// The count lives in a SharedArrayBuffer: the Worker adds what it posts, the
// agent subtracts what the socket has taken.

export const HIGH_WATER = 1 << 20;
const PIECE = 64 * 1024;

/// Worker side.
export class OutputGate {
  constructor(private inflight: Int32Array, private stopped: () => boolean) {}

  /// Posts bytes in pieces, waiting for room before each; drops the rest once stopped.
  send(post: (piece: Uint8Array) => void, bytes: Uint8Array) {
    for (let off = 0; off < bytes.length; off += PIECE) {
      for (;;) {
        if (this.stopped()) return;
        const now = Atomics.load(this.inflight, 0);
        if (now <= HIGH_WATER) break;
        Atomics.wait(this.inflight, 0, now, 50);
      }
      const piece = bytes.slice(off, off + PIECE);
      Atomics.add(this.inflight, 0, piece.length);
      post(piece);
    }
  }
}

/// Agent side: the socket took (or will never take) n bytes of the Worker's output.
export function released(inflight: Int32Array, n: number) {
  Atomics.sub(inflight, 0, n);
  Atomics.notify(inflight, 0);
}
